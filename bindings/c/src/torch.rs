//! PyTorch's pluggable-allocator entry points (issue 13): the functions
//! `torch.cuda.memory.CUDAPluggableAllocator` loads by name and the setters of its
//! `allocator()` take by address, with torch's signatures. Glue only: the behaviour is
//! `cuda_arena_core::PluggableDevice` (streams the host owns, `record_stream`, the memory
//! fraction, `empty_cache`), one per device, each a user of the process-wide factory's shared
//! device allocator (the one `cuda_arena_create("cuda", "Cuda", d, ...)` joins too).
//!
//! Configuration comes from the environment, read once at the first call: `CUDA_ARENA_CONF`
//! (`arena.*` pairs, see `cuda_arena_core::devices::env_config`) and, for tests only,
//! `CUDA_ARENA_TORCH_BACKEND` (`host` or `virtual` instead of `cuda`). A bad value is reported
//! on stderr once, naming the key; every allocation then fails (NULL, last error
//! `CUDA_ARENA_ERR_OUT_OF_MEMORY` with a message naming the key) rather than running with
//! defaults. torch's callbacks return nothing (or a pointer torch does not check), so every
//! failure other than that one is also written to stderr; each sets the thread's last error.
//! Nothing unwinds into torch.

use crate::codes::*;
use crate::handle::{
    cuda_arena_device_stats, cuda_arena_stats, guard, guard_uncancellable, invalid,
    named_factory_for,
};
use cuda_arena_core::devices::env_config::describe_env_error;
use cuda_arena_core::{env_config, ArenaConfig, ArenaError, Factory, PluggableDevice, ENV_CONF};
use cuda_sys_bridge::BACKEND_NAMES;
use parking_lot::Mutex;
use std::ffi::{c_int, c_void};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Chooses the backend, for tests: `host` or `virtual`; unset: `cuda`.
pub const TORCH_BACKEND_ENV: &str = "CUDA_ARENA_TORCH_BACKEND";

/// Devices served; torch's device indices are below this.
const MAX_DEVICES: usize = 64;

/// The process's torch state: the setup read from the environment, and the devices used.
struct Torch {
    setup: Result<(Arc<Factory>, ArenaConfig), ArenaError>,
    devices: [OnceLock<Arc<PluggableDevice>>; MAX_DEVICES],
    /// Whether a device's arena failed to be made and that was said on stderr (once a device).
    reported: [AtomicBool; MAX_DEVICES],
    /// Held while a device is made, so two threads make one.
    making: Mutex<()>,
}

static TORCH: OnceLock<Torch> = OnceLock::new();

/// Writes one line to stderr; a closed stderr is not an error worth failing over.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "cuda-arena: {line}");
}

fn read_setup() -> Result<(Arc<Factory>, ArenaConfig), ArenaError> {
    let var = |name: &str| match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(ArenaError::InvalidConfig {
            key: name.to_string(),
            value: v.to_string_lossy().into_owned(),
            reason: "is not UTF-8".into(),
        }),
    };
    let backend = var(TORCH_BACKEND_ENV)?.unwrap_or_else(|| "cuda".to_string());
    if !BACKEND_NAMES.contains(&backend.as_str()) {
        return Err(ArenaError::InvalidConfig {
            key: TORCH_BACKEND_ENV.into(),
            value: backend,
            reason: "must be cuda, host or virtual (host and virtual are for tests)".into(),
        });
    }
    let config = env_config(&var(ENV_CONF)?.unwrap_or_default())?;
    let factory = named_factory_for(&format!("c-abi-{backend}"), &backend)?;
    Ok((factory, config))
}

/// A bad setup in one line, naming the variable and the key.
fn describe(e: &ArenaError) -> String {
    match e {
        ArenaError::InvalidConfig { key, .. } if key == TORCH_BACKEND_ENV => {
            format!("{TORCH_BACKEND_ENV} is invalid: {e}")
        }
        _ => describe_env_error(e),
    }
}

/// Why a device's arena could not be made, in one line naming the key where a key is why.
fn describe_device_error(e: &ArenaError) -> String {
    match e {
        ArenaError::InvalidConfig { .. } => describe(e),
        _ => format!("{}: {e}", e.code()),
    }
}

fn torch() -> &'static Torch {
    TORCH.get_or_init(|| {
        let setup = read_setup();
        // Runs once per process: the one report of a bad setup.
        match &setup {
            Err(e @ ArenaError::InvalidConfig { .. }) => report(&format!(
                "{}; every allocation will fail until it is fixed",
                describe(e)
            )),
            Err(e) => report(&format!("cannot serve PyTorch: {}: {e}", e.code())),
            Ok(_) => {}
        }
        Torch {
            setup,
            devices: [const { OnceLock::new() }; MAX_DEVICES],
            reported: [const { AtomicBool::new(false) }; MAX_DEVICES],
            making: Mutex::new(()),
        }
    })
}

/// The device `device`, joined on first use.
fn device(device: c_int) -> Result<Arc<PluggableDevice>, ArenaError> {
    let t = torch();
    let (factory, config) = t.setup.as_ref().map_err(Clone::clone)?;
    let index = usize::try_from(device)
        .ok()
        .filter(|&i| i < MAX_DEVICES)
        .ok_or_else(|| {
            invalid(format!(
                "device {device} is not a device index below {MAX_DEVICES}"
            ))
        })?;
    let slot = &t.devices[index];
    if let Some(d) = slot.get() {
        return Ok(d.clone());
    }
    let _making = t.making.lock();
    if let Some(d) = slot.get() {
        return Ok(d.clone());
    }
    let (d, warnings) = match PluggableDevice::new(factory.clone(), device as u32, config) {
        Ok(made) => made,
        Err(e) => {
            // A setup that parses but that the device refuses (a page size below its
            // granularity, say): PyTorch shows none of it but an out-of-memory error, so it is
            // said here, once a device.
            if !t.reported[index].swap(true, Ordering::Relaxed) {
                report(&format!(
                    "device {device} cannot be served: {}; every allocation on it will fail",
                    describe_device_error(&e)
                ));
            }
            return Err(e);
        }
    };
    for w in warnings {
        report(&w);
    }
    let d = Arc::new(d);
    // Set under `making`, so the slot is empty here.
    let _ = slot.set(d.clone());
    Ok(d)
}

/// The devices made so far.
fn devices_made() -> Vec<Arc<PluggableDevice>> {
    torch()
        .devices
        .iter()
        .filter_map(|s| s.get().cloned())
        .collect()
}

/// Records `e` as the thread's last error and writes it to stderr, unless it is the bad
/// setup, already reported once.
fn failed(what: &str, e: &ArenaError) {
    fail(e);
    if !matches!(&torch().setup, Err(setup) if setup == e) {
        report(&format!("{what} failed: {}: {e}", e.code()));
    }
}

/// torch's `alloc_fn`: `size` bytes on `device` for use on `stream` (NULL: the legacy default
/// stream). NULL for size 0 and on failure.
#[no_mangle]
pub extern "C" fn cuda_arena_torch_alloc(
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let r = match self::device(device) {
            Ok(d) => d.alloc(size as u64, stream.addr() as u64),
            // A bad setup fails every allocation as out of memory, naming the key.
            Err(e @ ArenaError::InvalidConfig { .. }) => {
                fail(&ArenaError::OutOfMemory {
                    requested: size as u64,
                    reason: format!("cuda-arena is not configured: {}", describe(&e)),
                });
                return std::ptr::null_mut();
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(p) => {
                clear_last();
                p.unwrap_or(0) as usize as *mut c_void
            }
            Err(e) => {
                failed(
                    &format!("allocating {size} bytes on device {device} for PyTorch"),
                    &e,
                );
                std::ptr::null_mut()
            }
        }
    })
}

/// torch's `free_fn`: frees `ptr` (from `cuda_arena_torch_alloc` with `device` and `stream`).
/// `size` is not needed: the allocator knows it.
#[no_mangle]
pub extern "C" fn cuda_arena_torch_free(
    ptr: *mut c_void,
    size: usize,
    device: c_int,
    stream: *mut c_void,
) {
    let _ = size;
    guard((), || {
        if ptr.is_null() {
            clear_last();
            return;
        }
        match self::device(device).and_then(|d| d.free(ptr.addr() as u64, stream.addr() as u64)) {
            Ok(()) => clear_last(),
            Err(e) => failed(
                &format!("freeing {ptr:p} on device {device} for PyTorch"),
                &e,
            ),
        }
    })
}

/// torch's `init_fn`: reads the setup (reporting a bad one now rather than at the first
/// allocation). Devices are joined on first use.
#[no_mangle]
pub extern "C" fn cuda_arena_torch_init(device_count: c_int) {
    let _ = device_count;
    guard_uncancellable((), || {
        let _ = torch();
    })
}

/// torch's `reset_fn` (`torch.cuda.empty_cache()`): every device used hands the memory no
/// block uses back to the driver.
#[no_mangle]
pub extern "C" fn cuda_arena_torch_empty_cache() {
    guard_uncancellable((), || {
        let mut last = Ok(());
        for d in devices_made() {
            if let Err(e) = d.empty_cache() {
                failed("empty_cache", &e);
                last = Err(());
            }
        }
        if last.is_ok() {
            clear_last();
        }
    })
}

/// torch's `memory_fraction_fn` (`torch.cuda.set_per_process_memory_fraction`): device
/// `device` may hold at most `fraction` (0 to 1) of its memory; see `PluggableDevice`.
#[no_mangle]
pub extern "C" fn cuda_arena_torch_set_memory_fraction(fraction: f64, device: c_int) {
    guard_uncancellable((), || {
        match self::device(device).and_then(|d| d.set_memory_fraction(fraction)) {
            Ok(()) => clear_last(),
            Err(e) => failed(
                &format!("setting the memory fraction {fraction} of device {device}"),
                &e,
            ),
        }
    })
}

/// torch's `record_stream_fn` (`Tensor.record_stream`): the live block `ptr` is also used on
/// `stream`; its free will wait for that stream's work.
#[no_mangle]
pub extern "C" fn cuda_arena_torch_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    guard_uncancellable((), || {
        let (addr, token) = (ptr.addr() as u64, stream.addr() as u64);
        let mut err = None;
        // The block's device is not given: it is the device that knows the pointer.
        for d in devices_made() {
            match d.record_stream(addr, token) {
                Ok(()) => {
                    clear_last();
                    return;
                }
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        let e = match torch().setup.as_ref() {
            Err(setup) => setup.clone(),
            Ok(_) => err.unwrap_or_else(|| ArenaError::UnknownPointer {
                addr,
                reason: "no device has allocated it".into(),
            }),
        };
        failed(&format!("record_stream of {ptr:p}"), &e);
    })
}

/// The counters of device `device`'s allocator, as `cuda_arena_get_stats` gives them (readable
/// from Python through ctypes). `CUDA_ARENA_OK`, or an error code (`out` untouched).
///
/// # Safety
/// `out` is NULL or writable for one `cuda_arena_stats`.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_torch_stats(
    device: c_int,
    out: *mut cuda_arena_stats,
) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || {
        if out.is_null() {
            return fail(&invalid("out is NULL"));
        }
        match self::device(device) {
            Ok(d) => {
                // SAFETY: `out` is non-NULL and writable per the contract.
                unsafe { out.write(d.stats().into()) };
                clear_last();
                CUDA_ARENA_OK
            }
            Err(e) => fail(&e),
        }
    })
}

/// What reached device `device`'s driver (`cuda_arena_get_device_stats` for PyTorch's
/// allocator), its allocator set up if it was not. `CUDA_ARENA_OK`, or an error code (`out`
/// untouched).
///
/// # Safety
/// `out` is NULL or writable for one `cuda_arena_device_stats`.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_torch_device_stats(
    device: c_int,
    out: *mut cuda_arena_device_stats,
) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || {
        if out.is_null() {
            return fail(&invalid("out is NULL"));
        }
        match self::device(device).and_then(|d| d.device_stats()) {
            Ok(s) => {
                // SAFETY: `out` is non-NULL and writable per the contract.
                unsafe { out.write(s.into()) };
                clear_last();
                CUDA_ARENA_OK
            }
            Err(e) => fail(&e),
        }
    })
}
