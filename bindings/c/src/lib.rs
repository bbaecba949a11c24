//! The C ABI of `include/cuda_arena.h`. Every entry point catches panics and reports failure
//! by return value plus a per-thread last error; pointers from C are checked for NULL, and
//! allocator handles are only dereferenced as the boxes `cuda_arena_create` made.
#![allow(unsafe_code)]

mod codes;
mod handle;

pub use codes::*;
pub use handle::*;
