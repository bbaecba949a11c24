//! C ABI of cuda-arena for C/C++ hosts and other languages' bindings.
//!
//! The C ABI lands with issue 4.
#![deny(unsafe_code)]

pub use arena_core::{Allocator, ArenaError, RawAllocator};
