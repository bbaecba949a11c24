//! What `cuda-arena replay` replays a config on: the allocator the config selects for 'Cuda'
//! memory of device 0 on a backend, new and unshared (`trace::replay_file` takes it).

use crate::devices::backend::Backend;
use crate::devices::factory::{selected_allocator, Selected, SharedKind};
use crate::trace::replay_file::ReplayTarget;
use crate::types::config::ArenaConfig;
use crate::types::error::Result;
use crate::types::memory_info::MemoryKind;

/// The allocator `config` selects on `backend` for 'Cuda' memory of device 0, for a replay.
pub fn replay_target(backend: &dyn Backend, config: &ArenaConfig) -> Result<ReplayTarget> {
    let Selected {
        allocator,
        kind,
        warnings,
    } = selected_allocator(backend, MemoryKind::Cuda, 0, config)?;
    Ok(ReplayTarget {
        allocator,
        is_pool: kind == SharedKind::Mempool,
        warnings,
    })
}
