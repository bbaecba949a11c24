//! The C ABI of `include/cuda_arena.h`. Every entry point catches panics and reports failure
//! by return value plus a per-thread last error; pointers from C are checked for NULL, and
//! allocator and EP handles are never dereferenced: they name entries of tables of live
//! handles. ONNX Runtime's objects (`OrtApi`, memory infos, key/value pairs) are the host's
//! and are passed through to `cuda-arena-ort`.
#![allow(unsafe_code)]

mod codes;
mod handle;
mod handles;
mod ort;
mod recording;
mod replay;
mod thread_state;
mod torch;
mod version;

pub use codes::*;
pub use handle::*;
pub use ort::*;
pub use recording::*;
pub use replay::*;
pub use torch::*;
pub use version::cuda_arena_version;

/// The repository README's and docs/rust.md's Rust examples, compiled and run as doctests so
/// they stay true. They live here, in a crate that is not published, because those files are
/// outside the published crates.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/rust.md")]
pub struct RepositoryReadme;
