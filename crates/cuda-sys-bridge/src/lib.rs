//! CUDA driver-API backends for arena-core (device and pinned raw allocators, memory pool, streams), through cudarc.
//!
//! The CUDA backends land with issue 4; until then this crate only re-exports the traits it will implement.
#![deny(unsafe_code)]

pub use arena_core::{Allocator, ArenaError, RawAllocator};
