//! The fast path for the hottest calls (alloc, free, allocOnStream). A Node-API call costs
//! tens of nanoseconds per argument converted on our machines, more than the arena operation,
//! so these take no arguments: the TS layer writes them into a small scratch block, calls,
//! and reads the result from the same block. Errors still throw, with their codes.
//!
//! Safe by construction:
//! - Each copy of the package's JS asks for its own fast path (`createFastPath()`), so two
//!   copies in one thread (a cleared `require` cache, two versions of a dependency) never
//!   share arguments.
//! - The scratch block belongs to the native side. The `ArrayBuffer` JS writes through and
//!   each of the three functions that read it hold a reference count on it, so it lives
//!   until all four are collected: the native side never reads memory the JS side may free,
//!   and a detached or transferred buffer still points at live memory. The words are read
//!   and written atomically, since a transferred buffer could be written from another thread
//!   (garbage in, a coded error out).
//! - Allocators and streams are named by handle numbers from `handles.rs`, which never
//!   alias; every value read is checked exactly as the argument-converting path checks it.
#![allow(unsafe_code)]

use crate::convert::size_num;
use crate::error::{invalid, js, Result};
use crate::handles;
use napi::{sys, Env, JsValue};
use napi_derive::napi;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The words: allocator handle (f64), argument (f64 size or u64 address), result (u64
/// address, 0 for none), stream handle (f64).
const WORDS: usize = 4;
const W_HANDLE: usize = 0;
const W_ARG: usize = 1;
const W_RESULT: usize = 2;
const W_STREAM: usize = 3;

#[derive(Default)]
struct Scratch {
    words: [AtomicU64; WORDS],
}

impl Scratch {
    #[inline]
    fn load(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Relaxed)
    }

    #[inline]
    fn f64(&self, i: usize) -> f64 {
        f64::from_bits(self.load(i))
    }

    #[inline]
    fn store(&self, i: usize, v: u64) {
        self.words[i].store(v, Ordering::Relaxed);
    }
}

/// Drops one reference count on a scratch block (a function or the buffer was collected).
///
/// # Safety
/// `ptr` is a pointer from `Arc::into_raw` for a `Scratch`, given up exactly once.
unsafe fn release(ptr: *mut c_void) {
    if !ptr.is_null() {
        // SAFETY: per the contract, `ptr` owns one count of the `Arc`.
        drop(unsafe { Arc::from_raw(ptr.cast_const().cast::<Scratch>()) });
    }
}

unsafe extern "C" fn release_data(_: sys::napi_env, data: *mut c_void, _: *mut c_void) {
    // SAFETY: `data` was given to napi_add_finalizer as one count of the `Arc`.
    unsafe { release(data) }
}

unsafe extern "C" fn release_hint(_: sys::napi_env, _: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` was given to napi_create_external_arraybuffer as one count of the `Arc`.
    unsafe { release(hint) }
}

/// The scratch block of the function being called.
///
/// # Safety
/// `env` and `info` are the live arguments of a callback created by `create_fast_path`.
unsafe fn scratch<'a>(env: sys::napi_env, info: sys::napi_callback_info) -> Result<&'a Scratch> {
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid env and info of this call; no arguments are asked for.
    let status = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut data,
        )
    };
    if status != sys::Status::napi_ok || data.is_null() {
        return Err(invalid("the fast path has no scratch block"));
    }
    // SAFETY: the function being called holds a count of the `Arc` whose data this is (its
    // finalizer gives it up only once the function is collected, and it is running now).
    Ok(unsafe { &*data.cast_const().cast::<Scratch>() })
}

/// `alloc(size)`: handle, size (f64) → result address or 0.
fn alloc(w: &Scratch) -> Result<()> {
    let size = size_num("size", w.f64(W_ARG))?;
    let addr = handles::with_allocator(w.f64(W_HANDLE), |e| e.allocator.alloc(size).map_err(js))?;
    w.store(W_RESULT, addr.unwrap_or(0));
    Ok(())
}

/// `allocOnStream(size, stream)`: as `alloc`, and the stream handle.
fn alloc_on_stream(w: &Scratch) -> Result<()> {
    let size = size_num("size", w.f64(W_ARG))?;
    let addr = handles::alloc_on_stream(w.f64(W_HANDLE), w.f64(W_STREAM), size)?;
    w.store(W_RESULT, addr.unwrap_or(0));
    Ok(())
}

/// `free(p)`: handle, address (u64; the TS layer passes only bigints in 0 … 2^64−1).
fn free(w: &Scratch) -> Result<()> {
    let addr = w.load(W_ARG);
    handles::with_allocator(w.f64(W_HANDLE), |e| e.allocator.free(addr).map_err(js))
}

/// Runs `op` on the called function's scratch block with panics caught; an error throws a JS
/// error with its code. Returns `undefined` (a null value).
///
/// # Safety
/// As [`scratch`].
unsafe fn raw_call(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    op: fn(&Scratch) -> Result<()>,
) -> sys::napi_value {
    let outcome = std::panic::catch_unwind(|| {
        // SAFETY: forwarded from this function's contract.
        let w = unsafe { scratch(env, info) }?;
        op(w)
    })
    .unwrap_or_else(|_| Err(invalid("an internal error was caught")));
    if let Err(e) = outcome {
        throw(env, &e);
    }
    std::ptr::null_mut()
}

fn throw(env: sys::napi_env, e: &crate::error::JsError) {
    let code = std::ffi::CString::new(e.status).unwrap_or_default();
    let msg = std::ffi::CString::new(e.reason.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `env` is the live environment of this call; both strings are NUL-terminated.
    unsafe { sys::napi_throw_error(env, code.as_ptr(), msg.as_ptr()) };
}

unsafe extern "C" fn raw_alloc(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node calls this with the live env and info of a call.
    unsafe { raw_call(env, info, alloc) }
}

unsafe extern "C" fn raw_alloc_on_stream(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: as above.
    unsafe { raw_call(env, info, alloc_on_stream) }
}

unsafe extern "C" fn raw_free(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: as above.
    unsafe { raw_call(env, info, free) }
}

type RawCallback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(invalid(format!("{what} failed (napi status {status})")))
    }
}

/// `{ buffer, alloc, allocOnStream, free }` over a new scratch block, or `undefined` when
/// this runtime does not allow external buffers (the TS layer then takes the checked path).
///
/// # Safety
/// `env` is the live environment of a call.
unsafe fn build_fast_path(env: sys::napi_env) -> Result<sys::napi_value> {
    let scratch = Arc::new(Scratch::default());
    let data = scratch.words.as_ptr().cast_mut().cast::<c_void>();
    let mut buffer = std::ptr::null_mut();
    let hint = Arc::into_raw(scratch.clone()).cast_mut().cast::<c_void>();
    // SAFETY: `data` points at the block's `WORDS * 8` bytes, which live as long as the
    // count given as `hint`, released by `release_hint` when the buffer's memory goes.
    let status = unsafe {
        sys::napi_create_external_arraybuffer(
            env,
            data,
            WORDS * 8,
            Some(release_hint),
            hint,
            &mut buffer,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: the buffer was not made, so its count is ours to give back.
        unsafe { release(hint) };
        return Ok(std::ptr::null_mut());
    }
    let mut object = std::ptr::null_mut();
    // SAFETY: live env; out-parameter is a local.
    let status = unsafe { sys::napi_create_object(env, &mut object) };
    check(status, "napi_create_object")?;
    // SAFETY: live env; both values were just created; the name is NUL-terminated.
    let status = unsafe { sys::napi_set_named_property(env, object, c"buffer".as_ptr(), buffer) };
    check(status, "napi_set_named_property")?;
    let table: [(&CStr, RawCallback); 3] = [
        (c"alloc", raw_alloc),
        (c"allocOnStream", raw_alloc_on_stream),
        (c"free", raw_free),
    ];
    for (name, cb) in table {
        let count = Arc::into_raw(scratch.clone()).cast_mut().cast::<c_void>();
        let mut f = std::ptr::null_mut();
        // SAFETY: live env; the name is NUL-terminated with its length given; `cb` has the
        // callback signature; `count` is the function's data (see `scratch`).
        let made = unsafe {
            sys::napi_create_function(
                env,
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(cb),
                count,
                &mut f,
            )
        };
        if made != sys::Status::napi_ok {
            // SAFETY: no function holds the count.
            unsafe { release(count) };
            return Err(invalid("napi_create_function failed"));
        }
        // SAFETY: live env; `f` was just created; the finalizer gives the count back when
        // `f` is collected (or the environment goes).
        let added = unsafe {
            sys::napi_add_finalizer(
                env,
                f,
                count,
                Some(release_data),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if added != sys::Status::napi_ok {
            // The function may outlive a released count: leak it instead (32 bytes).
            return Err(invalid("napi_add_finalizer failed"));
        }
        // SAFETY: live env; `object` and `f` were just created.
        let status = unsafe { sys::napi_set_named_property(env, object, name.as_ptr(), f) };
        check(status, "napi_set_named_property")?;
    }
    Ok(object)
}

unsafe extern "C" fn raw_create_fast_path(
    env: sys::napi_env,
    _: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: Node calls this with the live env of a call.
    let outcome = std::panic::catch_unwind(|| unsafe { build_fast_path(env) })
        .unwrap_or_else(|_| Err(invalid("an internal error was caught")));
    match outcome {
        Ok(v) => v,
        Err(e) => {
            throw(env, &e);
            std::ptr::null_mut()
        }
    }
}

/// Adds `createFastPath` to the module's exports, and releases this environment's handles
/// when it is torn down (a worker terminated, the process exiting).
#[napi(module_exports)]
pub fn register_fast_path(exports: napi::bindgen_prelude::Object, env: Env) -> napi::Result<()> {
    let name = c"createFastPath";
    let mut f = std::ptr::null_mut();
    // SAFETY: `env` is live during module registration; the name is NUL-terminated and its
    // length is given; the callback has the signature Node expects.
    let status = unsafe {
        sys::napi_create_function(
            env.raw(),
            name.as_ptr(),
            name.to_bytes().len() as isize,
            Some(raw_create_fast_path),
            std::ptr::null_mut(),
            &mut f,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(napi::Error::from_reason("napi_create_function failed"));
    }
    // SAFETY: `exports` is the module's live exports object; `f` was just created.
    let status =
        unsafe { sys::napi_set_named_property(env.raw(), exports.raw(), name.as_ptr(), f) };
    if status != sys::Status::napi_ok {
        return Err(napi::Error::from_reason("napi_set_named_property failed"));
    }
    env.add_env_cleanup_hook((), |()| handles::release_all())?;
    Ok(())
}
