//! The ONNX Runtime entry points of `include/cuda_arena.h`: an `OrtAllocator` view of a handle,
//! and the plugin-EP allocator calls. Thin: the views and the EP logic are `cuda-arena-ort`'s.
//! ORT's objects come from the host and are passed through; EP handles, like allocator handles,
//! are values that name a table entry and are never dereferenced.

use crate::codes::*;
use crate::handle::{
    cuda_arena_allocator, guard_uncancellable, invalid, named_factory_for, str_arg, with,
};
use cuda_arena_core::ArenaError;
use cuda_arena_ort::ort_sys::{
    OrtAllocator, OrtApi, OrtKeyValuePairs, OrtLogger, OrtMemoryInfo, OrtStatus,
};
use cuda_arena_ort::{
    keep_until_exit, release_kept, AllocatorUser, EpAllocators, HostApi, OrtAllocatorView,
    ViewOptions,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, OnceLock};

/// Failures of ORT's callbacks go to the C library's last error too.
fn c_error(e: &ArenaError) {
    fail(e);
}

/// A host seen in this process, to make a status with when a call names no live EP handle.
static ANY_HOST: OnceLock<HostApi> = OnceLock::new();

/// # Safety
/// As `HostApi::new`.
unsafe fn host_of(api: *const OrtApi, version: u32) -> Result<HostApi, ArenaError> {
    // SAFETY: forwarded.
    let host = unsafe { HostApi::new(api, version) }?;
    let _ = ANY_HOST.set(host);
    Ok(host)
}

/// # Safety
/// As `cuda_arena_ort_allocator`.
unsafe fn view_of(
    a: *mut cuda_arena_allocator,
    api: *const OrtApi,
    version: u32,
    logger: *const OrtLogger,
) -> Result<*mut OrtAllocator, ArenaError> {
    // SAFETY: forwarded from the caller's contract.
    let host = unsafe { host_of(api, version) }?;
    let user = with(a, |h| {
        AllocatorUser::retain(h.factory.clone(), h.allocator.clone(), h.streams.clone())
    })?;
    let options = ViewOptions {
        logger,
        memory_info: std::ptr::null(),
        on_error: Some(c_error),
    };
    // SAFETY: the logger outlives the view per the caller's contract.
    let view = unsafe { OrtAllocatorView::new(user, host, options) }?;
    Ok(keep_until_exit(view))
}

/// The `OrtAllocator` view of `a`; NULL and `err` on failure. See the header.
///
/// # Safety
/// `api` is NULL or ORT's `GetApi(v)` for some `v >= version`, with the library loaded until
/// exit; `logger` is NULL or an ORT logger that lives until exit; `err` has room for
/// `err_len` bytes (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_ort_allocator(
    a: *mut cuda_arena_allocator,
    api: *const OrtApi,
    version: u32,
    logger: *const OrtLogger,
    err: *mut c_char,
    err_len: usize,
) -> *mut OrtAllocator {
    guard_uncancellable(std::ptr::null_mut(), || {
        // SAFETY: forwarded.
        match unsafe { view_of(a, api, version, logger) } {
            Ok(p) => {
                clear_last();
                copy_out("", err, err_len);
                p
            }
            Err(e) => {
                fail(&e);
                copy_out(&format!("{}: {e}", e.code()), err, err_len);
                std::ptr::null_mut()
            }
        }
    })
}

/// Lets the view's user go; see the header. Never dereferences a value that is not a view.
#[no_mangle]
pub extern "C" fn cuda_arena_ort_allocator_release(allocator: *mut OrtAllocator) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || match release_kept(allocator) {
        Ok(()) => {
            clear_last();
            CUDA_ARENA_OK
        }
        Err(e) => fail(&e),
    })
}

/// Opaque to C: an EP handle's value names an entry of [`EPS`].
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct cuda_arena_ort_ep {
    _opaque: [u8; 0],
}

/// Live EP handles: value → allocators. Values are never reused (a counter), so a destroyed
/// handle stays unknown.
static EPS: Mutex<(usize, BTreeMap<usize, Arc<EpAllocators>>)> = Mutex::new((0, BTreeMap::new()));

fn ep_of(ep: *const cuda_arena_ort_ep) -> Result<Arc<EpAllocators>, ArenaError> {
    EPS.lock().1.get(&ep.addr()).cloned().ok_or_else(|| {
        if ep.is_null() {
            invalid("the EP handle is NULL")
        } else {
            ArenaError::Released {
                what: "the EP handle (destroyed, or never made by cuda_arena_ort_ep_create)".into(),
            }
        }
    })
}

/// # Safety
/// As `cuda_arena_ort_ep_create`.
unsafe fn ep_create(
    backend: *const c_char,
    factory_name: *const c_char,
    api: *const OrtApi,
    version: u32,
    logger: *const OrtLogger,
) -> Result<*mut cuda_arena_ort_ep, ArenaError> {
    // SAFETY: forwarded.
    let backend = unsafe { str_arg(backend, "backend") }?;
    // SAFETY: forwarded.
    let name = unsafe { str_arg(factory_name, "factory_name") }?;
    if name.is_empty() {
        return Err(invalid("factory_name is empty"));
    }
    // SAFETY: forwarded.
    let host = unsafe { host_of(api, version) }?;
    let factory = named_factory_for(name, backend)?;
    // SAFETY: the logger outlives the EP handle per the caller's contract.
    let eps = Arc::new(unsafe { EpAllocators::new(factory, host, logger, Some(c_error)) });
    let mut table = EPS.lock();
    table.0 += 1;
    let id = table.0;
    table.1.insert(id, eps);
    Ok(std::ptr::without_provenance_mut(id))
}

/// The allocators of one plugin EP factory; NULL and `err` on failure. See the header.
///
/// # Safety
/// `backend` and `factory_name` are NUL-terminated strings; `api` as in
/// `cuda_arena_ort_allocator`; `logger` is NULL or an ORT logger that outlives the handle;
/// `err` has room for `err_len` bytes (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_ort_ep_create(
    backend: *const c_char,
    factory_name: *const c_char,
    api: *const OrtApi,
    version: u32,
    logger: *const OrtLogger,
    err: *mut c_char,
    err_len: usize,
) -> *mut cuda_arena_ort_ep {
    guard_uncancellable(std::ptr::null_mut(), || {
        // SAFETY: forwarded.
        match unsafe { ep_create(backend, factory_name, api, version, logger) } {
            Ok(ep) => {
                clear_last();
                copy_out("", err, err_len);
                ep
            }
            Err(e) => {
                fail(&e);
                copy_out(&format!("{}: {e}", e.code()), err, err_len);
                std::ptr::null_mut()
            }
        }
    })
}

/// The status for `e` from the EP's host, or any host seen; records `e` as the last error.
/// With no host ever seen no status can be made: NULL, which the header tells callers to read
/// with `*out` (NULL there is a failure).
fn status_for(ep: Option<&EpAllocators>, e: &ArenaError) -> *mut OrtStatus {
    fail(e);
    match ep.map(|ep| ep.host()).or_else(|| ANY_HOST.get().copied()) {
        Some(host) => host.error_status(e),
        None => std::ptr::null_mut(),
    }
}

/// `OrtEpFactory::CreateAllocator`. See the header.
///
/// # Safety
/// `memory_info` is NULL or ORT's memory info that outlives the allocator; `options` NULL or
/// ORT's key/value pairs; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_ort_ep_create_allocator(
    ep: *mut cuda_arena_ort_ep,
    memory_info: *const OrtMemoryInfo,
    options: *const OrtKeyValuePairs,
    replace: c_int,
    out: *mut *mut OrtAllocator,
) -> *mut OrtStatus {
    let internal = || status_for(None, &invalid("an internal error was caught"));
    guard_status(internal, || {
        set_last_warning(String::new());
        if out.is_null() {
            return status_for(ep_of(ep).ok().as_deref(), &invalid("out is NULL"));
        }
        // SAFETY: non-NULL and writable per the contract: NULL until success.
        unsafe { out.write(std::ptr::null_mut()) };
        let eps = match ep_of(ep) {
            Ok(eps) => eps,
            Err(e) => return status_for(None, &e),
        };
        // SAFETY: forwarded from the contract.
        match unsafe { eps.create_allocator(memory_info, options, replace != 0) } {
            Ok(made) => {
                clear_last();
                set_last_warning(made.warnings.join("; "));
                // SAFETY: as above.
                unsafe { out.write(made.allocator.as_ptr()) };
                std::ptr::null_mut()
            }
            Err(e) => status_for(Some(&eps), &e),
        }
    })
}

/// `OrtEpFactory::ReleaseAllocator`. See the header.
#[no_mangle]
pub extern "C" fn cuda_arena_ort_ep_release_allocator(
    ep: *mut cuda_arena_ort_ep,
    allocator: *mut OrtAllocator,
) {
    guard_uncancellable((), || {
        match ep_of(ep).and_then(|eps| eps.release_allocator(allocator)) {
            Ok(()) => clear_last(),
            Err(e) => {
                fail(&e);
            }
        }
    })
}

/// `OrtSyncStreamImpl::OnSessionRunEnd`. See the header.
#[no_mangle]
pub extern "C" fn cuda_arena_ort_ep_run_end(
    ep: *mut cuda_arena_ort_ep,
    device_id: c_int,
    stream_handle: *mut c_void,
) -> *mut OrtStatus {
    let internal = || status_for(None, &invalid("an internal error was caught"));
    guard_status(internal, || {
        let eps = match ep_of(ep) {
            Ok(eps) => eps,
            Err(e) => return status_for(None, &e),
        };
        let Ok(device) = u32::try_from(device_id) else {
            return status_for(
                Some(&eps),
                &invalid(format!("device_id {device_id} is negative")),
            );
        };
        if !stream_handle.is_null() {
            eps.run_end(device, stream_handle.addr() as u64);
        }
        clear_last();
        std::ptr::null_mut()
    })
}

/// Destroys an EP handle. See the header.
#[no_mangle]
pub extern "C" fn cuda_arena_ort_ep_destroy(ep: *mut cuda_arena_ort_ep) {
    guard_uncancellable((), || {
        if ep.is_null() {
            return;
        }
        let removed = EPS.lock().1.remove(&ep.addr());
        match removed {
            // Dropped outside the table's lock: the last users return memory.
            Some(eps) => {
                drop(eps);
                clear_last();
            }
            None => {
                fail(
                    &ep_of(ep)
                        .err()
                        .unwrap_or_else(|| invalid("unknown EP handle")),
                );
            }
        }
    })
}

/// As `guard_uncancellable`, for calls that return a status.
fn guard_status(
    on_panic: impl FnOnce() -> *mut OrtStatus,
    f: impl FnOnce() -> *mut OrtStatus,
) -> *mut OrtStatus {
    crate::handle::uncancellable(|| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(s) => s,
            Err(_) => on_panic(),
        }
    })
}
