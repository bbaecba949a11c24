#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod addr_map;
mod allocator;
mod arena;
pub mod backend;
pub mod bins;
mod chunks;
pub mod config;
mod directory;
pub mod env_config;
mod error;
pub mod factory;
pub mod foreign_streams;
pub mod free_list;
/// Fuzz target bodies, shared by `fuzz/` and the replay test; not a supported API.
#[doc(hidden)]
pub mod fuzzing;
mod in_use_quota;
mod live_blocks;
mod lock;
mod memory_info;
mod memory_log;
pub mod namespaces;
pub mod pluggable;
mod pool;
pub mod raw;
mod recorder;
mod region;
mod stats;
mod stream;
pub mod stream_events;
mod sub_arenas;
mod thread_slot;
pub mod torch_snapshot;
pub mod trace;
pub mod trace_format;

pub use allocator::{Allocator, PlainAllocator, ORT_ALLOCATOR_VERSION};
pub use arena::Arena;
pub use backend::{Backend, SimBackend, SimKind};
pub use config::{ArenaConfig, ExtendStrategy};
pub use env_config::{env_config, parse_env_pairs, ENV_CONF};
pub use error::{escaped, ArenaError, Result, ERROR_CODES};
pub use factory::{named_factory, Created, Factory, Released, SharedKind};
pub use foreign_streams::{ForeignStreams, RecentStreams, MAX_FOREIGN_STREAMS};
pub use live_blocks::LiveBlocks;
pub use memory_info::{AllocatorType, MemoryInfo, MemoryKind};
pub use memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
pub use namespaces::{env_arena_options, session_arena_options};
pub use pluggable::PluggableDevice;
pub use pool::PoolAllocator;
pub use raw::{DeviceLimits, HostAllocator, RawAllocator, RawStats, VirtualAllocator};
pub use recorder::{
    Recorder, RecordingAllocator, RecordingSummary, MAX_RECORDED_LINE_BYTES, RECORD_BUFFER_BYTES,
};
pub use stats::{AllocatorStats, STATS_KEYS};
pub use stream::{Stream, StreamEvent, StreamId, StreamUser};
pub use stream_events::{FreeEvents, SimEvents, StreamEvents, LEGACY_STREAM, MAX_PENDING_EVENTS};
