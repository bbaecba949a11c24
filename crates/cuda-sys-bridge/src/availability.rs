//! Whether CUDA can be used here, decided once per process. cudarc panics when it cannot
//! load `libcuda`, or at the first call of a function the library lacks, so the library and
//! every function this crate calls are checked before any driver call.

use crate::driver;
use cuda_arena_core::{ArenaError, Result};
use std::sync::OnceLock;

static STATE: OnceLock<std::result::Result<(), String>> = OnceLock::new();

fn probe() -> std::result::Result<(), String> {
    if !driver::library_present() {
        return Err("the CUDA driver library (libcuda.so.1) was not found".into());
    }
    // cudarc looks each function up at its first call and panics when one is missing: a
    // driver library that lacks one is no driver here.
    if let Some((library, symbol)) = driver::missing_symbol() {
        return Err(format!(
            "the CUDA driver library {library} lacks {symbol}: an incomplete or foreign libcuda"
        ));
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

#[cfg(test)]
mod tests {
    /// Every `sys::cu…` function this crate's sources name is checked at start-up.
    #[test]
    fn every_driver_function_named_in_the_sources_is_in_the_checked_list() {
        let sources = [
            include_str!("driver.rs"),
            include_str!("vmm.rs"),
            include_str!("pool.rs"),
            include_str!("events.rs"),
            include_str!("stream.rs"),
            include_str!("raw.rs"),
            include_str!("device.rs"),
            include_str!("backend.rs"),
            include_str!("baseline.rs"),
        ];
        for src in sources {
            for (i, _) in src.match_indices("sys::cu") {
                let name: String = src[i + 5..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // Functions are `cuName`; types (`sys::CUresult`) and `culib` are not.
                if name.len() > 2
                    && name.starts_with("cu")
                    && name.as_bytes()[2].is_ascii_uppercase()
                {
                    assert!(
                        super::driver::SYMBOLS.contains(&name.as_str()),
                        "{name} is called but not checked"
                    );
                }
            }
        }
    }
}
