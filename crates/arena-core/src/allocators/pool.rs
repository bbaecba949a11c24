//! The memory-pool allocator's stand-in for the `host` and `virtual` backends: what
//! `arena.use_cuda_mempool=1` selects when there is no CUDA, so selection, lifecycle and
//! stats are tested without a GPU. Like a CUDA pool it is stream-ordered: a freed block goes
//! back to the pool tagged with the stream it was used on and is reused by that stream (or,
//! once it has no stream, by anyone); cached bytes beyond the release threshold go back to
//! the raw allocator; `shrink` trims the cache to `bytes_to_keep_on_shrink`. A released
//! stream's blocks lose their tag (the state is shared with the stream through a weak
//! reference, as the arena's is).

use crate::allocators::allocator::Allocator;
use crate::allocators::block_state::{raw_block_methods, BlockState};
use crate::raw::RawAllocator;
use crate::streams::stream::{Stream, StreamId, StreamUser};
use crate::types::config::ArenaConfig;
use crate::types::error::Result;
use crate::types::memory_info::MemoryInfo;
use crate::types::memory_log::MemoryLog;
use crate::types::stats::AllocatorStats;
use parking_lot::Mutex;
use std::sync::Arc;

/// A stream-ordered pool over a raw allocator; see the module docs.
#[derive(Debug)]
pub struct PoolAllocator<R: RawAllocator> {
    raw: R,
    release_threshold: u64,
    bytes_to_keep_on_shrink: u64,
    state: Arc<Mutex<PoolState>>,
}

#[derive(Debug)]
struct PoolState {
    /// Live allocations, tagged with their stream.
    blocks: BlockState<StreamId>,
    /// Freed blocks kept for reuse: (address, size, stream), oldest first.
    cached: Vec<(u64, u64, StreamId)>,
    cached_bytes: u64,
}

impl std::ops::Deref for PoolState {
    type Target = BlockState<StreamId>;
    fn deref(&self) -> &BlockState<StreamId> {
        &self.blocks
    }
}

impl std::ops::DerefMut for PoolState {
    fn deref_mut(&mut self) -> &mut BlockState<StreamId> {
        &mut self.blocks
    }
}

impl PoolState {
    /// Blocks tagged with `stream` become anyone's.
    fn forget_stream(&mut self, stream: StreamId) {
        for (_, _, s) in self.cached.iter_mut() {
            if *s == stream {
                *s = 0;
            }
        }
        self.blocks.live.retag(stream, 0);
    }
}

impl StreamUser for Mutex<PoolState> {
    fn stream_released(&self, id: StreamId) {
        self.lock().forget_stream(id);
    }

    fn stream_holds_memory(&self, id: StreamId) -> bool {
        self.lock().live.iter().any(|(_, _, s)| s == id)
    }
}

impl<R: RawAllocator> PoolAllocator<R> {
    /// A pool over `raw` with the mempool keys of `config` (an unset release threshold means
    /// unlimited, DESIGN decision 9).
    pub fn new(raw: R, config: &ArenaConfig) -> Self {
        PoolAllocator {
            raw,
            release_threshold: config.cuda_mempool_release_threshold.unwrap_or(u64::MAX),
            bytes_to_keep_on_shrink: config.cuda_mempool_bytes_to_keep_on_shrink,
            state: Arc::new(Mutex::new(PoolState {
                blocks: BlockState::new(
                    "this memory pool",
                    AllocatorStats {
                        limit: 0,
                        ..Default::default()
                    },
                ),
                cached: Vec::new(),
                cached_bytes: 0,
            })),
        }
    }

    /// The raw allocator underneath.
    pub fn raw(&self) -> &R {
        &self.raw
    }

    fn allocate(&self, size: u64, stream: Option<&Stream>) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        let mut st = self.state.lock();
        st.check_live()?;
        if let Some(s) = stream {
            s.clock().register_user(&self.state);
        }
        let stream = stream.map_or(0, Stream::id);
        let reuse = st
            .cached
            .iter()
            .position(|&(_, s, from)| s == size && (from == stream || from == 0));
        let addr = match reuse {
            Some(i) => {
                let (addr, s, _) = st.cached.remove(i);
                st.cached_bytes -= s;
                addr
            }
            None => {
                let addr = self.raw.alloc(size)?;
                st.stats.total_allocated += size;
                addr
            }
        };
        st.add(addr, size, stream);
        Ok(Some(addr))
    }

    /// Runs `op` under the lock once `[addr, addr+len)` is known to lie in one live block.
    fn in_range<T>(&self, addr: u64, len: u64, op: impl FnOnce(&R) -> Result<T>) -> Result<T> {
        let st = self.state.lock();
        st.containing(addr, len)?;
        op(&self.raw)
    }

    /// Returns cached blocks to the raw allocator, oldest first, until at most `keep` bytes
    /// stay cached.
    fn trim(&self, st: &mut PoolState, keep: u64) -> Result<()> {
        while st.cached_bytes > keep {
            let (addr, size, _) = st.cached[0];
            self.raw.free(addr, size)?;
            st.cached.remove(0);
            st.cached_bytes -= size;
            st.stats.total_allocated -= size;
        }
        Ok(())
    }

    /// Hands every block back and marks the pool retired.
    fn retire_state(&self, st: &mut PoolState) {
        // Nothing can be reported from here; the raw allocator counts what it got back.
        for (addr, size, _) in st.live.drain() {
            let _ = self.raw.free(addr, size);
        }
        for (addr, size, _) in st.cached.drain(..) {
            let _ = self.raw.free(addr, size);
        }
        st.cached_bytes = 0;
        st.stats = AllocatorStats {
            limit: 0,
            ..Default::default()
        };
        st.retired = true;
    }
}

impl<R: RawAllocator> Drop for PoolAllocator<R> {
    fn drop(&mut self) {
        Allocator::retire(self);
    }
}

impl<R: RawAllocator> Allocator for PoolAllocator<R> {
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, None)
    }

    fn free(&self, addr: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        let (size, stream) = st.take(addr)?;
        st.cached.push((addr, size, stream));
        st.cached_bytes += size;
        let threshold = self.release_threshold;
        // A raw free failing here leaves the block cached; nothing of the caller's is lost.
        let _ = self.trim(&mut st, threshold);
        Ok(())
    }

    crate::stream_ordered_pool_methods!();

    fn info(&self) -> MemoryInfo {
        self.raw.info()
    }

    fn stats(&self) -> AllocatorStats {
        self.state.lock().stats
    }

    fn can_shrink(&self) -> bool {
        true
    }

    fn shrink(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.check_live()?;
        self.trim(&mut st, self.bytes_to_keep_on_shrink)?;
        st.stats.num_arena_shrinkages += 1;
        Ok(())
    }

    raw_block_methods!();
}
