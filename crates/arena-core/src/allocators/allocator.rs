//! The `Allocator` trait, ONNX Runtime's `OrtAllocator` shape, and [`PlainAllocator`], the
//! arena-less allocator used for read-only (initializer) memory.

use crate::allocators::block_state::{raw_block_methods, BlockState};
use crate::raw::RawAllocator;
use crate::streams::stream::Stream;
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::MemoryInfo;
use crate::types::memory_log::{ChunkLog, MemoryLog};
use crate::types::recording_summary::RecordingSummary;
use crate::types::stats::AllocatorStats;
use parking_lot::Mutex;

/// The `OrtAllocator` version whose shape this trait follows (it has `Shrink`).
pub const ORT_ALLOCATOR_VERSION: u32 = 25;

/// An allocator as ONNX Runtime sees one. Sizes and addresses are `u64`; an address is only
/// meaningful to the allocator that returned it. Every failed call leaves the allocator as
/// it was.
///
/// Every allocator a factory hands out is a [`crate::RecordingAllocator`] around the real one:
/// a method added here with a default body must be forwarded there too, or factory-made
/// allocators will answer with the default.
pub trait Allocator: Send + Sync + std::fmt::Debug {
    /// Allocates `size` bytes, 256-byte aligned. `Ok(None)` only for `size == 0`.
    fn alloc(&self, size: u64) -> Result<Option<u64>>;

    /// Frees an address from `alloc`, `alloc_on_stream` or `reserve`. 0 is a no-op; an
    /// address this allocator does not hold is [`ArenaError::UnknownPointer`].
    fn free(&self, addr: u64) -> Result<()>;

    /// Allocates `size` bytes outside any caching (initializers). `Ok(None)` for 0.
    fn reserve(&self, size: u64) -> Result<Option<u64>>;

    /// Whether [`Allocator::alloc_on_stream`] is available.
    fn is_stream_aware(&self) -> bool {
        false
    }

    /// Allocates `size` bytes for use on `stream`.
    fn alloc_on_stream(&self, size: u64, stream: &Stream) -> Result<Option<u64>> {
        let _ = (size, stream);
        Err(ArenaError::invalid_argument(format!(
            "the allocator for {} is not stream-aware",
            self.info()
        )))
    }

    /// Forgets every chunk's association with `stream` (ORT calls this at session-run end).
    fn reset_chunks_using_stream(&self, stream: &Stream) -> Result<()> {
        let _ = stream;
        Ok(())
    }

    /// Which memory this allocator serves.
    fn info(&self) -> MemoryInfo;

    /// The counters, with ORT's meanings.
    fn stats(&self) -> AllocatorStats;

    /// Whether [`Allocator::shrink`] does anything.
    fn can_shrink(&self) -> bool {
        false
    }

    /// The run of chunks that starts at `addr`, as [`Allocator::memory_log`] shows them: that
    /// chunk, the free chunks after it, and the first in-use chunk after those, within the
    /// log's region that holds it ([`MemoryLog::chunks_from`]); `None` when no chunk starts at
    /// `addr`. What a picture of the allocator's memory (`trace::picture`) reads after each
    /// operation to follow splits and merges, instead of repeating the allocator's rules. The
    /// default reads the whole memory log; an arena answers from the chunks themselves.
    fn chunks_from(&self, addr: u64) -> Option<Vec<ChunkLog>> {
        self.memory_log().chunks_from(addr)
    }

    /// How many times the allocator rearranged free memory beyond the chunks its calls handed
    /// out or freed: an arena's free chunks of streams whose work is done going back to no
    /// stream, merged with their neighbours. A picture of the allocator's memory reads the
    /// chunks again when this moves, as when regions come or go. 0 for allocators that never
    /// do.
    fn layout_changes(&self) -> u64 {
        0
    }

    /// Returns cached memory that is wholly free to the raw allocator.
    fn shrink(&self) -> Result<()> {
        Ok(())
    }

    /// A snapshot of regions, chunks and reserves.
    fn memory_log(&self) -> MemoryLog;

    /// Bytes actually set aside for a live address (the chunk size for an arena).
    fn allocated_size(&self, addr: u64) -> Result<u64>;

    /// Bytes asked for at a live address.
    fn requested_size(&self, addr: u64) -> Result<u64>;

    /// Copies `data` into memory this allocator handed out; the whole range must lie inside
    /// one live allocation (its requested size), else [`ArenaError::UnknownPointer`].
    fn write(&self, addr: u64, data: &[u8]) -> Result<()>;

    /// Copies memory this allocator handed out into `out`, with `write`'s range rule.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()>;

    /// Sets `len` bytes at `addr` to `byte`, with `write`'s range rule.
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()>;

    /// Starts recording this allocator's calls to a new trace file at `path`. A
    /// [`crate::RecordingAllocator`] records (the factory hands out every allocator as one);
    /// others cannot: `ERR_ARENA_INVALID_ARGUMENT`.
    fn start_recording(&self, path: &str) -> Result<()> {
        let _ = path;
        Err(ArenaError::invalid_argument(format!(
            "the allocator for {} cannot record (wrap it in a RecordingAllocator)",
            self.info()
        )))
    }

    /// Stops the recording, once everything recorded is written, and says what it did.
    fn stop_recording(&self) -> Result<RecordingSummary> {
        Err(ArenaError::invalid_argument(format!(
            "the allocator for {} is not recording",
            self.info()
        )))
    }

    /// Hands every byte back to the raw allocator (live allocations included) and makes
    /// every later call fail with [`ArenaError::Released`] (stats read as empty). The factory
    /// retires an allocator when its last user releases it, so the memory comes back then,
    /// even if a stale reference to the allocator remains somewhere. Idempotent.
    fn retire(&self);
}

/// The error of every call on a retired allocator.
pub(crate) fn retired() -> ArenaError {
    ArenaError::Released {
        what: "the allocator".into(),
    }
}

/// The error for a range that is not inside one live allocation.
pub(crate) fn out_of_range(addr: u64, len: u64, owner: &str) -> ArenaError {
    ArenaError::unknown_pointer(
        addr,
        format!("{len} bytes from here are not inside one live allocation of {owner}"),
    )
}

/// Whether `[addr, addr+len)` lies inside `[base, base+size)`.
pub(crate) fn range_inside(addr: u64, len: u64, base: u64, size: u64) -> bool {
    addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + size)
}

/// An allocator that passes every request straight to a raw allocator: no caching, no
/// rounding. What ORT uses for read-only (initializer) memory.
#[derive(Debug)]
pub struct PlainAllocator<R: RawAllocator> {
    raw: R,
    /// What `info()` reports; the raw allocator's unless overridden (read-only type).
    info: MemoryInfo,
    state: Mutex<PlainState>,
}

/// Live allocations, tagged with whether each is a reserve.
type PlainState = BlockState<bool>;

impl<R: RawAllocator> PlainAllocator<R> {
    /// A plain allocator over `raw`.
    pub fn new(raw: R) -> Self {
        PlainAllocator {
            info: raw.info(),
            raw,
            state: Mutex::new(BlockState::new(
                "this allocator",
                AllocatorStats::with_limit(u64::MAX),
            )),
        }
    }

    /// The same allocator, reporting `info` (the factory marks read-only allocators so).
    pub fn with_info(mut self, info: MemoryInfo) -> Self {
        self.info = info;
        self
    }

    /// The raw allocator underneath.
    pub fn raw(&self) -> &R {
        &self.raw
    }

    fn allocate(&self, size: u64, reserve: bool) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        let mut st = self.state.lock();
        st.check_live()?;
        let addr = self.raw.alloc(size)?;
        st.add(addr, size, reserve);
        st.stats.total_allocated += size;
        if reserve {
            st.stats.num_reserves += 1;
            st.stats.reserved_bytes += size;
        }
        Ok(Some(addr))
    }

    /// Runs `op` with the lock held once `[addr, addr+len)` is known to lie inside one live
    /// allocation, so no free can race the copy.
    fn in_range<T>(&self, addr: u64, len: u64, op: impl FnOnce(&R) -> Result<T>) -> Result<T> {
        let st = self.state.lock();
        st.containing(addr, len)?;
        op(&self.raw)
    }

    fn retire_state(&self, st: &mut PlainState) {
        for (addr, size, _) in st.live.drain() {
            // Nothing can be reported from here; the raw allocator counts what it got back.
            let _ = self.raw.free(addr, size);
        }
        st.stats = AllocatorStats::with_limit(u64::MAX);
        st.retired = true;
    }
}

impl<R: RawAllocator> Drop for PlainAllocator<R> {
    fn drop(&mut self) {
        Allocator::retire(self);
    }
}

impl<R: RawAllocator> Allocator for PlainAllocator<R> {
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, false)
    }

    fn free(&self, addr: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        st.check_live()?;
        let (size, reserve) = st.live.get(addr)?;
        // The raw free first: refused, the block stays live and counted.
        self.raw.free(addr, size)?;
        st.take(addr)?;
        st.stats.total_allocated -= size;
        if reserve {
            st.stats.reserved_bytes -= size;
        }
        Ok(())
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, true)
    }

    fn info(&self) -> MemoryInfo {
        self.info
    }

    fn stats(&self) -> AllocatorStats {
        self.state.lock().stats
    }

    raw_block_methods!();
}
