#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod allocators;
mod arena;
mod devices;
/// Fuzz target bodies, shared by `fuzz/` and the replay test; not a supported API.
#[doc(hidden)]
pub mod fuzzing;
pub mod raw;
mod streams;
pub mod trace;
mod types;

// The modules keep the paths they had when the crate was flat, public and internal alike.
pub(crate) use allocators::{allocator, pool};
pub(crate) use arena::{
    addr_map, chunks, directory, in_use_quota, live_blocks, lock, pages, region, sub_arenas,
    thread_slot,
};
pub use arena::{bins, free_list};
pub use devices::registry as factory;
pub use devices::{backend, env_config, namespaces, pluggable};
pub(crate) use streams::stream;
pub use streams::{foreign_streams, stream_events};
pub(crate) use trace::recorder;
pub use trace::{torch_snapshot, trace_format};
pub use types::config;
pub(crate) use types::{error, memory_info, memory_log, stats};

pub use allocator::{Allocator, PlainAllocator, ORT_ALLOCATOR_VERSION};
pub use arena::Arena;
pub use backend::{Backend, SimBackend, SimKind};
pub use config::{ArenaConfig, ExtendStrategy};
pub use env_config::{env_config, parse_env_pairs, ENV_CONF};
pub use error::{escaped, ArenaError, Result, ERROR_CODES};
pub use factory::{named_factory, Created, Factory, Released, SharedKind};
pub use foreign_streams::{ForeignStreams, RecentStreams, FORGET_FROM, MAX_FOREIGN_STREAMS};
pub use live_blocks::LiveBlocks;
pub use memory_info::{AllocatorType, MemoryInfo, MemoryKind};
pub use memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
pub use namespaces::{env_arena_options, session_arena_options};
pub use pluggable::PluggableDevice;
pub use pool::PoolAllocator;
pub use raw::{
    DeviceLimits, HostAllocator, HostVm, RawAllocator, RawStats, VirtualAllocator, VirtualMemory,
    VirtualVm,
};
pub use recorder::{
    Recorder, RecordingAllocator, RecordingSummary, MAX_RECORDED_LINE_BYTES, RECORD_BUFFER_BYTES,
};
pub use stats::{AllocatorStats, STATS_KEYS};
pub use stream::{Stream, StreamEvent, StreamId, StreamUser};
pub use stream_events::{
    FreeEvents, SimEvents, StreamEvents, COVER_EVERY, LEGACY_STREAM, MAX_PENDING_EVENTS,
};
