//! Return codes, mirroring `cuda_arena_core::ERROR_CODES` in order, and the per-thread last error.

use crate::thread_state::{ThreadState, THREAD};
use cuda_arena_core::ArenaError;

/// Success.
pub const CUDA_ARENA_OK: i32 = 0;
/// `ERR_ARENA_OUT_OF_MEMORY`.
pub const CUDA_ARENA_ERR_OUT_OF_MEMORY: i32 = 1;
/// `ERR_ARENA_INVALID_CONFIG`.
pub const CUDA_ARENA_ERR_INVALID_CONFIG: i32 = 2;
/// `ERR_ARENA_INVALID_ARGUMENT`.
pub const CUDA_ARENA_ERR_INVALID_ARGUMENT: i32 = 3;
/// `ERR_ARENA_UNKNOWN_POINTER`.
pub const CUDA_ARENA_ERR_UNKNOWN_POINTER: i32 = 4;
/// `ERR_ARENA_RELEASED`.
pub const CUDA_ARENA_ERR_RELEASED: i32 = 5;
/// `ERR_NO_CUDA`.
pub const CUDA_ARENA_ERR_NO_CUDA: i32 = 6;
/// `ERR_CUDA`.
pub const CUDA_ARENA_ERR_CUDA: i32 = 7;
/// A panic was caught at the boundary.
pub const CUDA_ARENA_ERR_PANIC: i32 = 8;

/// The C code of an error: its position in `ERROR_CODES`, plus one.
pub fn code_of(e: &ArenaError) -> i32 {
    cuda_arena_core::ERROR_CODES
        .iter()
        .position(|&c| c == e.code())
        .map_or(CUDA_ARENA_ERR_PANIC, |i| i as i32 + 1)
}

pub(crate) fn set_last_warning(warning: String) {
    let _ = THREAD.try_with(|t| *t.last_warning.borrow_mut() = warning);
}

pub(crate) fn set_last(code: i32, message: String) {
    let _ = THREAD.try_with(|t| set_last_in(t, code, message));
}

pub(crate) fn set_last_in(t: &ThreadState, code: i32, message: String) {
    if let Ok(mut l) = t.last.try_borrow_mut() {
        *l = (code, message);
    }
}

pub(crate) fn clear_last() {
    let _ = THREAD.try_with(clear_last_in);
}

pub(crate) fn clear_last_in(t: &ThreadState) {
    if let Ok(mut l) = t.last.try_borrow_mut() {
        if l.0 != CUDA_ARENA_OK || !l.1.is_empty() {
            l.0 = CUDA_ARENA_OK;
            l.1.clear();
        }
    }
}

/// Records `e` as this thread's last error and returns its code.
pub(crate) fn fail(e: &ArenaError) -> i32 {
    let code = code_of(e);
    set_last(code, format!("{}: {e}", e.code()));
    code
}

/// As [`fail`], with this thread's state at hand.
pub(crate) fn fail_in(t: &ThreadState, e: &ArenaError) -> i32 {
    let code = code_of(e);
    set_last_in(t, code, format!("{}: {e}", e.code()));
    code
}

/// Copies `message` into `buf` (at most `len` bytes, NUL-terminated).
pub(crate) fn copy_out(message: &str, buf: *mut std::ffi::c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = message.len().min(len - 1);
    // SAFETY: the caller gave `buf` with room for `len` bytes; we write `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// The code of this thread's last failure, `CUDA_ARENA_OK` if the last call succeeded.
#[no_mangle]
pub extern "C" fn cuda_arena_last_error_code() -> i32 {
    THREAD
        .try_with(|t| t.last.try_borrow().map_or(CUDA_ARENA_ERR_PANIC, |l| l.0))
        .unwrap_or(CUDA_ARENA_ERR_PANIC)
}

/// Copies this thread's last error message into `buf`; returns its full length.
#[no_mangle]
pub extern "C" fn cuda_arena_last_error(buf: *mut std::ffi::c_char, len: usize) -> usize {
    THREAD
        .try_with(|t| {
            t.last.try_borrow().map_or(0, |l| {
                copy_out(&l.1, buf, len);
                l.1.len()
            })
        })
        .unwrap_or(0)
}

/// Copies the warning of this thread's last `cuda_arena_create` or
/// `cuda_arena_ort_ep_create_allocator` (empty if it had none) into `buf`; returns its full
/// length.
#[no_mangle]
pub extern "C" fn cuda_arena_last_warning(buf: *mut std::ffi::c_char, len: usize) -> usize {
    THREAD
        .try_with(|t| {
            t.last_warning.try_borrow().map_or(0, |w| {
                copy_out(&w, buf, len);
                w.len()
            })
        })
        .unwrap_or(0)
}
