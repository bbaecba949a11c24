//! Messages quote what a caller passed briefly: a memory name or a trace path of megabytes
//! makes a message of a line, never a copy of the argument. Called through the Rust side of
//! the entry points C links to.

use cuda_arena::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

/// The length of this thread's last error message.
fn last_error_len() -> usize {
    cuda_arena_last_error(null_mut(), 0)
}

#[test]
fn a_huge_memory_name_makes_a_short_message() {
    let memory = CString::new("X".repeat(4_000_000)).expect("no NUL");
    // SAFETY: NUL-terminated strings; no keys (n = 0); no error buffer.
    let a = unsafe {
        cuda_arena_create(
            c"virtual".as_ptr(),
            memory.as_ptr(),
            0,
            null(),
            null(),
            0,
            null_mut(),
            0,
        )
    };
    assert!(a.is_null());
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_INVALID_ARGUMENT
    );
    assert!(last_error_len() < 400, "{} bytes", last_error_len());
}

#[test]
fn a_huge_trace_path_makes_a_short_message() {
    let path = CString::new(format!("/tmp/{}", "p".repeat(5_000_000))).expect("no NUL");
    // SAFETY: NUL-terminated strings; no keys (n = 0).
    let report =
        unsafe { cuda_arena_replay_file(path.as_ptr(), c"virtual".as_ptr(), null(), null(), 0) };
    assert!(report.is_null());
    assert_ne!(cuda_arena_last_error_code(), CUDA_ARENA_OK);
    assert!(last_error_len() < 400, "{} bytes", last_error_len());
}
