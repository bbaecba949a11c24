//! Trace recording from C: `cuda_arena_start_recording` / `cuda_arena_stop_recording`.

use crate::codes::{clear_last, fail, CUDA_ARENA_ERR_PANIC, CUDA_ARENA_OK};
use crate::handle::{cuda_arena_allocator, guard_uncancellable, invalid, str_arg, with};
use cuda_arena_core::ArenaError;
use std::ffi::{c_char, c_int};

fn code_out(r: Result<(), ArenaError>) -> c_int {
    match r {
        Ok(()) => {
            clear_last();
            CUDA_ARENA_OK
        }
        Err(e) => fail(&e),
    }
}

/// Starts recording the allocator's traffic (every user's) to a new trace file at `path`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `a` as in `cuda_arena_alloc`.
#[no_mangle]
pub unsafe extern "C" fn cuda_arena_start_recording(
    a: *mut cuda_arena_allocator,
    path: *const c_char,
) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || {
        code_out((|| {
            // The allocator is taken out of the handle first: the file is created with no
            // handle lock held.
            let allocator = with(a, |h| Ok(h.allocator.clone()))?;
            // SAFETY: per the contract above.
            let path = unsafe { str_arg(path, "path") }?;
            allocator.start_recording(path)
        })())
    })
}

/// Stops the recording once everything recorded is written. A recording that had stopped
/// itself (a write error, too many streams) is reported as an invalid argument with its
/// reason: the file holds only what was written before.
#[no_mangle]
pub extern "C" fn cuda_arena_stop_recording(a: *mut cuda_arena_allocator) -> c_int {
    guard_uncancellable(CUDA_ARENA_ERR_PANIC, || {
        code_out((|| {
            let allocator = with(a, |h| Ok(h.allocator.clone()))?;
            let summary = allocator.stop_recording()?;
            match summary.error {
                None => Ok(()),
                Some(reason) => Err(invalid(format!(
                    "the recording to {} stopped early ({} operations written): {reason}",
                    summary.path, summary.ops
                ))),
            }
        })())
    })
}
