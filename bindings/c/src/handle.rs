//! The entry points of `include/cuda_arena.h` that take an allocator handle.

use crate::codes::*;
use crate::handles::{self, Handle};
use cuda_arena_core::{
    named_factory, AllocatorStats, ArenaConfig, ArenaError, Factory, MemoryInfo, MemoryKind,
    RawStats,
};
use cuda_sys_bridge::{backend_named, unknown_backend, BACKEND_NAMES};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Opaque to C, and never dereferenced here either: a handle's value names a slot of the
/// live-handle table (see `handles.rs`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct cuda_arena_allocator {
    _opaque: [u8; 0],
}

/// The C layout of `cuda_arena_stats`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Default, Clone, Copy)]
pub struct cuda_arena_stats {
    pub limit: i64,
    pub in_use: u64,
    pub total_allocated: u64,
    pub max_in_use: u64,
    pub num_allocs: u64,
    pub num_reserves: u64,
    pub num_arena_extensions: u64,
    pub num_arena_shrinkages: u64,
    pub max_alloc_size: u64,
    pub requested_in_use: u64,
    pub reserved_bytes: u64,
}

impl From<AllocatorStats> for cuda_arena_stats {
    fn from(s: AllocatorStats) -> Self {
        cuda_arena_stats {
            limit: s.limit,
            in_use: s.in_use,
            total_allocated: s.total_allocated,
            max_in_use: s.max_in_use,
            num_allocs: s.num_allocs,
            num_reserves: s.num_reserves,
            num_arena_extensions: s.num_arena_extensions,
            num_arena_shrinkages: s.num_arena_shrinkages,
            max_alloc_size: s.max_alloc_size,
            requested_in_use: s.requested_in_use,
            reserved_bytes: s.reserved_bytes,
        }
    }
}

/// The C layout of `cuda_arena_device_stats`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Default, Clone, Copy)]
pub struct cuda_arena_device_stats {
    pub raw_allocs: u64,
    pub raw_frees: u64,
    pub raw_failures: u64,
    pub raw_bytes_outstanding: u64,
    pub device_waits: u64,
    pub stream_waits: u64,
}

impl From<RawStats> for cuda_arena_device_stats {
    fn from(s: RawStats) -> Self {
        cuda_arena_device_stats {
            raw_allocs: s.raw_allocs,
            raw_frees: s.raw_frees,
            raw_failures: s.raw_failures,
            raw_bytes_outstanding: s.raw_bytes_outstanding,
            device_waits: s.device_waits,
            stream_waits: s.stream_waits,
        }
    }
}

pub(crate) fn invalid(reason: impl Into<String>) -> ArenaError {
    ArenaError::InvalidArgument {
        reason: reason.into(),
    }
}

/// Runs `f` with panics caught; a panic becomes `CUDA_ARENA_ERR_PANIC` and `on_panic`.
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_last(
                CUDA_ARENA_ERR_PANIC,
                "an internal error was caught at the C boundary".into(),
            );
            on_panic
        }
    }
}

/// As [`guard`], with this thread's cancellation disabled for the call, for the entry points
/// that open, read or write files or wait for a thread: a `pthread_cancel` acted on inside
/// them would unwind through the guard, which glibc answers by aborting the process. A
/// cancel requested meanwhile acts at the caller's next cancellation point instead.
pub(crate) fn guard_uncancellable<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    uncancellable(|| guard(on_panic, f))
}

// The libc crate does not bind it; glibc's and musl's values.
extern "C" {
    fn pthread_setcancelstate(state: c_int, oldstate: *mut c_int) -> c_int;
}
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Runs `f` with this thread's cancellation disabled (see [`guard_uncancellable`]).
pub(crate) fn uncancellable<T>(f: impl FnOnce() -> T) -> T {
    let mut old: c_int = 0;
    // SAFETY: pthread_setcancelstate writes only the previous state, into `old`.
    let set = unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let r = f();
    if set == 0 {
        let mut ignored: c_int = 0;
        // SAFETY: as above; `old` is the state this call found.
        unsafe { pthread_setcancelstate(old, &mut ignored) };
    }
    r
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, name: &str) -> Result<&'a str, ArenaError> {
    if p.is_null() {
        return Err(invalid(format!("{name} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract above.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(format!("{name} is not UTF-8")))
}

/// The process-wide factory `name` over the backend named `backend` ("cuda", "host",
/// "virtual").
pub(crate) fn named_factory_for(name: &str, backend: &str) -> Result<Arc<Factory>, ArenaError> {
    // Checked first: a factory of that name may exist already, and is then returned unmade.
    if !BACKEND_NAMES.contains(&backend) {
        return Err(unknown_backend(backend, &BACKEND_NAMES));
    }
    named_factory(name, backend, || {
        Ok(Factory::new(name.to_string(), backend_named(backend, &[])?))
    })
}

fn factory_for(backend: &str) -> Result<Arc<Factory>, ArenaError> {
    named_factory_for(&format!("c-abi-{backend}"), backend)
}

/// The config `n` key/value pairs give.
///
/// # Safety
/// `keys` and `values` point at `n` NUL-terminated strings each (or may be NULL when `n` is 0).
pub(crate) unsafe fn config_arg(
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> Result<ArenaConfig, ArenaError> {
    if n > 0 && (keys.is_null() || values.is_null()) {
        return Err(invalid("keys or values is NULL with n > 0"));
    }
    let mut pairs = Vec::with_capacity(n.min(64));
    for i in 0..n {
        // SAFETY: the caller gives `n` key and value pointers.
        let (k, v) = unsafe { (*keys.add(i), *values.add(i)) };
        // SAFETY: each is a NUL-terminated string per the contract.
        let (k, v) = unsafe { (str_arg(k, "key")?, str_arg(v, "value")?) };
        pairs.push((k, v));
    }
    ArenaConfig::from_pairs(pairs)
}

/// # Safety
/// As `cuda_arena_create`.
unsafe fn create(
    backend: *const c_char,
    memory: *const c_char,
    device_id: c_int,
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
) -> Result<(*mut cuda_arena_allocator, String), ArenaError> {
    // SAFETY: forwarded from the caller's contract.
    let backend = unsafe { str_arg(backend, "backend") }?;
    // SAFETY: as above.
    let memory = unsafe { str_arg(memory, "memory") }?;
    let kind = MemoryKind::from_name(memory).ok_or_else(|| {
        invalid(format!(
            "memory must be Cuda, CudaPinned or Cpu, got \"{}\"",
            cuda_arena_core::escaped(memory)
        ))
    })?;
    let device = u32::try_from(device_id)
        .map_err(|_| invalid(format!("device_id {device_id} is negative")))?;
    // SAFETY: forwarded from the caller's contract.
    let config = unsafe { config_arg(keys, values, n) }?;
    let factory = factory_for(backend)?;
    let created = factory.create_allocator(MemoryInfo::new(kind, device), Some(&config))?;
    let handle = Handle {
        factory,
        stream_aware: created.allocator.is_stream_aware(),
        allocator: created.allocator,
        streams: created.streams,
    };
    match handles::insert(handle) {
        Ok(a) => Ok((a.cast(), created.warnings.join("; "))),
        Err((e, handle)) => {
            handle.factory.release_allocator(&handle.allocator);
            Err(e)
        }
    }
}

/// Creates (or joins) the shared allocator; NULL and `err` on failure. On success `err`
/// holds the warning (options that differ from the shared arena's), or an empty string.
///
/// # Safety
/// `backend` and `memory` are NUL-terminated strings; `keys` and `values` point at `n`
/// NUL-terminated strings each (or may be NULL when `n` is 0); `err` has room for `err_len`
/// bytes (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_create(
    backend: *const c_char,
    memory: *const c_char,
    device_id: c_int,
    keys: *const *const c_char,
    values: *const *const c_char,
    n: usize,
    err: *mut c_char,
    err_len: usize,
) -> *mut cuda_arena_allocator {
    guard_uncancellable(std::ptr::null_mut(), || {
        set_last_warning(String::new());
        // SAFETY: forwarded from this function's contract.
        match unsafe { create(backend, memory, device_id, keys, values, n) } {
            Ok((a, warning)) => {
                clear_last();
                copy_out(&warning, err, err_len);
                set_last_warning(warning);
                a
            }
            Err(e) => {
                fail(&e);
                copy_out(&format!("{}: {e}", e.code()), err, err_len);
                std::ptr::null_mut()
            }
        }
    })
}

/// Runs `f` on the live handle `a`: NULL is `ERR_ARENA_INVALID_ARGUMENT`, a destroyed handle
/// `ERR_ARENA_RELEASED`. Never dereferences `a`.
pub(crate) fn with<T>(
    a: *const cuda_arena_allocator,
    f: impl FnOnce(&Handle) -> Result<T, ArenaError>,
) -> Result<T, ArenaError> {
    handles::with(a.cast(), f)
}

fn addr_out(r: Result<Option<u64>, ArenaError>) -> *mut c_void {
    match r {
        Ok(a) => {
            clear_last();
            a.unwrap_or(0) as usize as *mut c_void
        }
        Err(e) => {
            fail(&e);
            std::ptr::null_mut()
        }
    }
}

/// As [`addr_out`], for a result already recorded as the last error ([`handles::with_reported`]).
#[inline]
fn addr_of(r: Result<Option<u64>, ArenaError>) -> *mut c_void {
    match r {
        Ok(a) => a.unwrap_or(0) as usize as *mut c_void,
        Err(_) => std::ptr::null_mut(),
    }
}

/// As [`code_out`], for a result already recorded as the last error.
#[inline]
fn code_of_result(r: Result<(), ArenaError>) -> i32 {
    match r {
        Ok(()) => CUDA_ARENA_OK,
        Err(e) => code_of(&e),
    }
}

fn code_out(r: Result<(), ArenaError>) -> i32 {
    match r {
        Ok(()) => {
            clear_last();
            CUDA_ARENA_OK
        }
        Err(e) => fail(&e),
    }
}

/// `a` is a handle from `cuda_arena_create` (a destroyed one is `CUDA_ARENA_ERR_RELEASED`), or
/// NULL. Not `unsafe`: the handle is never dereferenced, only looked up.
#[no_mangle]
pub extern "C" fn cuda_arena_alloc(a: *mut cuda_arena_allocator, size: usize) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        addr_of(handles::with_reported(a.cast(), |h, _| {
            h.allocator.alloc(size as u64)
        }))
    })
}

/// `cu_stream` is a `CUstream` of the allocator's device (cuda backend) or any non-NULL token
/// (host, virtual); NULL allocates as `cuda_arena_alloc`. A token is remembered (one logical
/// stream, shared by every user of the allocator) until `cuda_arena_reset_stream`.
#[no_mangle]
pub extern "C" fn cuda_arena_alloc_on_stream(
    a: *mut cuda_arena_allocator,
    size: usize,
    cu_stream: *mut c_void,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let r = handles::with_reported(a.cast(), |h, t| {
            if cu_stream.is_null() {
                return h.allocator.alloc(size as u64);
            }
            if !h.stream_aware {
                // Checked before the token is remembered.
                return Err(invalid(format!(
                    "the allocator for {} has no streams; use cuda_arena_alloc",
                    h.allocator.info()
                )));
            }
            if size == 0 {
                return Ok(None);
            }
            let token = cu_stream.addr() as u64;
            // A failed call changes nothing: a token it made is not remembered.
            h.streams.with_stream_in(token, &t.streams, |stream| {
                h.allocator.alloc_on_stream(size as u64, stream)
            })
        });
        addr_of(r)
    })
}

/// The host is done with `cu_stream`'s work: the token is forgotten and, once no call in
/// flight still uses it, its chunks are reset (ORT's `ResetChunksUsingStream`). Unknown and
/// NULL tokens are a no-op.
#[no_mangle]
pub extern "C" fn cuda_arena_reset_stream(
    a: *mut cuda_arena_allocator,
    cu_stream: *mut c_void,
) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || {
        code_out(with(a, |h| {
            if !cu_stream.is_null() {
                // Dropping the last clone of the stream resets its chunks in every allocator
                // that tagged memory with it.
                drop(h.streams.forget(cu_stream.addr() as u64));
            }
            Ok(())
        }))
    })
}

/// As `cuda_arena_alloc`.
#[no_mangle]
pub extern "C" fn cuda_arena_reserve(a: *mut cuda_arena_allocator, size: usize) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        addr_out(with(a, |h| h.allocator.reserve(size as u64)))
    })
}

/// As `cuda_arena_alloc`; `p` is any value (one this allocator did not hand out is
/// `CUDA_ARENA_ERR_UNKNOWN_POINTER`, NULL a no-op).
#[no_mangle]
pub extern "C" fn cuda_arena_free(a: *mut cuda_arena_allocator, p: *mut c_void) -> c_int {
    guard(CUDA_ARENA_ERR_PANIC, || {
        code_of_result(handles::with_reported(a.cast(), |h, _| {
            h.allocator.free(p.addr() as u64)
        }))
    })
}

/// As `cuda_arena_alloc`.
#[no_mangle]
pub extern "C" fn cuda_arena_shrink(a: *mut cuda_arena_allocator) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || {
        code_out(with(a, |h| h.allocator.shrink()))
    })
}

/// # Safety
/// `out` is NULL or writable for one `cuda_arena_stats`; `a` as in `cuda_arena_alloc`.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_get_stats(
    a: *const cuda_arena_allocator,
    out: *mut cuda_arena_stats,
) -> c_int {
    guard(CUDA_ARENA_ERR_PANIC, || {
        let r = with(a, |h| {
            if out.is_null() {
                return Err(invalid("out is NULL"));
            }
            // SAFETY: `out` is non-NULL and writable per the contract.
            unsafe { out.write(h.allocator.stats().into()) };
            Ok(())
        });
        code_out(r)
    })
}

/// What reached the driver of `a`'s device, from every allocator of that device and backend
/// in the process (TypeScript's `deviceStats`).
///
/// # Safety
/// `out` is NULL or writable for one `cuda_arena_device_stats`; `a` as in `cuda_arena_alloc`.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_get_device_stats(
    a: *const cuda_arena_allocator,
    out: *mut cuda_arena_device_stats,
) -> c_int {
    guard(CUDA_ARENA_ERR_PANIC, || {
        let r = with(a, |h| {
            if out.is_null() {
                return Err(invalid("out is NULL"));
            }
            let stats = h.factory.device_stats(h.allocator.info().device_id)?;
            // SAFETY: `out` is non-NULL and writable per the contract.
            unsafe { out.write(stats.into()) };
            Ok(())
        });
        code_out(r)
    })
}

/// One user fewer; the last destroy returns all memory. NULL is ignored; a handle already
/// destroyed sets the last error to `CUDA_ARENA_ERR_RELEASED` and changes nothing.
#[no_mangle]
pub extern "C" fn cuda_arena_destroy(a: *mut cuda_arena_allocator) {
    guard_uncancellable((), || {
        if a.is_null() {
            return;
        }
        match handles::remove(a.cast()) {
            Ok(h) => {
                // Outside the table's locks: the last release returns memory to the backend.
                h.factory.release_allocator(&h.allocator);
                clear_last();
            }
            Err(e) => {
                fail(&e);
            }
        }
    })
}
