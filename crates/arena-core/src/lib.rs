#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod allocators;
pub mod arena;
pub(crate) mod collections;
pub mod devices;
pub mod raw;
pub mod streams;
pub mod trace;
pub mod types;

pub use allocators::allocator::{Allocator, PlainAllocator, ORT_ALLOCATOR_VERSION};
pub use allocators::block_state::BlockState;
pub use allocators::live_blocks::LiveBlocks;
pub use allocators::pool::PoolAllocator;
pub use arena::{leave_shared_sub_arena, uses_own_sub_arena, Arena};
pub use devices::backend::{Backend, SimBackend, SimKind};
pub use devices::env_config::{env_config, parse_env_pairs, ENV_CONF};
pub use devices::factory::{named_factory, Created, Factory, Released, SharedKind};
pub use devices::namespaces::{env_arena_options, session_arena_options};
pub use devices::pluggable::PluggableDevice;
pub use raw::{
    AddressSpaceAllocator, AddressSpaceVm, DeviceLimits, HostAllocator, HostVm, RawAllocator,
    RawStats, VirtualMemory,
};
pub use streams::foreign_streams::{
    ForeignStreams, RecentStreams, FORGET_FROM, MAX_FOREIGN_STREAMS,
};
pub use streams::stream::{Stream, StreamEvent, StreamId, StreamUser};
pub use streams::stream_events::{
    FreeEvents, SimEvents, StreamEvents, COVER_EVERY, LEGACY_STREAM, MAX_PENDING_EVENTS,
};
pub use trace::recorder::{
    Recorder, RecordingAllocator, RecordingSummary, MAX_RECORDED_LINE_BYTES, RECORD_BUFFER_BYTES,
};
pub use types::config::{ArenaConfig, ExtendStrategy};
pub use types::error::{escaped, ArenaError, Result, ERROR_CODES};
pub use types::memory_info::{AllocatorType, MemoryInfo, MemoryKind};
pub use types::memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
pub use types::stats::{AllocatorStats, STATS_KEYS};
