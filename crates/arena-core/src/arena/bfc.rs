//! The BFC arena: best fit with coalescing over regions obtained from a [`RawAllocator`],
//! with ONNX Runtime's semantics (see `shared/reference/ort-arena-behaviour.md`) and the
//! DESIGN's decisions on top. This file is policy; the structures live in `bins`,
//! `free_list`, `chunks` and `region`.
//!
//! One mutex guards the whole state, as in ORT; raw allocator calls happen under it. The
//! state sits behind an `Arc` so that streams can tell the arena, through a weak reference,
//! when they are released (it then resets their chunks; see `stream.rs`).
//!
//! Streams the host owns (issue 13) with events: a free on one takes a mark under the lock (no
//! driver call); an allocation that finds no chunk lets go of the lock, records and queries the
//! other host streams' events (`stream_events.rs`) and searches again, and on the way to out of
//! memory waits for those events before failing. No event call happens under the lock.
//!
//! Virtual-memory mode (`arena.use_virtual_memory`, [`Arena::with_virtual_memory`]): the
//! regions are reserved address ranges rather than raw allocations, and pages of them are
//! mapped when a chunk first needs them; the page policy lives in `arena/vm.rs`, the page
//! bits in `pages.rs`. Unmapped free memory is kept out of the bins, so allocating from and
//! freeing to mapped memory are the region mode's paths, unchanged.

mod vm;

use crate::addr_map::{AddrMap, AddrTable};
use crate::allocator::{out_of_range, range_inside, Allocator};
use crate::bins::{bin_for_size, bin_size, round_up_256, MIN_ALLOCATION_SIZE, NUM_BINS};
use crate::chunks::{Chunk, ChunkSlab};
use crate::config::{ArenaConfig, ExtendStrategy};
use crate::error::{ArenaError, Result};
use crate::free_list::{FreeBins, NIL};
use crate::lock::ArenaLock;
use crate::memory_info::MemoryInfo;
use crate::memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
use crate::raw::{RawAllocator, VirtualMemory};
use crate::region::{Region, RegionSet};
use crate::stats::AllocatorStats;
use crate::stream::{Clock, Stream, StreamId, StreamUser};
use crate::stream_events::FreeEvents;
use std::sync::Arc;

/// Host-owned streams with events that tag chunks of an arena, by stream id (ascending).
type Hosted = Vec<(StreamId, Arc<FreeEvents>)>;

/// How far an allocation has gone to get other host streams' freed chunks (issue 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    Nothing,
    /// Their frees were covered by events and the events queried.
    Polled,
    /// The host blocked until those events completed (on the way to out of memory).
    Finished,
}

/// What an allocation that found no free chunk does next.
enum Miss {
    Found(u32),
    /// Let go of the lock, then poll (or finish) these streams' events and search again.
    Wait(Vec<Arc<FreeEvents>>, Waited),
}

/// Where the bytes of a live allocation are, for copies.
enum Memory<'a, R> {
    Raw(&'a R),
    Vm(&'a dyn VirtualMemory),
}

/// ORT's back-off: a refused region is retried at 90% of its size (single precision, as ORT
/// computes it) until it would be smaller than the request or than this many bytes.
const BACKOFF_FACTOR: f32 = 0.9;
const BACKOFF_MIN_BYTES: u64 = 8192;

/// A BFC arena over the raw allocator `R`. Thread-safe.
#[derive(Debug)]
pub struct Arena<R: RawAllocator> {
    raw: R,
    /// Virtual-memory mode: where the chunks' memory comes from (reserves still come from
    /// `raw`). `None`: regions are raw allocations.
    vm: Option<Arc<dyn VirtualMemory>>,
    config: ArenaConfig,
    /// A free chunk handed out is cut when the rest would waste at least this many bytes:
    /// `max_dead_bytes_per_chunk` (ORT's rule), or 256 in virtual-memory mode, where waste
    /// inside a chunk holds mapped pages.
    split_waste: u64,
    stream_aware: bool,
    state: Arc<ArenaLock<State>>,
}

#[derive(Debug)]
struct State {
    chunks: ChunkSlab,
    /// Exactly the free chunks, each in the bin of its size.
    bins: FreeBins,
    regions: RegionSet,
    /// Exactly the in-use chunks, by start address.
    live: AddrTable,
    /// Live reserves: address → size (not rounded).
    reserves: AddrMap<u64>,
    stats: AllocatorStats,
    /// Size of the next power-of-two region (ORT's `curr_region_allocation_bytes_`).
    growth: u64,
    next_region_id: u64,
    next_alloc_id: u64,
    /// Set by [`Allocator::retire`]: every region and reserve went back to the raw allocator
    /// and every call fails with `ERR_ARENA_RELEASED`. Checked only on the paths a retired
    /// arena reaches anyway (no free chunk, no live chunk), so the common path pays nothing.
    retired: bool,
    /// Host-owned streams with events that chunks are tagged with: one entry per such stream
    /// that allocated here and has not been reset or released since. A free chunk tagged with
    /// one carries, as its sync id, the mark its last free took on that stream.
    hosted: Hosted,
    /// Virtual-memory mode: the mapped pages of the ranges (the regions) and the policy.
    pages: Option<Box<vm::Paged>>,
    /// High-water mark of chunk bytes in use (reserves not counted) since the last shrink:
    /// virtual-memory mode maps past it by at most `arena.vm_peak_headroom_percent`.
    peak_chunk_bytes: u64,
    /// Virtual-memory mode: a free chunk of no stream merges with a free neighbour of a
    /// stream, which then covers both. Otherwise the no-stream rest of every chunk a stream
    /// cut from fresh memory stays apart from it when it is freed, and the pages both touch
    /// can be neither reused whole nor unmapped. (The region mode keeps ORT's rule: only
    /// chunks of one stream merge.)
    absorb_unassigned: bool,
}

impl<R: RawAllocator> Arena<R> {
    /// An arena over `raw` with `config`. Takes no memory until the first allocation.
    pub fn new(raw: R, config: ArenaConfig) -> Result<Self> {
        config.validate()?;
        let first = config.max_mem.min(config.initial_chunk_size_bytes);
        let state = State {
            chunks: ChunkSlab::default(),
            bins: FreeBins::new(),
            regions: RegionSet::default(),
            live: AddrTable::default(),
            reserves: AddrMap::default(),
            stats: AllocatorStats::with_limit(config.max_mem),
            growth: round_up_256(first).unwrap_or(first),
            next_region_id: 0,
            next_alloc_id: 1,
            retired: false,
            hosted: Vec::new(),
            pages: None,
            peak_chunk_bytes: 0,
            absorb_unassigned: false,
        };
        Ok(Arena {
            raw,
            vm: None,
            split_waste: config.max_dead_bytes_per_chunk,
            config,
            stream_aware: true,
            state: Arc::new(ArenaLock::new(state)),
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
        let mut arena = Self::new(raw, config)?;
        let paged = vm::Paged::new(&*vm, &arena.config)?;
        {
            let mut st = arena.state.lock();
            st.pages = Some(Box::new(paged));
            st.absorb_unassigned = true;
        }
        arena.vm = Some(vm);
        arena.split_waste = MIN_ALLOCATION_SIZE;
        Ok(arena)
    }

    /// The virtual-memory form the arena maps its pages from, in virtual-memory mode.
    pub fn virtual_memory(&self) -> Option<&Arc<dyn VirtualMemory>> {
        self.vm.as_ref()
    }

    /// The same arena without `alloc_on_stream` (ORT's pinned arena).
    pub fn without_streams(mut self) -> Self {
        self.stream_aware = false;
        self
    }

    /// The raw allocator underneath.
    pub fn raw(&self) -> &R {
        &self.raw
    }

    /// The configuration the arena was made with.
    pub fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// The size as the arena will hand it out, or why it never can (DESIGN decision 4).
    #[inline]
    fn rounded(&self, size: u64) -> Result<u64> {
        let rounded = round_up_256(size).ok_or_else(|| {
            ArenaError::oom(
                size,
                "the size rounded up to a multiple of 256 does not fit in 64 bits",
            )
        })?;
        if rounded > self.config.max_mem {
            return Err(ArenaError::oom(
                size,
                format!(
                    "{rounded} bytes (rounded) exceed arena.max_mem of {}",
                    self.config.max_mem
                ),
            ));
        }
        Ok(rounded)
    }

    #[inline]
    fn allocate(&self, size: u64, stream: Option<&Stream>) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        let rounded = self.rounded(size)?;
        let consumer = stream.map_or(0, Stream::id);
        let mut waited = Waited::Nothing;
        loop {
            let mut st = self.state.lock();
            let mut clock = stream.map(Stream::clock);
            let id = match st.find(rounded, consumer, clock.as_deref()) {
                Some(id) => id,
                None => {
                    match self.on_miss(
                        &mut st,
                        rounded,
                        size,
                        consumer,
                        clock.as_deref(),
                        waited,
                    )? {
                        Miss::Found(id) => id,
                        Miss::Wait(others, next) => {
                            // Driver calls (event record, query, synchronize) outside the lock.
                            drop(clock);
                            drop(st);
                            for f in &others {
                                if next == Waited::Finished {
                                    f.finish();
                                } else {
                                    f.advance();
                                }
                            }
                            waited = next;
                            continue;
                        }
                    }
                }
            };
            let sync_id = clock.as_deref().map_or(0, Clock::sync_id);
            let addr = st.take(id, rounded, size, consumer, sync_id, self.split_waste);
            // The chunk is tagged with the stream now: the stream must tell us when it goes.
            if let Some(clock) = clock.as_mut() {
                clock.register_user(&self.state);
                if let Some(events) = stream.and_then(Stream::free_events) {
                    st.register_hosted(consumer, events);
                }
            }
            return Ok(Some(addr));
        }
    }

    /// No free chunk fits. First, once, other host streams' frees may have completed: the
    /// caller polls their events. Then the arena grows; when even that runs out of memory,
    /// the caller waits for those events, once, before the error stands.
    #[cold]
    #[inline(never)]
    fn on_miss(
        &self,
        st: &mut State,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
        waited: Waited,
    ) -> Result<Miss> {
        if waited == Waited::Nothing {
            let others = st.hosted_waiting(consumer);
            if !others.is_empty() {
                return Ok(Miss::Wait(others, Waited::Polled));
            }
        }
        match self.grow_and_find(st, rounded, size, consumer, clock) {
            Ok(id) => Ok(Miss::Found(id)),
            Err(e @ ArenaError::OutOfMemory { .. }) if waited != Waited::Finished => {
                let others = st.hosted_waiting(consumer);
                if others.is_empty() {
                    Err(e)
                } else {
                    Ok(Miss::Wait(others, Waited::Finished))
                }
            }
            Err(e) => Err(e),
        }
    }

    /// No free chunk fits: grow the arena (releasing idle regions first if growing fails)
    /// and search again. Out of line, to keep `allocate`'s common path small.
    #[cold]
    #[inline(never)]
    fn grow_and_find(
        &self,
        st: &mut State,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> Result<u32> {
        st.check_live()?;
        if let Some(vm) = &self.vm {
            return st.vm_grow_and_find(&**vm, &self.config, rounded, size, consumer, clock);
        }
        st.with_release_retry(&self.raw, None, &self.config, |st| {
            st.try_extend(&self.raw, &self.config, rounded, size)
        })?;
        st.find(rounded, consumer, clock)
            .ok_or_else(|| ArenaError::oom(size, "no free chunk fits even after growing the arena"))
    }

    /// Frees what is not an in-use chunk: a reserve, or an unknown address (an error).
    #[cold]
    #[inline(never)]
    fn free_other(&self, st: &mut State, addr: u64) -> Result<()> {
        st.check_live()?;
        if let Some(&size) = st.reserves.get(&addr) {
            self.raw.free(addr, size)?;
            st.reserves.remove(&addr);
            st.stats.remove_in_use(size, size);
            st.stats.reserved_bytes -= size;
            st.stats.total_allocated -= size;
            return Ok(());
        }
        Err(ArenaError::unknown_pointer(addr, st.describe_unknown(addr)))
    }

    /// Runs `op` on the memory behind `[addr, addr+len)` with the lock held once the range
    /// is known to lie inside one live allocation (its requested size), so no free can race
    /// the copy: the raw allocator for a reserve or a region's chunk, the virtual-memory form
    /// for a chunk in virtual-memory mode.
    fn in_range<T>(
        &self,
        addr: u64,
        len: u64,
        op: impl FnOnce(Memory<'_, R>) -> Result<T>,
    ) -> Result<T> {
        let st = self.state.lock();
        st.check_live()?;
        match (st.contains_range(addr, len), &self.vm) {
            (Some(false), Some(vm)) => op(Memory::Vm(&**vm)),
            (Some(_), _) => op(Memory::Raw(&self.raw)),
            (None, _) => Err(out_of_range(addr, len, "this allocator")),
        }
    }

    /// Walks every chunk and checks the arena's invariants: regions tiled exactly by linked
    /// chunks, free chunks in their bins and in-use ones in the address map, no two adjacent
    /// free chunks of one stream left unmerged, and every stat equal to what the chunks and
    /// reserves add up to. O(chunks); for tests and debugging. Returns the first fault.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.state.lock().check(&self.raw, self.vm.as_deref())
    }
}

/// Whether free chunk `c` may go to stream `consumer` (0: no stream). ORT's rule: the
/// consumer's own chunk, an unassigned one, or one whose stream the consumer has waited on
/// since the chunk was handed out there; for a host stream with events, one whose free that
/// stream's work is known past.
#[inline(always)]
fn reusable(c: &Chunk, consumer: StreamId, hosted: &Hosted, clock: Option<&Clock>) -> bool {
    c.stream == consumer
        || c.stream == 0
        || match hosted.binary_search_by_key(&c.stream, |e| e.0) {
            Ok(i) => hosted[i].1.is_complete(c.sync_id),
            Err(_) => clock.is_some_and(|cl| c.sync_id < cl.last_wait(c.stream)),
        }
}

impl StreamUser for ArenaLock<State> {
    fn stream_released(&self, id: StreamId) {
        let hosted = self.lock().reset_stream(id);
        // Outside the lock: the last reference hands its events back to the backend.
        drop(hosted);
    }
}

impl State {
    /// `ERR_ARENA_RELEASED` once the arena is retired.
    fn check_live(&self) -> Result<()> {
        if self.retired {
            return Err(ArenaError::Released {
                what: "the allocator".into(),
            });
        }
        Ok(())
    }

    /// Hands every region (or mapped page and range) and reserve back and empties the arena
    /// for good. Returns the host streams' events it held, for the caller to drop once the
    /// lock is released.
    #[must_use]
    fn retire<R: RawAllocator>(&mut self, raw: &R, vm: Option<&dyn VirtualMemory>) -> Hosted {
        // Nothing can be reported here (retire and drop cannot fail); the raw allocator's
        // counters show what came back.
        match (self.pages.is_some(), vm) {
            (true, Some(vm)) => self.vm_retire(vm),
            _ => {
                for (_, r) in self.regions.iter() {
                    let _ = raw.free(r.base, r.size);
                }
            }
        }
        for (&addr, &size) in self.reserves.iter() {
            let _ = raw.free(addr, size);
        }
        let limit = self.stats.limit;
        self.chunks = ChunkSlab::default();
        self.bins = FreeBins::new();
        self.regions = RegionSet::default();
        self.live = AddrTable::default();
        self.reserves = AddrMap::default();
        self.stats = AllocatorStats {
            limit,
            ..AllocatorStats::default()
        };
        self.retired = true;
        self.peak_chunk_bytes = 0;
        std::mem::take(&mut self.hosted)
    }

    /// Records that host stream `id` (with `events`) tags chunks here.
    #[inline]
    fn register_hosted(&mut self, id: StreamId, events: &Arc<FreeEvents>) {
        if let Err(i) = self.hosted.binary_search_by_key(&id, |e| e.0) {
            self.hosted.insert(i, (id, events.clone()));
        }
    }

    /// The events of the host streams other than `consumer` whose frees are not all known
    /// complete.
    fn hosted_waiting(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        self.hosted
            .iter()
            .filter(|(id, f)| *id != consumer && f.has_incomplete())
            .map(|(_, f)| f.clone())
            .collect()
    }

    /// A chunk being freed that is tagged with a host stream with events takes that stream's
    /// next mark: another stream may take it once the stream's work up to here is done.
    #[inline]
    fn mark_hosted_free(&mut self, id: u32) {
        if self.hosted.is_empty() {
            return;
        }
        let stream = self.chunks.get(id).stream;
        if let Ok(i) = self.hosted.binary_search_by_key(&stream, |e| e.0) {
            let mark = self.hosted[i].1.mark();
            self.chunks.get_mut(id).sync_id = mark;
        }
    }

    /// The best free chunk for `rounded` bytes that stream `consumer` may use (0: no stream);
    /// in virtual-memory mode, one of the pool (range) that serves its size.
    #[inline]
    fn find(&self, rounded: u64, consumer: StreamId, clock: Option<&Clock>) -> Option<u32> {
        let chunks = &self.chunks;
        let hosted = &self.hosted;
        let pool = self.pages.as_deref().map(|p| p.pool_filter(rounded));
        self.bins.best_fit(
            rounded,
            #[inline(always)]
            |id| {
                let c = chunks.get(id);
                reusable(c, consumer, hosted, clock)
                    && pool.is_none_or(|(pages, want)| pages.pool(c.region) == want)
            },
        )
    }

    /// Hands out free chunk `id`, splitting off what is left when ORT's rule says so. The
    /// caller gets the low end, as in ORT.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        id: u32,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        sync_id: u64,
        max_dead: u64,
    ) -> u64 {
        let chunk_size = self.chunks.get(id).size;
        if chunk_size / 2 >= rounded || chunk_size - rounded >= max_dead {
            self.split(id, rounded);
        } else {
            self.bins.remove(id);
        }
        let alloc_id = self.next_alloc_id;
        self.next_alloc_id += 1;
        let c = self.chunks.get_mut(id);
        c.in_use = true;
        c.requested_size = size;
        c.alloc_id = alloc_id;
        if consumer != 0 {
            c.stream = consumer;
            c.sync_id = sync_id;
        }
        let (addr, chunk_size) = (c.addr, c.size);
        self.live.insert(addr, id);
        self.stats.add_in_use(chunk_size, size);
        self.peak_chunk_bytes = self
            .peak_chunk_bytes
            .max(self.stats.in_use - self.stats.reserved_bytes);
        addr
    }

    /// Cuts free chunk `id` at `rounded`: `id` keeps the low end and leaves the bins; the
    /// rest becomes a new free chunk with the same stream and sync id, which takes over
    /// `id`'s bin entry.
    #[inline]
    fn split(&mut self, id: u32, rounded: u64) {
        let c = self.chunks.get(id);
        let rest = Chunk {
            addr: c.addr + rounded,
            size: c.size - rounded,
            requested_size: 0,
            prev: id,
            next: c.next,
            region: c.region,
            in_use: false,
            stream: c.stream,
            sync_id: c.sync_id,
            alloc_id: 0,
        };
        let rest_id = self.chunks.insert(rest);
        if rest.next != NIL {
            self.chunks.get_mut(rest.next).prev = rest_id;
        }
        let c = self.chunks.get_mut(id);
        c.next = rest_id;
        c.size = rounded;
        self.bins.replace(id, rest_id, rest.size, rest.addr);
    }

    /// Marks in-use chunk `id` (already out of the address table) free, merges it with free
    /// neighbours of the same stream and leaves the result in its bin.
    #[inline]
    fn release_chunk(&mut self, id: u32) {
        let c = self.chunks.get_mut(id);
        c.in_use = false;
        let (addr, size, requested, prev, next) =
            (c.addr, c.size, c.requested_size, c.prev, c.next);
        c.requested_size = 0;
        self.stats.remove_in_use(size, requested);
        // Absorb the free chunk above, taking over its bin entry.
        let binned = next != NIL && self.mergeable(id, next);
        if binned {
            let merged = size + self.chunks.get(next).size;
            self.bins.replace(next, id, merged, addr);
            self.merge(id, next);
        }
        if prev != NIL && self.mergeable(prev, id) {
            if binned {
                self.bins.remove(id);
            }
            self.merge(prev, id);
            let p = self.chunks.get(prev);
            self.bins.rekey(prev, p.size, p.addr);
        } else if !binned {
            let c = self.chunks.get(id);
            self.bins.insert(id, c.size, c.addr);
        }
    }

    /// Whether adjacent chunks `a` (lower) and `b` are both free and of one stream (in
    /// virtual-memory mode, or one of them of no stream: see `absorb_unassigned`).
    #[inline]
    fn mergeable(&self, a: u32, b: u32) -> bool {
        let (a, b) = (self.chunks.get(a), self.chunks.get(b));
        !a.in_use
            && !b.in_use
            && (a.stream == b.stream
                || self.absorb_unassigned
                    && (a.stream == 0 || b.stream == 0)
                    && a.stream != vm::UNMAPPED
                    && b.stream != vm::UNMAPPED)
    }

    /// Absorbs chunk `b` into the chunk `a` just below it. `b` must not be in a bin; `a`'s
    /// bin entry, if any, is left stale for the caller to re-key.
    #[inline]
    fn merge(&mut self, a: u32, b: u32) {
        let bc = *self.chunks.get(b);
        let ac = self.chunks.get_mut(a);
        ac.size += bc.size;
        ac.next = bc.next;
        ac.sync_id = ac.sync_id.max(bc.sync_id);
        if ac.stream == 0 {
            // Free memory of no stream joining a stream's (virtual-memory mode) is that
            // stream's now: a stricter rule for it, never a looser one.
            ac.stream = bc.stream;
        }
        if bc.next != NIL {
            self.chunks.get_mut(bc.next).prev = a;
        }
        self.chunks.remove(b);
    }

    /// Runs `op`; if it runs out of memory, releases wholly free regions (or pages) and, if
    /// that freed any, runs it once more (DESIGN decision 7).
    fn with_release_retry<T, R: RawAllocator>(
        &mut self,
        raw: &R,
        vm: Option<&dyn VirtualMemory>,
        config: &ArenaConfig,
        mut op: impl FnMut(&mut State) -> Result<T>,
    ) -> Result<T> {
        match op(self) {
            Err(e @ ArenaError::OutOfMemory { .. }) => {
                if self.release_idle_regions(raw, vm).0 == 0 {
                    return Err(e);
                }
                self.reset_growth(config);
                op(self)
            }
            other => other,
        }
    }

    /// Grows the arena by one region that can hold `rounded` bytes (ORT's `Extend`). Changes
    /// nothing on failure.
    fn try_extend<R: RawAllocator>(
        &mut self,
        raw: &R,
        config: &ArenaConfig,
        rounded: u64,
        requested: u64,
    ) -> Result<()> {
        let budget = config.max_mem.saturating_sub(self.stats.total_allocated);
        let available = budget & !(MIN_ALLOCATION_SIZE - 1);
        if rounded > available {
            return Err(ArenaError::oom(
                requested,
                format!(
                    "available memory of {available} bytes is smaller than the {rounded} bytes needed \
                     (arena.max_mem {}, {} bytes held)",
                    config.max_mem, self.stats.total_allocated
                ),
            ));
        }
        let (mut size, growth) = match config.extend_strategy {
            ExtendStrategy::SameAsRequested => (rounded, self.growth),
            ExtendStrategy::NextPowerOfTwo => {
                let mut cur = self.growth;
                let mut increased = false;
                while rounded > cur {
                    cur = cur.checked_mul(2).unwrap_or(rounded);
                    increased = true;
                }
                let size = cur.min(available);
                // The next region doubles, up to the cap; one that had to grow past the cap
                // for this request does not double again.
                let cap = config.max_power_of_two_extend_bytes;
                if !increased {
                    cur = if cur < cap / 2 { cur * 2 } else { cap };
                }
                (size, cur)
            }
        };
        let base = loop {
            match raw.alloc(size) {
                Ok(base) => break base,
                Err(ArenaError::OutOfMemory { reason, .. }) => {
                    let smaller = ((size as f32) * BACKOFF_FACTOR) as u64;
                    let smaller = round_up_256(smaller).unwrap_or(u64::MAX);
                    if smaller < rounded || smaller < BACKOFF_MIN_BYTES {
                        return Err(ArenaError::oom(
                            requested,
                            format!("the raw allocator refused a region for {rounded} bytes, even after backing off to {size}: {reason}"),
                        ));
                    }
                    size = smaller;
                }
                Err(e) => return Err(e),
            }
        };
        self.growth = growth;
        self.add_region(base, size);
        Ok(())
    }

    fn add_region(&mut self, base: u64, size: u64) {
        self.insert_region(base, size);
        self.stats.total_allocated += size;
        self.stats.num_arena_extensions += 1;
    }

    /// A region `[base, base + size)` tiled by one free chunk; returns its slot. Counts
    /// nothing: a raw region counts as held, a reserved range does not.
    fn insert_region(&mut self, base: u64, size: u64) -> u32 {
        let region = Region {
            id: self.next_region_id,
            base,
            size,
            first_chunk: NIL,
        };
        let slot = self.regions.insert(region);
        self.next_region_id += 1;
        let chunk = Chunk {
            addr: base,
            size,
            requested_size: 0,
            prev: NIL,
            next: NIL,
            region: slot,
            in_use: false,
            stream: 0,
            sync_id: 0,
            alloc_id: 0,
        };
        let id = self.chunks.insert(chunk);
        self.regions.get_mut(slot).first_chunk = id;
        self.bins.insert(id, size, base);
        slot
    }

    /// Returns every region with no chunk in use to the raw allocator (in virtual-memory
    /// mode: unmaps every wholly free page and gives back the ranges with nothing in use).
    /// Returns how many were released (runs of pages unmapped) and the first error (its
    /// region or pages are kept intact).
    fn release_idle_regions<R: RawAllocator>(
        &mut self,
        raw: &R,
        vm: Option<&dyn VirtualMemory>,
    ) -> (usize, Option<ArenaError>) {
        if let (true, Some(vm)) = (self.pages.is_some(), vm) {
            return self.vm_release_all_free(vm);
        }
        let mut released = 0;
        let mut first_err = None;
        for slot in self.idle_regions() {
            let r = self.regions.get(slot);
            let (base, size, first) = (r.base, r.size, r.first_chunk);
            if let Err(e) = raw.free(base, size) {
                first_err.get_or_insert(e);
                continue;
            }
            let mut id = first;
            while id != NIL {
                let next = self.chunks.get(id).next;
                self.bins.remove(id);
                self.chunks.remove(id);
                id = next;
            }
            self.regions.remove(slot);
            self.stats.total_allocated -= size;
            self.stats.num_arena_extensions -= 1;
            self.stats.num_arena_shrinkages += 1;
            released += 1;
        }
        (released, first_err)
    }

    /// Slots of regions with no chunk in use. Walks every chunk: only shrinking needs it.
    fn idle_regions(&self) -> Vec<u32> {
        self.regions
            .iter()
            .filter(|(_, r)| {
                let mut id = r.first_chunk;
                while id != NIL {
                    let c = self.chunks.get(id);
                    if c.in_use {
                        return false;
                    }
                    id = c.next;
                }
                true
            })
            .map(|(slot, _)| slot)
            .collect()
    }

    /// After a shrink the next region is `initial_growth_chunk_size_bytes` again (ORT C).
    fn reset_growth(&mut self, config: &ArenaConfig) {
        let g = config.initial_growth_chunk_size_bytes;
        self.growth = round_up_256(g).unwrap_or(g);
    }

    fn try_reserve<R: RawAllocator>(
        &mut self,
        raw: &R,
        config: &ArenaConfig,
        size: u64,
    ) -> Result<u64> {
        let budget = config.max_mem.saturating_sub(self.stats.total_allocated);
        if size > budget {
            return Err(ArenaError::oom(
                size,
                format!(
                    "a reserve of {size} bytes exceeds the {budget} bytes left under arena.max_mem {}",
                    config.max_mem
                ),
            ));
        }
        raw.alloc(size)
    }

    fn region_firsts(&self) -> Vec<u32> {
        self.regions.iter().map(|(_, r)| r.first_chunk).collect()
    }

    /// Detaches every chunk from `stream` and merges the free runs that now share a stream.
    /// Returns the stream's events if it was a host stream with events, for the caller to drop
    /// once the lock is released.
    #[must_use]
    fn reset_stream(&mut self, stream: StreamId) -> Option<Arc<FreeEvents>> {
        let hosted = match self.hosted.binary_search_by_key(&stream, |e| e.0) {
            Ok(i) => Some(self.hosted.remove(i).1),
            Err(_) => None,
        };
        self.untag(stream);
        hosted
    }

    fn untag(&mut self, stream: StreamId) {
        let firsts = self.region_firsts();
        let mut touched = false;
        for &first in &firsts {
            let mut id = first;
            while id != NIL {
                let c = self.chunks.get_mut(id);
                if c.stream == stream {
                    c.stream = 0;
                    touched = true;
                }
                id = c.next;
            }
        }
        if !touched {
            return;
        }
        for &first in &firsts {
            let mut id = first;
            while id != NIL {
                let next = self.chunks.get(id).next;
                if next != NIL && self.mergeable(id, next) {
                    // Both are free, so both are in bins; the merged chunk goes back in.
                    self.bins.remove(id);
                    self.bins.remove(next);
                    self.merge(id, next);
                    let c = self.chunks.get(id);
                    self.bins.insert(id, c.size, c.addr);
                } else {
                    id = next;
                }
            }
        }
    }

    /// The in-use chunk containing `addr`, if any.
    fn chunk_containing(&self, addr: u64) -> Option<&Chunk> {
        let mut id = self.regions.get(self.regions.find(addr)?).first_chunk;
        while id != NIL {
            let c = self.chunks.get(id);
            if addr < c.addr + c.size {
                return Some(c);
            }
            id = c.next;
        }
        None
    }

    /// Whether `[addr, addr + len)` lies inside one live allocation: `Some(true)` a reserve,
    /// `Some(false)` a chunk, `None` neither.
    fn contains_range(&self, addr: u64, len: u64) -> Option<bool> {
        if self
            .reserves
            .iter()
            .any(|(&base, &size)| range_inside(addr, len, base, size))
        {
            return Some(true);
        }
        self.chunk_containing(addr)
            .is_some_and(|c| c.in_use && range_inside(addr, len, c.addr, c.requested_size))
            .then_some(false)
    }

    /// Why `addr` is not a live allocation, for the error message.
    fn describe_unknown(&self, addr: u64) -> String {
        match self.chunk_containing(addr) {
            Some(c) if c.addr == addr => "already freed".to_string(),
            Some(c) if c.in_use => format!("points inside the allocation at {:#x}", c.addr),
            Some(_) => "points inside free memory of this arena".to_string(),
            None => "was not allocated by this allocator".to_string(),
        }
    }

    fn live_chunk(&self, addr: u64) -> Result<&Chunk> {
        match self.live.get(addr) {
            Some(id) => Ok(self.chunks.get(id)),
            None => {
                self.check_live()?;
                Err(ArenaError::unknown_pointer(
                    addr,
                    self.describe_unknown(addr),
                ))
            }
        }
    }

    fn log(&self) -> MemoryLog {
        let regions: Vec<RegionLog> = match &self.pages {
            Some(_) => self.vm_log_regions(),
            None => self.region_logs(),
        };
        self.log_with(regions)
    }

    fn region_logs(&self) -> Vec<RegionLog> {
        self.regions
            .iter()
            .map(|(_, r)| {
                let mut chunks = Vec::new();
                let mut id = r.first_chunk;
                while id != NIL {
                    let c = self.chunks.get(id);
                    chunks.push(ChunkLog {
                        addr: c.addr,
                        size: c.size,
                        requested_size: c.requested_size,
                        in_use: c.in_use,
                        stream: (c.stream != 0).then_some(c.stream),
                        sync_id: c.sync_id,
                        alloc_id: c.in_use.then_some(c.alloc_id),
                    });
                    id = c.next;
                }
                RegionLog {
                    id: r.id,
                    base: r.base,
                    size: r.size,
                    chunks,
                }
            })
            .collect()
    }

    fn log_with(&self, regions: Vec<RegionLog>) -> MemoryLog {
        let mut bins: Vec<BinLog> = (0..NUM_BINS)
            .map(|b| BinLog {
                bin_size: bin_size(b),
                chunks: 0,
                in_use_chunks: 0,
                bytes: 0,
                in_use_bytes: 0,
                requested_bytes: 0,
            })
            .collect();
        for c in regions.iter().flat_map(|r| &r.chunks) {
            let b = &mut bins[bin_for_size(c.size)];
            b.chunks += 1;
            b.bytes += c.size;
            if c.in_use {
                b.in_use_chunks += 1;
                b.in_use_bytes += c.size;
                b.requested_bytes += c.requested_size;
            }
        }
        bins.retain(|b| b.chunks > 0);
        let mut reserves: Vec<ReserveLog> = self
            .reserves
            .iter()
            .map(|(&addr, &size)| ReserveLog { addr, size })
            .collect();
        reserves.sort_by_key(|r| r.addr);
        MemoryLog {
            regions,
            reserves,
            bins,
            stats: self.stats,
        }
    }

    fn check<R: RawAllocator>(
        &self,
        raw: &R,
        vm: Option<&dyn VirtualMemory>,
    ) -> std::result::Result<(), String> {
        self.bins.check()?;
        let (mut in_use, mut requested, mut held, mut free_chunks, mut live_chunks) =
            (0, 0, 0, 0, 0);
        for (slot, r) in self.regions.iter() {
            let mut expect_addr = r.base;
            let mut prev = NIL;
            let mut id = r.first_chunk;
            while id != NIL {
                let c = self.chunks.get(id);
                if c.addr != expect_addr
                    || c.prev != prev
                    || c.region != slot
                    || c.size == 0
                    || !c.size.is_multiple_of(256)
                {
                    return Err(format!(
                        "region {} is not tiled correctly at chunk {id}: {c:?}",
                        r.id
                    ));
                }
                if c.in_use {
                    if self.bins.contains(id) || self.live.get(c.addr) != Some(id) {
                        return Err(format!(
                            "in-use chunk {id} is in a bin or missing from the address table"
                        ));
                    }
                    if c.requested_size == 0 || c.requested_size > c.size {
                        return Err(format!(
                            "chunk {id} has requested size {}",
                            c.requested_size
                        ));
                    }
                    live_chunks += 1;
                    in_use += c.size;
                    requested += c.requested_size;
                } else {
                    // Unmapped free memory (virtual-memory mode) has bins of its own.
                    let unmapped = c.stream == vm::UNMAPPED;
                    let binned = if unmapped {
                        self.vm_holds_unmapped(id)
                    } else {
                        self.bins.contains(id)
                    };
                    if !binned || self.live.get(c.addr).is_some() {
                        return Err(format!(
                            "free chunk {id} is not in a bin, or is in the address table"
                        ));
                    }
                    if c.next != NIL && self.mergeable(id, c.next) {
                        return Err(format!(
                            "free chunks {id} and {} of one stream are not merged",
                            c.next
                        ));
                    }
                    let hosted = self.hosted.binary_search_by_key(&c.stream, |e| e.0).is_ok();
                    if hosted && c.sync_id == 0 {
                        return Err(format!(
                            "free chunk {id} of host stream {} carries no mark of its free",
                            c.stream
                        ));
                    }
                    free_chunks += u64::from(!unmapped);
                }
                expect_addr = c.addr + c.size;
                prev = id;
                id = c.next;
            }
            if expect_addr != r.base + r.size {
                return Err(format!("region {} chunks end at {expect_addr:#x}", r.id));
            }
            held += r.size;
        }
        let mut extents = self.regions.len() as u64;
        if self.pages.is_some() {
            (held, extents) = self.vm_check(vm)?;
        }
        let reserved: u64 = self.reserves.values().sum();
        let s = &self.stats;
        let checks = [
            (
                "in-use chunks in the address table",
                self.live.len() as u64,
                live_chunks,
            ),
            ("free chunks in bins", self.bins.len() as u64, free_chunks),
            ("InUse", s.in_use, in_use + reserved),
            ("RequestedInUse", s.requested_in_use, requested + reserved),
            ("TotalAllocated", s.total_allocated, held + reserved),
            ("ReservedBytes", s.reserved_bytes, reserved),
            ("NumArenaExtensions", s.num_arena_extensions, extents),
            (
                "raw bytes outstanding",
                raw.raw_stats().raw_bytes_outstanding,
                held + reserved,
            ),
        ];
        for (what, got, want) in checks {
            if got != want {
                return Err(format!("{what} is {got}, the chunks add up to {want}"));
            }
        }
        if s.max_in_use < s.in_use {
            return Err("MaxInUse is below InUse".into());
        }
        Ok(())
    }
}

impl<R: RawAllocator> Drop for Arena<R> {
    fn drop(&mut self) {
        // A stream being released on another thread may still hold the state for a moment
        // (to reset its chunks); retiring under the lock leaves it nothing to touch.
        let mut st = self.state.lock();
        if !st.retired {
            let hosted = st.retire(&self.raw, self.vm.as_deref());
            drop(st);
            drop(hosted);
        }
    }
}

impl<R: RawAllocator> Allocator for Arena<R> {
    #[inline]
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, None)
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        if let Some(id) = st.live.remove(addr) {
            st.mark_hosted_free(id);
            st.release_chunk(id);
            if let Some(vm) = &self.vm {
                st.vm_after_free(&**vm);
            }
            return Ok(());
        }
        self.free_other(&mut st, addr)
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        let mut st = self.state.lock();
        st.check_live()?;
        let addr = st.with_release_retry(&self.raw, self.vm.as_deref(), &self.config, |st| {
            st.try_reserve(&self.raw, &self.config, size)
        })?;
        st.reserves.insert(addr, size);
        st.stats.add_in_use(size, size);
        st.stats.num_reserves += 1;
        st.stats.reserved_bytes += size;
        st.stats.total_allocated += size;
        Ok(Some(addr))
    }

    fn is_stream_aware(&self) -> bool {
        self.stream_aware
    }

    fn alloc_on_stream(&self, size: u64, stream: &Stream) -> Result<Option<u64>> {
        if !self.stream_aware {
            return Err(ArenaError::invalid_argument(format!(
                "the arena for {} is not stream-aware",
                self.raw.info()
            )));
        }
        self.allocate(size, Some(stream))
    }

    fn reset_chunks_using_stream(&self, stream: &Stream) -> Result<()> {
        let hosted = {
            let mut st = self.state.lock();
            st.check_live()?;
            st.reset_stream(stream.id())
        };
        drop(hosted);
        Ok(())
    }

    fn retire(&self) {
        let mut st = self.state.lock();
        if !st.retired {
            let hosted = st.retire(&self.raw, self.vm.as_deref());
            drop(st);
            drop(hosted);
        }
    }

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
        let (_, err) = st.release_idle_regions(&self.raw, self.vm.as_deref());
        st.reset_growth(&self.config);
        st.peak_chunk_bytes = st.stats.in_use - st.stats.reserved_bytes;
        err.map_or(Ok(()), Err)
    }

    fn memory_log(&self) -> MemoryLog {
        self.state.lock().log()
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        let st = self.state.lock();
        if let Some(&size) = st.reserves.get(&addr) {
            return Ok(size);
        }
        st.live_chunk(addr).map(|c| c.size)
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        let st = self.state.lock();
        if let Some(&size) = st.reserves.get(&addr) {
            return Ok(size);
        }
        st.live_chunk(addr).map(|c| c.requested_size)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.in_range(addr, data.len() as u64, |m| match m {
            Memory::Raw(raw) => raw.write(addr, data),
            Memory::Vm(vm) => vm.write(addr, data),
        })
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        self.in_range(addr, len, |m| match m {
            Memory::Raw(raw) => raw.read(addr, out),
            Memory::Vm(vm) => vm.read(addr, out),
        })
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        self.in_range(addr, len, |m| match m {
            Memory::Raw(raw) => raw.fill(addr, byte, len),
            Memory::Vm(vm) => vm.fill(addr, byte, len),
        })
    }
}
