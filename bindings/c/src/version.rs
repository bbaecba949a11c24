//! The library's version, for C hosts to check against the header they compiled with.

use std::ffi::c_char;

/// The version as a NUL-terminated string; `scripts/sync-version.mjs` keeps it, the crates'
/// and the npm packages' versions, and the header's `CUDA_ARENA_VERSION` the same.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library's version, e.g. `"0.1.0"`: a static string, never NULL.
#[no_mangle]
pub extern "C" fn cuda_arena_version() -> *const c_char {
    VERSION.as_ptr().cast()
}
