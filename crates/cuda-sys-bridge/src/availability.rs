//! Whether CUDA can be used here, decided once per process. cudarc panics when it cannot
//! load `libcuda`, so the library's presence is checked before any driver call.

use crate::driver;
use cuda_arena_core::{ArenaError, Result};
use std::sync::OnceLock;

static STATE: OnceLock<std::result::Result<(), String>> = OnceLock::new();

fn probe() -> std::result::Result<(), String> {
    if !driver::library_present() {
        return Err("the CUDA driver library (libcuda.so.1) was not found".into());
    }
    driver::init().map_err(|e| format!("cuInit failed: {e}"))?;
    match driver::device_count() {
        Ok(0) => Err("the CUDA driver reports no device".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cuDeviceGetCount failed: {e}")),
    }
}

/// `Ok` when a CUDA driver with at least one device is usable, else `ERR_NO_CUDA` with why.
pub fn ensure_cuda() -> Result<()> {
    STATE
        .get_or_init(probe)
        .clone()
        .map_err(|reason| ArenaError::NoCuda { reason })
}

/// Whether [`ensure_cuda`] succeeds. Never panics.
pub fn cuda_available() -> bool {
    ensure_cuda().is_ok()
}
