//! The state of an allocator that hands out whole blocks (the plain allocator, the pool's
//! simulation and the CUDA memory pool): its live blocks, its stats and whether it was
//! retired, with the bookkeeping they share, and the [`Allocator`](crate::Allocator) methods
//! that follow from it (the macros below). One copy, so the three count, refuse and report
//! alike.

use crate::allocators::allocator::retired;
use crate::allocators::live_blocks::LiveBlocks;
use crate::types::error::Result;
use crate::types::memory_log::MemoryLog;
use crate::types::stats::AllocatorStats;

/// Live blocks tagged with `T` (a stream, or whether a block is a reserve), the stats, and
/// whether the allocator was retired.
#[derive(Debug)]
pub struct BlockState<T> {
    /// The blocks handed out and not yet freed.
    pub live: LiveBlocks<T>,
    /// What the allocator reports; `in_use` follows the live blocks.
    pub stats: AllocatorStats,
    /// Set by `retire`: everything went back and every call fails.
    pub retired: bool,
}

impl<T: Copy> BlockState<T> {
    /// No block yet; `owner` is how errors name the allocator (`this memory pool`).
    pub fn new(owner: &'static str, stats: AllocatorStats) -> Self {
        BlockState {
            live: LiveBlocks::new(owner),
            stats,
            retired: false,
        }
    }

    /// `ERR_ARENA_RELEASED` once retired.
    pub fn check_live(&self) -> Result<()> {
        if self.retired {
            Err(retired())
        } else {
            Ok(())
        }
    }

    /// Records a block of `size` bytes handed out at `addr`, counted in use.
    pub fn add(&mut self, addr: u64, size: u64, tag: T) {
        self.live.insert(addr, size, tag);
        self.stats.add_in_use(size, size);
    }

    /// Forgets the live block at `addr` and uncounts it: its size and tag. Refused once
    /// retired, and for an address that is not a live block's (DESIGN decision 8: a foreign
    /// free is an error, not a logged warning).
    pub fn take(&mut self, addr: u64) -> Result<(u64, T)> {
        self.check_live()?;
        let (size, tag) = self.live.remove(addr)?;
        self.stats.remove_in_use(size, size);
        Ok((size, tag))
    }

    /// The size of the live block at `addr`.
    pub fn allocated_size(&self, addr: u64) -> Result<u64> {
        self.check_live()?;
        Ok(self.live.get(addr)?.0)
    }

    /// The tag of the live block that holds all of `[addr, addr+len)`.
    pub fn containing(&self, addr: u64, len: u64) -> Result<T> {
        self.check_live()?;
        self.live.containing(addr, len)
    }

    /// The memory log: the live blocks under these stats.
    pub fn log(&self) -> MemoryLog {
        self.live.log(self.stats)
    }
}

/// [`Allocator`](crate::Allocator) methods of an allocator whose `self.state` locks (a
/// `Deref` to) a [`BlockState`] and which has `retire_state(&self, &mut state)`: sizes and
/// retiring. Not a supported API: shared with `cuda-sys-bridge`'s memory pool.
#[doc(hidden)]
#[macro_export]
macro_rules! block_state_lookups {
    () => {
        fn allocated_size(&self, addr: u64) -> $crate::Result<u64> {
            self.state.lock().allocated_size(addr)
        }

        fn requested_size(&self, addr: u64) -> $crate::Result<u64> {
            self.allocated_size(addr)
        }

        fn retire(&self) {
            let mut st = self.state.lock();
            if !st.retired {
                self.retire_state(&mut st);
            }
        }
    };
}

/// [`Allocator`](crate::Allocator) methods of a stream-ordered pool: a reserve is served as
/// an allocation (as ONNX Runtime's pool does), allocations on a stream go to
/// `self.allocate(size, Option<&Stream>)`, and a reset stream's blocks lose their tag
/// (`forget_stream` on the locked state). Not a supported API: shared with `cuda-sys-bridge`.
#[doc(hidden)]
#[macro_export]
macro_rules! stream_ordered_pool_methods {
    () => {
        fn reserve(&self, size: u64) -> $crate::Result<Option<u64>> {
            self.allocate(size, None)
        }

        fn is_stream_aware(&self) -> bool {
            true
        }

        fn alloc_on_stream(
            &self,
            size: u64,
            stream: &$crate::Stream,
        ) -> $crate::Result<Option<u64>> {
            self.allocate(size, Some(stream))
        }

        fn reset_chunks_using_stream(&self, stream: &$crate::Stream) -> $crate::Result<()> {
            let mut st = self.state.lock();
            st.check_live()?;
            st.forget_stream(stream.id());
            Ok(())
        }
    };
}

/// The methods of an allocator over a raw allocator whose blocks are its own (the plain
/// allocator and the pool's simulation): the memory log, copies under the lock (`in_range`
/// runs them once the range is known to lie in one live block) and [`block_state_lookups`].
macro_rules! raw_block_methods {
    () => {
        fn memory_log(&self) -> MemoryLog {
            self.state.lock().log()
        }

        fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
            self.in_range(addr, data.len() as u64, |raw| raw.write(addr, data))
        }

        fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
            let len = out.len() as u64;
            self.in_range(addr, len, |raw| raw.read(addr, out))
        }

        fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
            self.in_range(addr, len, |raw| raw.fill(addr, byte, len))
        }

        $crate::block_state_lookups!();
    };
}

pub(crate) use raw_block_methods;

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> BlockState<u8> {
        BlockState::new("this allocator", AllocatorStats::default())
    }

    #[test]
    fn a_block_added_then_taken_is_counted_in_use_and_back_out() {
        let mut st = state();
        st.add(0x1000, 512, 3);
        assert_eq!((st.stats.in_use, st.stats.num_allocs), (512, 1));
        assert_eq!(st.take(0x1000).ok(), Some((512, 3)));
        assert_eq!(st.stats.in_use, 0);
    }

    #[test]
    fn a_foreign_address_is_refused_and_changes_nothing() {
        let mut st = state();
        st.add(0x1000, 512, 3);
        assert_eq!(
            st.take(0x1100).map_err(|e| e.code()),
            Err("ERR_ARENA_UNKNOWN_POINTER")
        );
        assert_eq!(st.allocated_size(0x1000).ok(), Some(512));
        assert_eq!(st.stats.in_use, 512);
    }

    #[test]
    fn once_retired_every_lookup_is_refused() {
        let mut st = state();
        st.add(0x1000, 512, 3);
        st.retired = true;
        let released = Err("ERR_ARENA_RELEASED");
        assert_eq!(st.take(0x1000).map(|_| ()).map_err(|e| e.code()), released);
        assert_eq!(
            st.allocated_size(0x1000).map(|_| ()).map_err(|e| e.code()),
            released
        );
        assert_eq!(
            st.containing(0x1000, 1).map(|_| ()).map_err(|e| e.code()),
            released
        );
    }
}
