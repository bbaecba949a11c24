//! The arena's two modes, each one [`Core`] over a source of memory (`source.rs`): ONNX
//! Runtime's regions, or pages mapped on demand in reserved ranges (the default through the
//! factory, DESIGN "Virtual-memory mode"). Everything a mode does is in its core's paths,
//! compiled apart for each source; [`Arena`] only picks one and passes each call on.

use super::*;

/// A BFC arena over the raw allocator `R`: ONNX Runtime's region arena ([`Arena::new`]) or the
/// virtual-memory arena ([`Arena::with_virtual_memory`]). Thread-safe; threads allocate from
/// sub-arenas of their own (see `bfc.rs`).
#[derive(Debug)]
pub struct Arena<R: RawAllocator> {
    mode: Mode<R>,
}

#[derive(Debug)]
enum Mode<R: RawAllocator> {
    Regions(Core<R, Regions>),
    Pages(Core<R, Paged>),
}

/// `$body` with `$core` bound to the arena's core, whichever its mode.
macro_rules! each_mode {
    ($arena:expr, $core:ident => $body:expr) => {
        match &$arena.mode {
            Mode::Regions($core) => $body,
            Mode::Pages($core) => $body,
        }
    };
}

impl<R: RawAllocator> Arena<R> {
    /// An arena over `raw` with `config`, in ONNX Runtime's region mode: each region a raw
    /// allocation, whole until it is wholly free. Takes no memory until the first allocation.
    pub fn new(raw: R, config: ArenaConfig) -> Result<Self> {
        config.validate()?;
        Ok(Arena {
            mode: Mode::Regions(Core::regions(raw, config)),
        })
    }

    /// An arena in virtual-memory mode (DESIGN, "Virtual-memory mode"): its chunks live in
    /// address ranges reserved from `vm`, whose pages are mapped when a chunk first needs
    /// them and unmapped when wholly free under `config`'s `arena.vm_*` policy; reserves come
    /// from `raw`. `arena.use_virtual_memory` itself is not consulted: this constructor is
    /// the choice. A page size that is not a multiple of `vm`'s granularity is
    /// `ERR_ARENA_INVALID_CONFIG`. Takes no memory until the first allocation.
    pub fn with_virtual_memory(
        raw: R,
        vm: Arc<dyn VirtualMemory>,
        config: ArenaConfig,
    ) -> Result<Self> {
        config.validate()?;
        Ok(Arena {
            mode: Mode::Pages(Core::paged(raw, vm, config)?),
        })
    }

    /// The virtual-memory form the arena maps its pages from, in virtual-memory mode.
    pub fn virtual_memory(&self) -> Option<&Arc<dyn VirtualMemory>> {
        each_mode!(self, c => c.virtual_memory())
    }

    /// The same arena without `alloc_on_stream` (ORT's pinned arena).
    pub fn without_streams(mut self) -> Self {
        match &mut self.mode {
            Mode::Regions(c) => c.set_without_streams(),
            Mode::Pages(c) => c.set_without_streams(),
        }
        self
    }

    /// The raw allocator underneath.
    pub fn raw(&self) -> &R {
        each_mode!(self, c => c.raw())
    }

    /// The configuration the arena was made with.
    pub fn config(&self) -> &ArenaConfig {
        each_mode!(self, c => c.config())
    }

    /// How many times the sub-arenas' `InUse` quotas were rebalanced (`in_use_quota.rs`): the
    /// one step of the common path that needs every thread's sub-arena. For benchmarks.
    pub fn quota_rebalances(&self) -> u64 {
        each_mode!(self, c => c.quota_rebalances())
    }

    /// Of [`Arena::quota_rebalances`], those that moved quota among the sub-arenas at hand
    /// without waiting for one another thread held.
    pub fn quota_rebalances_in_part(&self) -> u64 {
        each_mode!(self, c => c.quota_rebalances_in_part())
    }

    /// Of [`Arena::quota_rebalances`], those that borrowed unused quota from one other
    /// sub-arena alone, locking no other.
    pub fn quota_borrows(&self) -> u64 {
        each_mode!(self, c => c.quota_borrows())
    }

    /// How many allocations left the common path (no free chunk of the thread's sub-arena
    /// served, or the quota needed a rebalance): each takes the global lock, and in
    /// virtual-memory mode may map pages. For benchmarks and tests.
    pub fn slow_allocations(&self) -> u64 {
        each_mode!(self, c => c.slow_allocations())
    }

    /// Walks every chunk and checks the arena's invariants: regions tiled exactly by linked
    /// chunks, free chunks in their bins and in-use ones in the address map, no two adjacent
    /// free chunks of one stream left unmerged, every stat equal to what the chunks and
    /// reserves add up to, and across sub-arenas the quotas, the budget and the directory.
    /// O(chunks); for tests and debugging. Returns the first fault.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        each_mode!(self, c => c.check_invariants())
    }
}

impl<R: RawAllocator> Allocator for Arena<R> {
    #[inline]
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        each_mode!(self, c => c.alloc(size))
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        each_mode!(self, c => c.free(addr))
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        each_mode!(self, c => c.reserve(size))
    }

    fn is_stream_aware(&self) -> bool {
        each_mode!(self, c => c.is_stream_aware())
    }

    #[inline]
    fn alloc_on_stream(&self, size: u64, stream: &Stream) -> Result<Option<u64>> {
        each_mode!(self, c => c.alloc_on_stream(size, stream))
    }

    fn reset_chunks_using_stream(&self, stream: &Stream) -> Result<()> {
        each_mode!(self, c => c.reset_chunks_using_stream(stream))
    }

    fn info(&self) -> MemoryInfo {
        each_mode!(self, c => c.info())
    }

    fn stats(&self) -> AllocatorStats {
        each_mode!(self, c => c.stats())
    }

    fn can_shrink(&self) -> bool {
        each_mode!(self, c => c.can_shrink())
    }

    fn chunks_from(&self, addr: u64) -> Option<Vec<ChunkLog>> {
        each_mode!(self, c => c.chunks_from(addr))
    }

    fn layout_changes(&self) -> u64 {
        each_mode!(self, c => c.layout_changes())
    }

    fn shrink(&self) -> Result<()> {
        each_mode!(self, c => c.shrink())
    }

    fn memory_log(&self) -> MemoryLog {
        each_mode!(self, c => c.memory_log())
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        each_mode!(self, c => c.allocated_size(addr))
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        each_mode!(self, c => c.requested_size(addr))
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        each_mode!(self, c => c.write(addr, data))
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        each_mode!(self, c => c.read(addr, out))
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        each_mode!(self, c => c.fill(addr, byte, len))
    }

    fn retire(&self) {
        each_mode!(self, c => c.retire())
    }
}
