//! napi-rs binding of cuda-arena for Node.js (thin glue; the typed API lives in ts/).
//!
//! The napi-rs glue lands with issue 3.
#![deny(unsafe_code)]

pub use arena_core::{Allocator, ArenaError, RawAllocator};
