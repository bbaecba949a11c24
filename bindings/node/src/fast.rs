//! The fast path for the hottest calls (alloc, free, allocOnStream). A Node-API call costs
//! tens of nanoseconds per argument converted on our machines, more than the arena operation,
//! so these take no arguments: the TS layer writes them into a small scratch buffer shared
//! with this thread, calls, and reads the result from the same buffer. Allocators and streams
//! are named by per-thread handle numbers (JS values never cross threads, so neither do the
//! handles). Errors still throw, with their codes.
#![allow(unsafe_code)]

use crate::error::{invalid, js, released, Result};
use cuda_arena_core::{Allocator, Stream};
use napi::bindgen_prelude::Unknown;
use napi::{sys, Env, JsValue};
use napi_derive::napi;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// Scratch words: handle (f64), argument (f64 size or u64 address), result (u64 address, 0
/// for none), stream handle (f64).
const WORDS: usize = 4;

/// Handles of one thread: slot `i` holds handle `i + 1`; 0 is never a handle.
struct Slots<T> {
    items: Vec<Option<T>>,
    vacant: Vec<usize>,
}

impl<T> Slots<T> {
    const fn new() -> Self {
        Slots {
            items: Vec::new(),
            vacant: Vec::new(),
        }
    }

    fn insert(&mut self, item: T) -> u32 {
        let i = match self.vacant.pop() {
            Some(i) => {
                self.items[i] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                self.items.len() - 1
            }
        };
        (i + 1) as u32
    }

    fn remove(&mut self, handle: u32) {
        let i = handle as usize;
        if i > 0 && self.items.get_mut(i - 1).and_then(Option::take).is_some() {
            self.vacant.push(i - 1);
        }
    }

    fn get(&self, handle: f64) -> Option<&T> {
        let i = handle as usize;
        if i == 0 || handle != i as f64 {
            return None;
        }
        self.items.get(i - 1).and_then(Option::as_ref)
    }
}

thread_local! {
    static SCRATCH: Cell<*mut u64> = const { Cell::new(std::ptr::null_mut()) };
    static ALLOCATORS: RefCell<Slots<Arc<dyn Allocator>>> = const { RefCell::new(Slots::new()) };
    static STREAMS: RefCell<Slots<Stream>> = const { RefCell::new(Slots::new()) };
}

/// Registers an allocator for the fast path of this thread.
pub fn register_allocator(a: Arc<dyn Allocator>) -> u32 {
    ALLOCATORS.with(|s| s.borrow_mut().insert(a))
}

/// Forgets an allocator handle (release or garbage collection). Quiet at thread exit.
pub fn unregister_allocator(handle: u32) {
    let _ = ALLOCATORS.try_with(|s| s.borrow_mut().remove(handle));
}

/// Registers a stream for the fast path of this thread.
pub fn register_stream(s: Stream) -> u32 {
    STREAMS.with(|slots| slots.borrow_mut().insert(s))
}

/// Forgets a stream handle.
pub fn unregister_stream(handle: u32) {
    let _ = STREAMS.try_with(|s| s.borrow_mut().remove(handle));
}

/// Hands this thread's scratch buffer to the native side: an `ArrayBuffer` of at least
/// 32 bytes that the caller keeps alive and never detaches for the life of the thread.
#[napi(catch_unwind, ts_args_type = "buffer: ArrayBuffer")]
pub fn fast_init(env: Env, buffer: Unknown) -> Result<()> {
    let mut data: *mut std::ffi::c_void = std::ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: `env` and the value are valid for this call; the out-parameters are locals.
    let status =
        unsafe { sys::napi_get_arraybuffer_info(env.raw(), buffer.raw(), &mut data, &mut len) };
    if status != sys::Status::napi_ok
        || data.is_null()
        || len < WORDS * 8
        || !(data as usize).is_multiple_of(8)
    {
        return Err(invalid(
            "the scratch buffer must be an aligned ArrayBuffer of at least 32 bytes",
        ));
    }
    SCRATCH.with(|s| s.set(data.cast()));
    Ok(())
}

/// Runs `f` on the scratch words. The caller (the TS layer) holds the buffer for the life of
/// the thread, so the pointer stays valid; JS is not running while native code runs, so
/// nothing else touches the words meanwhile.
fn with_scratch<T>(f: impl FnOnce(&mut [u64; WORDS]) -> Result<T>) -> Result<T> {
    let p = SCRATCH.with(Cell::get);
    if p.is_null() {
        return Err(invalid("the fast path was not initialised on this thread"));
    }
    // SAFETY: `p` points at the live, 8-byte aligned, at-least-32-byte buffer registered by
    // `fast_init` on this thread (checked there); no other reference to it exists while this
    // call runs, because JS is paused and this is the only native code touching it.
    let words = unsafe { &mut *p.cast::<[u64; WORDS]>() };
    f(words)
}

fn allocator(handle: u64) -> Result<Arc<dyn Allocator>> {
    ALLOCATORS
        .with(|s| s.borrow().get(f64::from_bits(handle)).cloned())
        .ok_or_else(|| released("the allocator"))
}

fn size_from(bits: u64) -> Result<u64> {
    let v = f64::from_bits(bits);
    if v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 {
        Ok(v as u64)
    } else {
        Err(invalid(format!(
            "size must be a non-negative safe integer, got {v}"
        )))
    }
}

/// `alloc(size)`: words[0] handle, words[1] size (f64) → words[2] address or 0.
#[napi(catch_unwind)]
pub fn fast_alloc() -> Result<()> {
    with_scratch(|w| {
        let a = allocator(w[0])?;
        w[2] = a.alloc(size_from(w[1])?).map_err(js)?.unwrap_or(0);
        Ok(())
    })
}

/// `allocOnStream(size, stream)`: as `fast_alloc`, words[3] the stream handle (f64).
#[napi(catch_unwind)]
pub fn fast_alloc_on_stream() -> Result<()> {
    with_scratch(|w| {
        let a = allocator(w[0])?;
        let size = size_from(w[1])?;
        let stream = STREAMS
            .with(|s| s.borrow().get(f64::from_bits(w[3])).cloned())
            .ok_or_else(|| released("the stream"))?;
        w[2] = a.alloc_on_stream(size, &stream).map_err(js)?.unwrap_or(0);
        Ok(())
    })
}

/// `free(p)`: words[0] handle, words[1] address (u64).
#[napi(catch_unwind)]
pub fn fast_free() -> Result<()> {
    with_scratch(|w| {
        let a = allocator(w[0])?;
        a.free(w[1]).map_err(js)
    })
}

/// What napi-rs's wrapper would do around `fast_*`, done by hand: these callbacks read no
/// arguments, so they ask Node for nothing and return `undefined` as a null value. That
/// takes the remaining per-call cost down to Node's own dispatch. Errors throw with the code.
type RawCallback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// Runs `op` with panics caught; on an error throws a JS error with its code.
fn raw_call(env: sys::napi_env, op: fn() -> Result<()>) -> sys::napi_value {
    let outcome = std::panic::catch_unwind(op)
        .unwrap_or_else(|_| Err(invalid("an internal error was caught")));
    if let Err(e) = outcome {
        let code = std::ffi::CString::new(e.status).unwrap_or_default();
        let msg = std::ffi::CString::new(e.reason.replace('\0', " ")).unwrap_or_default();
        // SAFETY: `env` is the live environment of this call; both strings are NUL-terminated.
        unsafe { sys::napi_throw_error(env, code.as_ptr(), msg.as_ptr()) };
    }
    std::ptr::null_mut()
}

unsafe extern "C" fn raw_fast_alloc(
    env: sys::napi_env,
    _: sys::napi_callback_info,
) -> sys::napi_value {
    raw_call(env, fast_alloc)
}

unsafe extern "C" fn raw_fast_alloc_on_stream(
    env: sys::napi_env,
    _: sys::napi_callback_info,
) -> sys::napi_value {
    raw_call(env, fast_alloc_on_stream)
}

unsafe extern "C" fn raw_fast_free(
    env: sys::napi_env,
    _: sys::napi_callback_info,
) -> sys::napi_value {
    raw_call(env, fast_free)
}

/// Adds `rawFastAlloc`, `rawFastAllocOnStream` and `rawFastFree` to the module's exports.
#[napi(module_exports)]
pub fn register_raw_fast_path(
    exports: napi::bindgen_prelude::Object,
    env: Env,
) -> napi::Result<()> {
    let table: [(&std::ffi::CStr, RawCallback); 3] = [
        (c"rawFastAlloc", raw_fast_alloc),
        (c"rawFastAllocOnStream", raw_fast_alloc_on_stream),
        (c"rawFastFree", raw_fast_free),
    ];
    for (name, cb) in table {
        let mut f = std::ptr::null_mut();
        // SAFETY: `env` is live during module registration; the name is NUL-terminated and
        // its length is given; `cb` has the callback signature Node expects.
        let status = unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(cb),
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
    }
    Ok(())
}
