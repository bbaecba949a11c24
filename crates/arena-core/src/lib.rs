//! arena-core: cuda-arena's allocator logic in pure Rust, no CUDA and no FFI.
//!
//! A best-fit-with-coalescing [`Arena`] with ONNX Runtime's semantics over any
//! [`RawAllocator`]; the `host` and `virtual` raw allocators for running it without a GPU;
//! the [`Allocator`] trait in the shape of ORT's `OrtAllocator`; strict [`ArenaConfig`]
//! parsing; stats with ORT's key names; a structured [`MemoryLog`].
//!
//! ```
//! use arena_core::{Allocator, Arena, ArenaConfig, VirtualAllocator};
//!
//! let config = ArenaConfig::from_pairs([("arena.extend_strategy", "1")]).unwrap();
//! let arena = Arena::new(VirtualAllocator::default(), config).unwrap();
//! let p = arena.alloc(100).unwrap().unwrap();
//! assert_eq!(arena.allocated_size(p).unwrap(), 256);
//! arena.free(p).unwrap();
//! assert_eq!(arena.stats().in_use, 0);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod addr_map;
mod allocator;
mod arena;
pub mod bins;
mod chunks;
pub mod config;
mod error;
pub mod free_list;
mod lock;
mod memory_info;
mod memory_log;
pub mod raw;
mod region;
mod stats;
mod stream;
pub mod trace;

pub use allocator::{Allocator, PlainAllocator, ORT_ALLOCATOR_VERSION};
pub use arena::Arena;
pub use config::{ArenaConfig, ExtendStrategy};
pub use error::{ArenaError, Result, ERROR_CODES};
pub use memory_info::{AllocatorType, MemoryInfo, MemoryKind};
pub use memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
pub use raw::{DeviceLimits, HostAllocator, RawAllocator, RawStats, VirtualAllocator};
pub use stats::{AllocatorStats, STATS_KEYS};
pub use stream::{Stream, StreamEvent, StreamId};
