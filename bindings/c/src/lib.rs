//! The C ABI of `include/cuda_arena.h`. Every entry point catches panics and reports failure
//! by return value plus a per-thread last error; pointers from C are checked for NULL, and
//! allocator handles are never dereferenced: they name slots of a table of live handles.
#![allow(unsafe_code)]

mod codes;
mod handle;
mod handles;
mod version;

pub use codes::*;
pub use handle::*;
pub use version::cuda_arena_version;

/// The repository README's Rust examples, compiled and run as doctests so they stay true.
/// They live here, in a crate that is not published, because the README is outside the
/// published crates.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct RepositoryReadme;
