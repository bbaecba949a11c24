//! The BFC arena: best fit with coalescing over regions obtained from a [`RawAllocator`],
//! with ONNX Runtime's semantics (see `shared/reference/ort-arena-behaviour.md`) and the
//! DESIGN's decisions on top. This file is policy; the structures live in `bins`,
//! `free_list`, `chunks` and `region`.
//!
//! Threads (issue 15): an arena is a set of sub-arenas, one per thread alive at once
//! (`sub_arenas.rs`), each a whole BFC arena (`State` below) behind its own lock; a thread
//! allocates from its own and frees to whichever owns the address. The raw allocator is
//! called with no lock held (growth reserves its budget first, idle regions are taken out
//! before they go back). `MaxInUse` stays exact across sub-arenas by escrow
//! (`in_use_quota.rs`). The state sits behind an `Arc` so that streams can tell the arena,
//! through a weak reference, when they are released (it then resets their chunks in every
//! sub-arena; see `stream.rs`).
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
//! freeing to mapped memory are the region mode's paths, unchanged. With threads, this mode keeps
//! one sub-arena that every thread shares (`Arena::me`): its page tables, budget and
//! unmapping policy stay one arena's, so stats, shrink and decision 7 see all of its memory;
//! pages are mapped under that sub-arena's lock and the global one, and the shared budget
//! follows what the sub-arena holds.

mod vm;

use super::hosted_streams::{Carried, HostedStreams};
use crate::addr_map::{AddrMap, AddrTable};
use crate::allocator::{out_of_range, range_inside, Allocator};
use crate::bins::{bin_for_size, bin_size, round_up_256, MIN_ALLOCATION_SIZE, NUM_BINS};
use crate::chunks::{Chunk, ChunkSlab};
use crate::config::{ArenaConfig, ExtendStrategy};
use crate::error::{ArenaError, Result};
use crate::free_list::{FreeBins, NIL};
use crate::in_use_quota::{self, Admit, Metered};
use crate::memory_info::MemoryInfo;
use crate::memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
use crate::raw::{RawAllocator, VirtualMemory};
use crate::region::{Region, RegionSet};
use crate::stats::AllocatorStats;
use crate::stream::{Clock, Stream, StreamId};
use crate::stream_events::FreeEvents;
use crate::sub_arenas::{Frozen, Global, SubArenas};
use parking_lot::MutexGuard;
use std::sync::Arc;

/// How far an allocation has gone to get other host streams' freed chunks (issue 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    Nothing,
    /// Their frees were covered by events and the events queried.
    Polled,
    /// The host blocked until those events completed (on the way to out of memory).
    Finished,
}

/// What an allocation that found no free chunk in its sub-arena does next.
enum Miss {
    /// Poll (or finish) these streams' events, with no lock held, and search again.
    Wait(Vec<Arc<FreeEvents>>, Waited),
    /// Grow the sub-arena.
    Grow,
}

/// One try at handing out a chunk of one sub-arena.
enum Attempt {
    Taken(u64),
    /// No chunk there fits (or may be taken by this stream).
    NoFit,
    /// The quota needs the global lock, now held: try again.
    Again,
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

/// The most regions an allocation moves from other sub-arenas before it grows its own.
const MAX_ADOPTIONS: u32 = 8;

/// The most regions of one idle sub-arena a miss looks at for one to move.
const ADOPTION_CANDIDATES: usize = 64;

/// How many 256-byte granules below an address a copy looks up in the live map for the chunk
/// holding it (16 KiB) before walking the region's chunks, which costs O(chunks before it).
const HOLDING_PROBES: u32 = 64;

/// A BFC arena over the raw allocator `R`. Thread-safe; threads allocate from sub-arenas of
/// their own (see the module docs).
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
    subs: Arc<SubArenas>,
}

/// One sub-arena: a whole BFC arena's state, behind a lock of its own (`sub_arenas.rs`).
#[derive(Debug)]
pub(crate) struct State {
    chunks: ChunkSlab,
    /// Exactly the free chunks, each in the bin of its size.
    bins: FreeBins,
    regions: RegionSet,
    /// Exactly the in-use chunks, by start address.
    live: AddrTable,
    /// Live reserves: address → size (not rounded).
    reserves: AddrMap<u64>,
    /// This sub-arena's part of the stats (`MaxInUse` here is its own peak; the arena's is
    /// the ledger's).
    stats: AllocatorStats,
    /// Size of the next power-of-two region (ORT's `curr_region_allocation_bytes_`).
    growth: u64,
    /// Ordinal of the next allocation; the sub-arena's index sits in the top bits, so ordinals
    /// are unique across sub-arenas.
    next_alloc_id: u64,
    /// Set by [`Allocator::retire`]: every region and reserve went back to the raw allocator
    /// and every call fails with `ERR_ARENA_RELEASED`. Checked only on the paths a retired
    /// arena reaches anyway (no free chunk, no live chunk), so the common path pays nothing.
    retired: bool,
    /// Host-owned streams with events that chunks are tagged with: one entry per such stream
    /// that allocated here and has not been reset or released since. A free chunk tagged with
    /// one carries, as its sync id, the mark its last free took on that stream.
    hosted: HostedStreams,
    /// Bases of regions this sub-arena grew that another one holds now (issue 25): taken back,
    /// when wholly free there, before this one grows. Entries that no longer hold (the region
    /// went back to the raw allocator, or came home) are dropped when next looked at.
    lent: Vec<u64>,
    /// Virtual-memory mode: the mapped pages of the ranges (the regions) and the policy.
    pages: Option<Box<vm::Paged>>,
    /// High-water mark of chunk bytes in use (reserves not counted) since the last shrink:
    /// virtual-memory mode maps past it by at most `arena.vm_peak_headroom_percent`.
    peak_chunk_bytes: u64,
    /// Virtual-memory mode: bytes of in-use chunks past their rounded sizes (chunks handed
    /// out whole rather than cut; see [`State::splits`]).
    dead_bytes: u64,
    /// Virtual-memory mode: a free chunk of no stream merges with a free neighbour of a
    /// stream, which then covers both. Otherwise the no-stream rest of every chunk a stream
    /// cut from fresh memory stays apart from it when it is freed, and the pages both touch
    /// can be neither reused whole nor unmapped. (The region mode keeps ORT's rule: only
    /// chunks of one stream merge.)
    absorb_unassigned: bool,
    /// Virtual-memory mode: the id of the next range reserved (only one sub-arena is used
    /// in that mode, so ids stay unique).
    next_vm_region_id: u64,
    /// How much `stats.in_use` may reach before the global ledger is asked (`in_use_quota.rs`).
    quota: u64,
    /// This sub-arena's index in its arena.
    index: u32,
    /// The stream that last took a chunk here, known to be registered to tell the arena when
    /// it goes (so the common path skips the stream's lock).
    registered: StreamId,
}

/// A wholly free region taken out of a sub-arena while its memory goes back to the raw
/// allocator with no lock held, with what it takes to put it back if that fails.
#[derive(Debug)]
pub(crate) struct Detached {
    region: Region,
    /// Its chunks, lowest address first.
    chunks: Vec<Chunk>,
}

impl Detached {
    pub(crate) fn base(&self) -> u64 {
        self.region.base
    }

    pub(crate) fn size(&self) -> u64 {
        self.region.size
    }
}

impl<R: RawAllocator> Arena<R> {
    /// An arena over `raw` with `config`. Takes no memory until the first allocation.
    pub fn new(raw: R, config: ArenaConfig) -> Result<Self> {
        config.validate()?;
        Ok(Arena {
            raw,
            vm: None,
            split_waste: config.max_dead_bytes_per_chunk,
            subs: Arc::new(SubArenas::new(&config)),
            config,
            stream_aware: true,
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
            // Every thread shares sub-arena 0 in this mode (see `Arena::me`).
            let mut st = arena.subs.get_or_make(0).lock();
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

    /// How many times the sub-arenas' `InUse` quotas were rebalanced (`in_use_quota.rs`): the
    /// one step of the common path that needs every thread's sub-arena. For benchmarks.
    pub fn quota_rebalances(&self) -> u64 {
        self.subs.global().ledger.rebalances
    }

    /// The calling thread's sub-arena. In virtual-memory mode every thread shares sub-arena 0:
    /// its page tables, budget and unmapping policy are one arena's, as before sub-arenas.
    #[inline(always)]
    fn me(&self) -> usize {
        if self.vm.is_some() {
            0
        } else {
            SubArenas::index()
        }
    }

    /// The size as the arena will hand it out, or why it never can (DESIGN decision 4).
    #[inline]
    fn rounded(&self, size: u64) -> Result<u64> {
        match round_up_256(size) {
            Some(rounded) if rounded <= self.config.max_mem => Ok(rounded),
            rounded => Err(self.never_fits(size, rounded)),
        }
    }

    #[cold]
    #[inline(never)]
    fn never_fits(&self, size: u64, rounded: Option<u64>) -> ArenaError {
        match rounded {
            None => ArenaError::oom(
                size,
                "the size rounded up to a multiple of 256 does not fit in 64 bits",
            ),
            Some(rounded) => ArenaError::oom(
                size,
                format!(
                    "{rounded} bytes (rounded) exceed arena.max_mem of {}",
                    self.config.max_mem
                ),
            ),
        }
    }

    #[inline]
    fn allocate(&self, size: u64, stream: Option<&Stream>) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        let rounded = self.rounded(size)?;
        let me = self.me();
        match self.take_fast(me, rounded, size, stream) {
            Some(addr) => Ok(Some(addr)),
            None => self.allocate_slow(me, rounded, size, stream),
        }
    }

    /// The common path: this thread's sub-arena has a chunk the stream may take, and its quota
    /// has room for it. `None` otherwise, with nothing changed.
    #[inline(always)]
    fn take_fast(
        &self,
        me: usize,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
    ) -> Option<u64> {
        let mut st = self.subs.get(me)?.lock();
        let consumer = stream.map_or(0, Stream::id);
        let id = st.find(rounded, consumer, stream)?;
        let chunk_size = st.chunks.get(id).size;
        let split = st.splits(chunk_size, rounded, self.split_waste);
        let charge = if split { rounded } else { chunk_size };
        if !in_use_quota::admits(&*st, charge) {
            return None;
        }
        let sync_id = stream.map_or(0, Stream::sync_id);
        let addr = st.take(id, rounded, size, consumer, sync_id, split);
        if let Some(stream) = stream {
            self.tag_with(&mut st, stream);
        }
        Some(addr)
    }

    /// Everything else: the quota needs a rebalance, the sub-arena needs growing or making,
    /// other streams' events need polling, memory must come from elsewhere.
    #[cold]
    #[inline(never)]
    fn allocate_slow(
        &self,
        me: usize,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
    ) -> Result<Option<u64>> {
        if let Some(vm) = &self.vm {
            return self.allocate_vm(&**vm, rounded, size, stream);
        }
        let consumer = stream.map_or(0, Stream::id);
        let sub = self.subs.get_or_make(me);
        let mut waited = Waited::Nothing;
        let mut global = None;
        let mut adopted = 0;
        loop {
            match self.try_take(me, rounded, size, consumer, stream, &mut global) {
                Attempt::Taken(addr) => return Ok(Some(addr)),
                Attempt::Again => continue,
                Attempt::NoFit => {}
            }
            global = None;
            let miss = self.on_miss(&mut sub.lock(), consumer, waited)?;
            match miss {
                Miss::Wait(others, next) => {
                    // Driver calls (event record, query, synchronize) with no lock held.
                    for f in &others {
                        if next == Waited::Finished {
                            f.finish();
                        } else {
                            f.advance();
                        }
                    }
                    waited = next;
                }
                Miss::Grow => {
                    // A wholly free region of another thread's sub-arena before new memory
                    // (issue 25): a pool's threads taking turns would otherwise hold the live
                    // set once per thread. The region moves, so what follows is this thread's
                    // common path again. At most a few moves per allocation: two threads
                    // missing at once, each idle to the other, could pass a region back and
                    // forth.
                    if adopted < MAX_ADOPTIONS && self.adopt_regions(me, rounded, consumer, stream)
                    {
                        adopted += 1;
                        continue;
                    }
                    let reached =
                        self.grow_or_reach(me, rounded, size, consumer, stream, &mut waited)?;
                    if let Some(addr) = reached {
                        return Ok(Some(addr));
                    }
                }
            }
        }
    }

    /// The slow path in virtual-memory mode, on sub-arena 0 (which every thread shares there)
    /// as the arena was before sub-arenas: pages are mapped under its lock (and the global
    /// lock, so the quota is charged at once), the budget follows what the sub-arena holds.
    #[cold]
    #[inline(never)]
    fn allocate_vm(
        &self,
        vm: &dyn VirtualMemory,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
    ) -> Result<Option<u64>> {
        let consumer = stream.map_or(0, Stream::id);
        let sub = self.subs.get_or_make(0);
        let mut waited = Waited::Nothing;
        loop {
            let mut global = Some(self.subs.global());
            let mut st = sub.lock();
            let id = match st.find(rounded, consumer, stream) {
                Some(id) => id,
                None => {
                    let others = if waited == Waited::Nothing {
                        st.hosted_waiting(consumer)
                    } else {
                        Vec::new()
                    };
                    if !others.is_empty() {
                        drop(st);
                        drop(global);
                        // Driver calls (event record, query) with no lock held.
                        for f in &others {
                            f.advance();
                        }
                        waited = Waited::Polled;
                        continue;
                    }
                    st.check_live()?;
                    let before = st.held();
                    let clock = stream.map(Stream::clock);
                    let grown = st.vm_grow_and_find(
                        vm,
                        &self.config,
                        rounded,
                        size,
                        consumer,
                        clock.as_deref(),
                    );
                    drop(clock);
                    self.subs.follow_budget(before, st.held());
                    match grown {
                        Ok(id) => id,
                        Err(e @ ArenaError::OutOfMemory { .. }) if waited != Waited::Finished => {
                            let others = st.hosted_waiting(consumer);
                            if others.is_empty() {
                                return Err(e);
                            }
                            drop(st);
                            drop(global);
                            for f in &others {
                                f.finish();
                            }
                            waited = Waited::Finished;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let chunk_size = st.chunks.get(id).size;
            let split = st.splits(chunk_size, rounded, self.split_waste);
            let charge = if split { rounded } else { chunk_size };
            let frozen = match self.subs.admit(&mut global, 0, &mut st, charge) {
                Admit::Fits(frozen) => frozen,
                // Not with the global lock held; search again if it were.
                Admit::Retry => continue,
            };
            let sync_id = stream.map_or(0, Stream::sync_id);
            let addr = st.take(id, rounded, size, consumer, sync_id, split);
            drop(frozen);
            drop(global);
            if let Some(stream) = stream {
                self.tag_with(&mut st, stream);
            }
            return Ok(Some(addr));
        }
    }

    /// A reserve in virtual-memory mode: from the raw allocator under sub-arena 0's lock (and
    /// the global lock), so that mapping pages and reserves share one budget exactly; out of
    /// memory, the wholly free pages are unmapped and it is tried once more (decision 7).
    fn reserve_vm(&self, vm: &dyn VirtualMemory, size: u64) -> Result<Option<u64>> {
        let sub = self.subs.get_or_make(0);
        let mut global = Some(self.subs.global());
        let mut st = sub.lock();
        st.check_live()?;
        let addr = match self.raw_reserve(size) {
            Err(e @ ArenaError::OutOfMemory { .. }) => {
                let before = st.held();
                let (released, _) = st.vm_release_all_free(vm);
                self.subs.follow_budget(before, st.held());
                if released == 0 {
                    return Err(e);
                }
                st.reset_growth(&self.config);
                self.raw_reserve(size)?
            }
            other => other?,
        };
        let frozen = match self.subs.admit(&mut global, 0, &mut st, size) {
            Admit::Fits(frozen) => frozen,
            Admit::Retry => {
                // Not with the global lock held; give the memory back if it were.
                drop(st);
                let _ = self.raw.free(addr, size);
                self.subs.return_budget(size);
                return Err(ArenaError::oom(size, "the arena could not account for it"));
            }
        };
        st.reserves.insert(addr, size);
        st.stats.add_in_use(size, size);
        st.stats.num_reserves += 1;
        st.stats.reserved_bytes += size;
        st.stats.total_allocated += size;
        drop(frozen);
        drop(global);
        self.subs.directory.insert(addr, size, 0);
        Ok(Some(addr))
    }

    /// Hands out a chunk of sub-arena `t` that `consumer` may take, if one fits, charging `t`'s
    /// quota (and rebalancing when it must: then `global` is held, here or on the next try).
    fn try_take<'a>(
        &'a self,
        t: usize,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
        global: &mut Option<MutexGuard<'a, Global>>,
    ) -> Attempt {
        let Some(sub) = self.subs.get(t) else {
            return Attempt::NoFit;
        };
        let mut st = sub.lock();
        let Some(id) = st.find(rounded, consumer, stream) else {
            return Attempt::NoFit;
        };
        let split = st.splits(st.chunks.get(id).size, rounded, self.split_waste);
        let charge = if split {
            rounded
        } else {
            st.chunks.get(id).size
        };
        let mut frozen = None;
        if global.is_some() || !in_use_quota::admits(&*st, charge) {
            match self.subs.admit(global, t, &mut st, charge) {
                Admit::Fits(f) => frozen = Some(f),
                Admit::Retry => {
                    drop(st);
                    *global = Some(self.subs.global());
                    return Attempt::Again;
                }
            }
        }
        let sync_id = stream.map_or(0, Stream::sync_id);
        let addr = st.take(id, rounded, size, consumer, sync_id, split);
        if frozen.is_some() {
            // The charge is applied: the sum a rebalance recorded was reached.
            drop(frozen);
            *global = None;
        }
        if let Some(stream) = stream {
            self.tag_with(&mut st, stream);
        }
        Attempt::Taken(addr)
    }

    /// A chunk of `st` is tagged with `stream` now: the stream must tell the arena when it
    /// goes, and a host stream's frees take its marks.
    #[inline(always)]
    fn tag_with(&self, st: &mut State, stream: &Stream) {
        if st.registered != stream.id() {
            stream.clock().register_user(&self.subs);
            st.registered = stream.id();
        }
        if let Some(events) = stream.free_events() {
            st.hosted.took(stream.id(), events);
        }
    }

    /// No free chunk fits in this thread's sub-arena. First, once, other host streams' frees
    /// may have completed: the caller polls their events. Then the sub-arena grows.
    #[cold]
    #[inline(never)]
    fn on_miss(&self, st: &mut State, consumer: StreamId, waited: Waited) -> Result<Miss> {
        if waited == Waited::Nothing {
            let others = st.hosted_waiting(consumer);
            if !others.is_empty() {
                return Ok(Miss::Wait(others, Waited::Polled));
            }
        }
        st.check_live()?;
        Ok(Miss::Grow)
    }

    /// Grows sub-arena `me`; out of memory, releases the wholly free regions of every
    /// sub-arena and grows once more (decision 7), then takes a chunk `consumer` may use from
    /// another sub-arena, then waits, once, for the other host streams' events before the error
    /// stands. `Ok(None)`: search again.
    #[cold]
    #[inline(never)]
    fn grow_or_reach(
        &self,
        me: usize,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
        waited: &mut Waited,
    ) -> Result<Option<u64>> {
        let mut err = match self.grow(me, rounded, size) {
            Ok(()) => return Ok(None),
            Err(e @ ArenaError::OutOfMemory { .. }) => e,
            Err(e) => return Err(e),
        };
        if self.subs.release_idle(&self.raw).0 > 0 {
            self.subs.get_or_make(me).lock().reset_growth(&self.config);
            match self.grow(me, rounded, size) {
                Ok(()) => return Ok(None),
                Err(e @ ArenaError::OutOfMemory { .. }) => err = e,
                Err(e) => return Err(e),
            }
        }
        if let Some(addr) = self.take_from_others(me, rounded, size, consumer, stream) {
            return Ok(Some(addr));
        }
        if *waited != Waited::Finished {
            let others = self.hosted_waiting_anywhere(consumer);
            if !others.is_empty() {
                for f in &others {
                    f.finish();
                }
                *waited = Waited::Finished;
                return Ok(None);
            }
        }
        Err(err)
    }

    /// Memory of other sub-arenas before new memory (issue 25), under the global lock (so the
    /// stats never see a region in neither sub-arena or in both; the directory names the new
    /// holder before its lock is let go, so a free of a chunk cut from it finds it). First the
    /// regions `me` grew that another sub-arena holds and has wholly free now, whatever that
    /// one is doing: a thread gets its own memory back. Then a wholly free region of at least
    /// `rounded` bytes of a sub-arena with nothing in use: an idle thread's memory serves the
    /// others (a pool's threads taking turns hold the working set once, not once each).
    /// Whether a region moved.
    #[cold]
    #[inline(never)]
    fn adopt_regions(
        &self,
        me: usize,
        rounded: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
    ) -> bool {
        let Some(mine) = self.subs.get(me) else {
            return false;
        };
        let _global = self.subs.global();
        let mut moved = false;
        let lent = std::mem::take(&mut mine.lock().lent);
        let mut still_lent = Vec::new();
        // A bounded look, as for idle sub-arenas below; the rest waits for the next miss.
        let mut lent = lent.into_iter();
        for base in lent.by_ref().take(ADOPTION_CANDIDATES) {
            let holder = match self.subs.directory.owner_and_home(base) {
                Some((holder, home)) if home as usize == me && holder as usize != me => holder,
                // Gone back to the raw allocator, or home again: nothing to take back.
                _ => continue,
            };
            let Some(sub) = self.subs.get(holder as usize) else {
                continue;
            };
            // Bound first: a guard in the scrutinee would live through the arms.
            // The sub-arena's lock before the stream's clock (the lock order).
            let detached = {
                let mut st = sub.lock();
                let clock = stream.map(Stream::clock);
                st.detach_free_region_at(base, rounded, consumer, clock.as_deref())
            };
            match detached {
                Some(taken) => {
                    self.move_region(me, mine, taken);
                    moved = true;
                }
                None => still_lent.push(base),
            }
        }
        // Those not looked at first next time.
        let mut rest: Vec<u64> = lent.collect();
        rest.extend(still_lent);
        mine.lock().lent.extend(rest);
        if moved {
            return true;
        }
        for t in self.subs.used().filter(|&t| t != me) {
            let Some(sub) = self.subs.get(t) else {
                continue;
            };
            let detached = {
                let mut st = sub.lock();
                let clock = stream.map(Stream::clock);
                st.detach_free_region(rounded, consumer, clock.as_deref())
            };
            if let Some(taken) = detached {
                self.move_region(me, mine, taken);
                return true;
            }
        }
        false
    }

    /// Puts a region taken out of another sub-arena into sub-arena `me` (`mine`), and says so
    /// in the directory and, if the region is not `me`'s own, in its home's lent list. The
    /// caller holds the global lock.
    fn move_region(
        &self,
        me: usize,
        mine: &crate::lock::ArenaLock<State>,
        taken: (Detached, Carried),
    ) {
        let (region, hosted) = taken;
        let base = region.base();
        let mut st = mine.lock();
        st.adopt_region(region, hosted);
        let home = self.subs.directory.move_to(base, me as u32);
        drop(st);
        if let Some(home) = home.filter(|&h| h as usize != me) {
            if let Some(h) = self.subs.get(home as usize) {
                let mut h = h.lock();
                if !h.lent.contains(&base) {
                    h.lent.push(base);
                }
            }
        }
    }

    /// A chunk `consumer` may take from a sub-arena other than `me`, if any has one that fits.
    fn take_from_others(
        &self,
        me: usize,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
    ) -> Option<u64> {
        let mut global = None;
        for t in self.subs.used().filter(|&t| t != me) {
            loop {
                match self.try_take(t, rounded, size, consumer, stream, &mut global) {
                    Attempt::Taken(addr) => return Some(addr),
                    Attempt::Again => continue,
                    Attempt::NoFit => break,
                }
            }
            global = None;
        }
        None
    }

    /// The events of host streams other than `consumer`, in any sub-arena, whose frees are not
    /// all known complete (each stream once).
    fn hosted_waiting_anywhere(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        let mut all: Vec<Arc<FreeEvents>> = Vec::new();
        for t in self.subs.used().collect::<Vec<_>>() {
            if let Some(sub) = self.subs.get(t) {
                for f in sub.lock().hosted_waiting(consumer) {
                    if !all.iter().any(|g| Arc::ptr_eq(g, &f)) {
                        all.push(f);
                    }
                }
            }
        }
        all
    }

    /// Grows sub-arena `me` by one region that can hold `rounded` bytes (ORT's `Extend`): the
    /// budget under `arena.max_mem` is reserved first, the raw allocator called with no lock
    /// held, and the region added after. Changes nothing on failure.
    fn grow(&self, me: usize, rounded: u64, requested: u64) -> Result<()> {
        let sub = self.subs.get_or_make(me);
        let (size, growth) = self.subs.reserve_budget(|budget, held| {
            let st = sub.lock();
            st.check_live()?;
            st.plan_extend(&self.config, rounded, requested, budget & !255, held)
        })?;
        let mut reserved = size;
        let got = alloc_region(&self.raw, size, rounded, requested, |less| {
            self.subs.return_budget(less);
            reserved -= less;
        });
        let (base, size) = got.inspect_err(|_| self.subs.return_budget(reserved))?;
        let mut st = sub.lock();
        if let Err(e) = st.check_live() {
            drop(st);
            // Retired meanwhile: nothing is to be kept (nothing to report if this fails).
            let _ = self.raw.free(base, size);
            self.subs.return_budget(size);
            return Err(e);
        }
        st.commit_extend(base, size, growth, self.subs.next_region_id());
        self.subs.directory.insert(base, size, me as u32);
        Ok(())
    }

    /// Obtains a reserve's memory from the raw allocator within the budget, with no lock held.
    fn raw_reserve(&self, size: u64) -> Result<u64> {
        let max_mem = self.config.max_mem;
        self.subs.reserve_budget(|budget, _| {
            if size > budget {
                return Err(ArenaError::oom(
                    size,
                    format!(
                        "a reserve of {size} bytes exceeds the {budget} bytes left under arena.max_mem {max_mem}"
                    ),
                ));
            }
            Ok((size, ()))
        })?;
        self.raw
            .alloc(size)
            .inspect_err(|_| self.subs.return_budget(size))
    }

    /// Frees what is not an in-use chunk of `st`: a reserve, or an unknown address (an error).
    #[cold]
    #[inline(never)]
    fn free_other(&self, st: &mut State, addr: u64) -> Result<()> {
        st.check_live()?;
        if let Some(&size) = st.reserves.get(&addr) {
            // Under the sub-arena's lock, so no second free races it; reserves are rare. Out
            // of the directory first: once freed, the address may come back for another
            // sub-arena's region, which must not find this entry.
            self.subs.directory.remove(addr);
            if let Err(e) = self.raw.free(addr, size) {
                self.subs.directory.insert(addr, size, st.index());
                return Err(e);
            }
            st.reserves.remove(&addr);
            st.stats.remove_in_use(size, size);
            st.stats.reserved_bytes -= size;
            st.stats.total_allocated -= size;
            self.subs.return_budget(size);
            return Ok(());
        }
        Err(ArenaError::unknown_pointer(addr, st.describe_unknown(addr)))
    }

    /// A free that is not of a chunk this thread's sub-arena handed out.
    #[cold]
    #[inline(never)]
    fn free_elsewhere(&self, addr: u64) -> Result<()> {
        self.with_owner(addr, |st| match st.live.remove(addr) {
            Some(id) => {
                st.mark_hosted_free(id);
                st.release_chunk(id);
                Ok(())
            }
            None => self.free_other(st, addr),
        })
    }

    /// Runs `op` on the locked sub-arena whose region or reserve holds `addr`; an address no
    /// sub-arena holds is unknown (`ERR_ARENA_RELEASED` once retired).
    fn with_owner<T>(&self, addr: u64, op: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        // In virtual-memory mode the ranges are not in the directory: they are sub-arena 0's.
        let owner = self.subs.directory.owner(addr);
        let owner = owner.or(self.vm.as_ref().map(|_| 0));
        match owner.and_then(|t| self.subs.get(t as usize)) {
            Some(sub) => op(&mut sub.lock()),
            None => {
                if self.subs.is_retired() {
                    return Err(crate::allocator::retired());
                }
                Err(ArenaError::unknown_pointer(
                    addr,
                    "was not allocated by this allocator",
                ))
            }
        }
    }

    /// Runs `op` on the memory behind `[addr, addr+len)` with the owning sub-arena's lock held
    /// once the range is known to lie inside one live allocation (its requested size), so no
    /// free can race the copy: the raw allocator for a reserve or a region's chunk, the
    /// virtual-memory form for a chunk in virtual-memory mode.
    fn in_range<T>(
        &self,
        addr: u64,
        len: u64,
        op: impl FnOnce(Memory<'_, R>) -> Result<T>,
    ) -> Result<T> {
        self.check_live()?;
        if let Some(vm) = &self.vm {
            // Every chunk and reserve is sub-arena 0's in virtual-memory mode.
            let Some(sub) = self.subs.get(0) else {
                return Err(out_of_range(addr, len, "this allocator"));
            };
            let st = sub.lock();
            st.check_live()?;
            return match st.contains_range(addr, len) {
                Some(false) => op(Memory::Vm(&**vm)),
                Some(true) => op(Memory::Raw(&self.raw)),
                None => Err(out_of_range(addr, len, "this allocator")),
            };
        }
        // The sub-arena whose region or reserve holds `addr`; an empty range may also sit at
        // the very end of an allocation, which the byte before names.
        let mut owners = [self.subs.directory.owner(addr), None];
        if len == 0 && addr > 0 {
            owners[1] = self
                .subs
                .directory
                .owner(addr - 1)
                .filter(|&t| Some(t) != owners[0]);
        }
        for t in owners.into_iter().flatten() {
            let Some(sub) = self.subs.get(t as usize) else {
                continue;
            };
            let st = sub.lock();
            st.check_live()?;
            if st.contains_range(addr, len).is_some() {
                return op(Memory::Raw(&self.raw));
            }
        }
        Err(out_of_range(addr, len, "this allocator"))
    }

    /// The arena as it is when nothing else runs: `ERR_ARENA_RELEASED` once retired.
    fn check_live(&self) -> Result<()> {
        if self.subs.is_retired() {
            return Err(crate::allocator::retired());
        }
        Ok(())
    }

    /// Hands everything back to the raw allocator for good (retire and drop).
    fn retire_all(&self) {
        let mut f = self.subs.freeze();
        if f.global.retired {
            return;
        }
        // Out of the directory before any memory goes back (it may come back to another arena).
        self.subs.directory.clear();
        let mut hosted = Vec::new();
        for (_, st) in &mut f.subs {
            let held = st.held();
            hosted.push(st.retire(&self.raw, self.vm.as_deref()));
            self.subs.return_budget(held);
        }
        self.subs.mark_retired(&mut f.global);
        f.global.ledger.clear();
        drop(f);
        // Outside the locks: the last references hand their events back to the backend.
        drop(hosted);
    }

    /// The arena's stats at the instant `f` holds: each sub-arena's summed, `MaxInUse` the
    /// ledger's.
    fn stats_of(&self, f: &Frozen<'_>) -> AllocatorStats {
        let mut s = AllocatorStats::with_limit(self.config.max_mem);
        for (_, st) in &f.subs {
            let t = &st.stats;
            s.in_use += t.in_use;
            s.requested_in_use += t.requested_in_use;
            s.total_allocated += t.total_allocated;
            s.reserved_bytes += t.reserved_bytes;
            s.num_allocs += t.num_allocs;
            s.num_reserves += t.num_reserves;
            s.num_arena_extensions += t.num_arena_extensions;
            s.num_arena_shrinkages += t.num_arena_shrinkages;
            s.max_alloc_size = s.max_alloc_size.max(t.max_alloc_size);
        }
        s.max_in_use = f.global.ledger.max_in_use;
        s
    }

    /// Walks every chunk and checks the arena's invariants: regions tiled exactly by linked
    /// chunks, free chunks in their bins and in-use ones in the address map, no two adjacent
    /// free chunks of one stream left unmerged, every stat equal to what the chunks and
    /// reserves add up to, and across sub-arenas the quotas, the budget and the directory.
    /// O(chunks); for tests and debugging. Returns the first fault.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.subs.check(&self.raw, self.vm.as_deref())
    }
}

/// Whether free chunk `c` may go to stream `consumer` (0: no stream). ORT's rule: the
/// consumer's own chunk, an unassigned one, or one whose stream the consumer has waited on
/// since the chunk was handed out there; for a host stream with events, one whose free that
/// stream's work is known past.
#[inline(always)]
fn reusable(c: &Chunk, consumer: StreamId, hosted: &HostedStreams, clock: Option<&Clock>) -> bool {
    c.stream == consumer
        || c.stream == 0
        || match hosted.events(c.stream) {
            Some(events) => events.is_complete(c.sync_id),
            None => clock.is_some_and(|cl| c.sync_id < cl.last_wait(c.stream)),
        }
}

/// ORT's back-off: asks `raw` for `size` bytes, then for 90% of that and so on while it stays
/// at least `rounded` and [`BACKOFF_MIN_BYTES`]; `shrunk(by)` hears of each smaller request.
/// Returns the region's base and size.
fn alloc_region<R: RawAllocator>(
    raw: &R,
    mut size: u64,
    rounded: u64,
    requested: u64,
    mut shrunk: impl FnMut(u64),
) -> Result<(u64, u64)> {
    loop {
        match raw.alloc(size) {
            Ok(base) => return Ok((base, size)),
            Err(ArenaError::OutOfMemory { reason, .. }) => {
                let smaller = ((size as f32) * BACKOFF_FACTOR) as u64;
                let smaller = round_up_256(smaller).unwrap_or(u64::MAX);
                if smaller >= size || smaller < rounded || smaller < BACKOFF_MIN_BYTES {
                    return Err(ArenaError::oom(
                        requested,
                        format!("the raw allocator refused a region for {rounded} bytes, even after backing off to {size}: {reason}"),
                    ));
                }
                shrunk(size - smaller);
                size = smaller;
            }
            Err(e) => return Err(e),
        }
    }
}

impl Metered for State {
    #[inline]
    fn in_use(&self) -> u64 {
        self.stats.in_use
    }

    fn peak(&self) -> u64 {
        self.stats.max_in_use
    }

    #[inline]
    fn quota(&self) -> u64 {
        self.quota
    }

    fn set_quota(&mut self, quota: u64) {
        self.quota = quota;
    }
}

impl State {
    /// An empty sub-arena, index `index` of its arena.
    pub(crate) fn new(config: &ArenaConfig, index: u64) -> Self {
        let first = config.max_mem.min(config.initial_chunk_size_bytes);
        State {
            chunks: ChunkSlab::default(),
            bins: FreeBins::new(),
            regions: RegionSet::default(),
            live: AddrTable::default(),
            reserves: AddrMap::default(),
            stats: AllocatorStats::with_limit(config.max_mem),
            growth: round_up_256(first).unwrap_or(first),
            next_alloc_id: 1 + (index << 48),
            retired: false,
            hosted: HostedStreams::default(),
            lent: Vec::new(),
            pages: None,
            peak_chunk_bytes: 0,
            dead_bytes: 0,
            absorb_unassigned: false,
            next_vm_region_id: 0,
            quota: 0,
            index: index as u32,
            registered: 0,
        }
    }

    /// This sub-arena's index in its arena.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// A sub-arena made after its arena was retired is retired from the start.
    pub(crate) fn mark_retired(&mut self) {
        self.retired = true;
    }

    /// Bytes this sub-arena holds from the raw allocator: regions and reserves.
    pub(crate) fn held(&self) -> u64 {
        self.stats.total_allocated
    }

    /// `(base, size)` of every region and reserve: what the directory holds (virtual-memory
    /// mode's ranges are not there: every thread uses sub-arena 0 then).
    pub(crate) fn ranges(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = match self.pages {
            Some(_) => Vec::new(),
            None => self.regions.iter().map(|(_, r)| (r.base, r.size)).collect(),
        };
        v.extend(self.reserves.iter().map(|(&a, &s)| (a, s)));
        v
    }

    /// `ERR_ARENA_RELEASED` once the arena is retired.
    pub(crate) fn check_live(&self) -> Result<()> {
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
    pub(crate) fn retire<R: RawAllocator>(
        &mut self,
        raw: &R,
        vm: Option<&dyn VirtualMemory>,
    ) -> Vec<Arc<FreeEvents>> {
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
        self.lent.clear();
        self.peak_chunk_bytes = 0;
        self.dead_bytes = 0;
        self.quota = 0;
        self.hosted.take_all()
    }

    /// The events of the host streams other than `consumer` whose frees are not all known
    /// complete.
    fn hosted_waiting(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        self.hosted.waiting(consumer)
    }

    /// Whether chunks tagged with host stream `id` are in use here.
    pub(crate) fn holds_stream(&self, id: StreamId) -> bool {
        self.hosted.holds(id)
    }

    /// A chunk being freed that is tagged with a host stream with events takes that stream's
    /// next mark: another stream may take it once the stream's work up to here is done.
    #[inline]
    fn mark_hosted_free(&mut self, id: u32) {
        if self.hosted.is_empty() {
            return;
        }
        let stream = self.chunks.get(id).stream;
        if let Some(mark) = self.hosted.freed(stream) {
            self.chunks.get_mut(id).sync_id = mark;
        }
    }

    /// The best free chunk for `rounded` bytes that `stream` (id `consumer`, 0: no stream) may
    /// use. The stream's clock is locked only if a chunk of another stream is considered.
    #[inline(always)]
    fn find(&self, rounded: u64, consumer: StreamId, stream: Option<&Stream>) -> Option<u32> {
        let chunks = &self.chunks;
        let hosted = &self.hosted;
        let class = self.pages.as_deref().map_or(0, |p| p.class_for(rounded));
        let mut clock = None;
        self.bins.best_fit_class(
            class,
            rounded,
            #[inline(always)]
            |id| {
                let c = chunks.get(id);
                c.stream == consumer || c.stream == 0 || {
                    // ORT's rule: the consumer's own chunk, an unassigned one, or one whose
                    // stream the consumer has waited on since the chunk was handed out
                    // there; for a host stream with events, one whose free that stream's
                    // work is known past.
                    match hosted.events(c.stream) {
                        Some(events) => events.is_complete(c.sync_id),
                        None => stream.is_some_and(|s| {
                            let clock = clock.get_or_insert_with(|| s.clock());
                            c.sync_id < clock.last_wait(c.stream)
                        }),
                    }
                }
            },
        )
    }

    /// Whether a free chunk of `chunk_size` bytes handed out for `rounded` is cut. ORT's rule
    /// ([`splits`]) in the region mode. The virtual-memory mode cuts every chunk to size
    /// (`max_dead` is 256), as bytes past the request would hold pages for nothing, but for
    /// chunks ORT would hand out whole (under twice the request) while the dead bytes of all
    /// live chunks stay within a small budget ([`vm::Paged::dead_bytes_budget`]): each whole
    /// chunk saves a cut now and a merge at its free, and what it may cost is bounded.
    #[inline(always)]
    fn splits(&self, chunk_size: u64, rounded: u64, max_dead: u64) -> bool {
        if !splits(chunk_size, rounded, max_dead) {
            return false;
        }
        let Some(p) = self.pages.as_deref() else {
            return true;
        };
        if chunk_size / 2 >= rounded {
            return true;
        }
        let budget = p.dead_bytes_budget(
            (self.stats.in_use - self.stats.reserved_bytes).saturating_add(chunk_size),
        );
        self.dead_bytes.saturating_add(chunk_size - rounded) > budget
    }

    /// Hands out free chunk `id`, splitting off what is left when ORT's rule says so. The
    /// caller gets the low end, as in ORT.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        id: u32,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        sync_id: u64,
        split: bool,
    ) -> u64 {
        if split {
            self.split(id, rounded);
        } else {
            self.bins.remove(id);
            if self.pages.is_some() {
                self.dead_bytes += self.chunks.get(id).size - rounded;
            }
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
        let (addr, chunk_size, tag) = (c.addr, c.size, c.stream);
        if consumer == 0 && tag != 0 {
            // Taken with no stream, the chunk keeps its host stream's tag (its free takes that
            // stream's mark): it counts as that stream's in use. A chunk taken on a stream is
            // counted by `Arena::tag_with`.
            self.hosted.counts_in_use(tag);
        }
        self.live.insert(addr, id);
        self.stats.add_in_use(chunk_size, size);
        self.peak_chunk_bytes = self
            .peak_chunk_bytes
            .max((self.stats.in_use - self.stats.reserved_bytes).saturating_sub(self.dead_bytes));
        // (The peak the virtual-memory headroom follows counts requests, not dead bytes.)
        addr
    }

    /// Cuts free chunk `id` at `rounded`: `id` keeps the low end and leaves the bins; the
    /// rest becomes a new free chunk with the same stream and sync id, which takes over
    /// `id`'s bin entry.
    #[inline(always)]
    fn split(&mut self, id: u32, rounded: u64) {
        let rest_id = self.cut_links(id, rounded);
        let rest = self.chunks.get(rest_id);
        let (size, addr) = (rest.size, rest.addr);
        self.bins.replace(id, rest_id, size, addr);
    }

    /// Cuts chunk `id` at `at` bytes into two linked chunks, the upper one free with `id`'s
    /// region, stream and sync id; returns its id. Bins are the caller's business.
    #[inline(always)]
    fn cut_links(&mut self, id: u32, at: u64) -> u32 {
        let c = self.chunks.get(id);
        let rest = Chunk {
            addr: c.addr + at,
            size: c.size - at,
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
        let low = self.chunks.get_mut(id);
        low.next = rest_id;
        low.size = at;
        rest_id
    }

    /// Marks in-use chunk `id` (already out of the address table) free, merges it with free
    /// neighbours of the same stream and leaves the result in its bin.
    #[inline(always)]
    fn release_chunk(&mut self, id: u32) {
        let c = self.chunks.get_mut(id);
        c.in_use = false;
        let (addr, size, requested, prev, next) =
            (c.addr, c.size, c.requested_size, c.prev, c.next);
        c.requested_size = 0;
        self.stats.remove_in_use(size, requested);
        if self.pages.is_some() {
            let rounded = round_up_256(requested).unwrap_or(size);
            // (check_invariants recomputes it; saturating so that a fault there could not
            // panic on a free.)
            self.dead_bytes = self.dead_bytes.saturating_sub(size.saturating_sub(rounded));
        }
        let above = next != NIL && self.mergeable(id, next);
        // Whether the chunk below takes this one once it has taken the one above (whose
        // stream it takes if it has none: see `merge`).
        let below = prev != NIL && {
            let (p, c) = (self.chunks.get(prev), self.chunks.get(id));
            let stream = match c.stream {
                0 if above => self.chunks.get(next).stream,
                s => s,
            };
            !p.in_use && self.streams_merge(p.stream, stream)
        };
        if below {
            // Both neighbours fold into the one below, which keeps its bin entry: one bin
            // update fewer than moving the entry of the one above to this chunk first.
            if above {
                self.bins.remove(next);
                self.merge(id, next);
            }
            self.merge(prev, id);
            let p = self.chunks.get(prev);
            self.bins.rekey(prev, p.size, p.addr);
        } else if above {
            // Absorb the free chunk above, taking over its bin entry.
            let merged = size + self.chunks.get(next).size;
            self.bins.replace(next, id, merged, addr);
            self.merge(id, next);
        } else {
            let c = self.chunks.get(id);
            let class = self.class_of(c.region);
            self.bins.insert_class(id, c.size, c.addr, class);
        }
    }

    /// Whether adjacent chunks `a` (lower) and `b` are both free and of one stream (in
    /// virtual-memory mode, or one of them of no stream: see `absorb_unassigned`).
    #[inline]
    fn mergeable(&self, a: u32, b: u32) -> bool {
        let (a, b) = (self.chunks.get(a), self.chunks.get(b));
        !a.in_use && !b.in_use && self.streams_merge(a.stream, b.stream)
    }

    /// Whether free chunks of streams `a` and `b` merge when adjacent.
    #[inline(always)]
    fn streams_merge(&self, a: StreamId, b: StreamId) -> bool {
        a == b
            || self.absorb_unassigned
                && (a == 0 || b == 0)
                && a != vm::UNMAPPED
                && b != vm::UNMAPPED
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

    /// The region ORT's `Extend` asks for to hold `rounded` bytes, with `available` bytes (a
    /// multiple of 256) left under `arena.max_mem` and `held` held by the whole arena, and the
    /// growth size after it; an error when the budget is too small. Changes nothing.
    pub(crate) fn plan_extend(
        &self,
        config: &ArenaConfig,
        rounded: u64,
        requested: u64,
        available: u64,
        held: u64,
    ) -> Result<(u64, u64)> {
        if rounded > available {
            return Err(ArenaError::oom(
                requested,
                format!(
                    "available memory of {available} bytes is smaller than the {rounded} bytes needed \
                     (arena.max_mem {}, {held} bytes held)",
                    config.max_mem
                ),
            ));
        }
        // Regions this sub-arena grew are out with threads that still use them, and come home
        // when they are done: a region of the present size, not one that doubles the next, so
        // that what stays on then stays small (issue 25).
        if !self.lent.is_empty() {
            return Ok((rounded.max(self.growth).min(available), self.growth));
        }
        Ok(match config.extend_strategy {
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
        })
    }

    /// Adds the region the raw allocator gave for a [`State::plan_extend`], and takes its
    /// growth size.
    pub(crate) fn commit_extend(&mut self, base: u64, size: u64, growth: u64, id: u64) {
        self.growth = growth;
        self.add_region(base, size, id);
    }

    fn add_region(&mut self, base: u64, size: u64, id: u64) {
        self.insert_region(base, size, id);
        self.stats.total_allocated += size;
        self.stats.num_arena_extensions += 1;
    }

    /// A region `[base, base + size)` (id `id`) tiled by one free chunk; returns its slot.
    /// Counts nothing: a raw region counts as held, a reserved range does not.
    fn insert_region(&mut self, base: u64, size: u64, id: u64) -> u32 {
        let region = Region {
            id,
            base,
            size,
            first_chunk: NIL,
        };
        let slot = self.regions.insert(region);
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

    /// Takes every region with no chunk in use out of the sub-arena, for the caller to hand
    /// back to the raw allocator with no lock held ([`State::restore_region`] if that fails).
    pub(crate) fn detach_idle_regions(&mut self) -> Vec<Detached> {
        let mut out = Vec::new();
        for slot in self.idle_regions() {
            let Some(d) = self.detach_region(slot) else {
                continue;
            };
            self.stats.num_arena_extensions -= 1;
            self.stats.num_arena_shrinkages += 1;
            out.push(d);
        }
        out
    }

    /// Takes out a region of at least `min_size` bytes for another sub-arena to adopt
    /// ([`State::adopt_region`]), with the host streams its chunks are tagged with, if this
    /// sub-arena holds nothing in use: its thread is between requests (a pool thread after
    /// its turn), so its memory serves the others. A thread with work in flight keeps its
    /// regions: taken from it, they would go back and forth with every miss, and each sub-arena
    /// would grow bigger regions to make up (measured: up to 1.9x the memory with 8 threads each
    /// replaying a trace). Walks the chunks of the regions large enough: only a miss that would
    /// otherwise grow calls it.
    pub(crate) fn detach_free_region(
        &mut self,
        rounded: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> Option<(Detached, Carried)> {
        if self.retired || self.stats.in_use != 0 {
            return None;
        }
        // A bounded look: with `arena.extend_strategy=1` a sub-arena may hold a region per
        // allocation, and a miss must not cost a walk over all of them.
        let slot = self
            .regions
            .iter()
            .filter(|(_, r)| r.size >= rounded)
            .take(ADOPTION_CANDIDATES)
            .find(|(_, r)| self.region_serves(r, rounded, consumer, clock))?
            .0;
        self.detach_for_another(slot)
    }

    /// Takes out the region at `base` (its home takes it back) if no chunk of it is in use
    /// and one of its chunks serves `rounded` bytes on `consumer`.
    pub(crate) fn detach_free_region_at(
        &mut self,
        base: u64,
        rounded: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> Option<(Detached, Carried)> {
        if self.retired {
            return None;
        }
        let slot = self.regions.find(base)?;
        let r = self.regions.get(slot);
        if r.base != base || !self.region_serves(r, rounded, consumer, clock) {
            return None;
        }
        self.detach_for_another(slot)
    }

    /// Whether no chunk of `r` is in use and one of them is `rounded` bytes or more that
    /// stream `consumer` may take, or will once a host stream's events say its work is done
    /// (the adopter polls them, with no lock held, when it misses): a region whose chunks
    /// belong to another stream without events would move for nothing (threads each on a
    /// stream of their own never could use it).
    fn region_serves(
        &self,
        r: &Region,
        rounded: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> bool {
        let (mut id, mut serves) = (r.first_chunk, false);
        while id != NIL {
            let c = self.chunks.get(id);
            if c.in_use {
                return false;
            }
            serves |= c.size >= rounded
                && (reusable(c, consumer, &self.hosted, clock) || self.hosted.contains(c.stream));
            id = c.next;
        }
        serves
    }

    /// Takes region `slot` out for another sub-arena, with the host streams its chunks are
    /// tagged with.
    fn detach_for_another(&mut self, slot: u32) -> Option<(Detached, Carried)> {
        let d = self.detach_region(slot)?;
        self.stats.num_arena_extensions -= 1;
        let hosted = self
            .hosted
            .carried(|id| d.chunks.iter().any(|c| c.stream == id));
        Some((d, hosted))
    }

    /// Takes in a region another sub-arena let go of ([`State::detach_free_region`]). A
    /// sub-arena's `NumArenaExtensions` is the regions it holds, so the count moves with the
    /// region; summed, it is the arena's.
    pub(crate) fn adopt_region(&mut self, d: Detached, hosted: Carried) {
        self.hosted.adopt(&hosted);
        self.attach_region(d);
        self.stats.num_arena_extensions += 1;
    }

    /// Takes region `slot` and its chunks out, with the bytes it holds.
    fn detach_region(&mut self, slot: u32) -> Option<Detached> {
        let region = self.regions.remove(slot)?;
        let mut chunks = Vec::new();
        let mut id = region.first_chunk;
        while id != NIL {
            let c = *self.chunks.get(id);
            self.bins.remove(id);
            self.chunks.remove(id);
            chunks.push(c);
            id = c.next;
        }
        self.stats.total_allocated -= region.size;
        Some(Detached { region, chunks })
    }

    /// Puts back a region the raw allocator would not take back, as it was.
    pub(crate) fn restore_region(&mut self, d: Detached) {
        self.attach_region(d);
        self.stats.num_arena_extensions += 1;
        self.stats.num_arena_shrinkages -= 1;
    }

    /// Puts a detached region and its chunks in, with the bytes it holds.
    fn attach_region(&mut self, d: Detached) {
        let slot = self.regions.insert(Region {
            first_chunk: NIL,
            ..d.region
        });
        let mut prev = NIL;
        for c in d.chunks {
            let id = self.chunks.insert(Chunk {
                prev,
                next: NIL,
                region: slot,
                ..c
            });
            if prev == NIL {
                self.regions.get_mut(slot).first_chunk = id;
            } else {
                self.chunks.get_mut(prev).next = id;
            }
            let class = self.class_of(slot);
            self.bins.insert_class(id, c.size, c.addr, class);
            prev = id;
        }
        self.stats.total_allocated += d.region.size;
    }

    /// Whether no chunk of `r` is in use.
    fn region_is_free(&self, r: &Region) -> bool {
        let mut id = r.first_chunk;
        while id != NIL {
            let c = self.chunks.get(id);
            if c.in_use {
                return false;
            }
            id = c.next;
        }
        true
    }

    /// Slots of regions with no chunk in use. Walks every chunk: only shrinking needs it.
    fn idle_regions(&self) -> Vec<u32> {
        self.regions
            .iter()
            .filter(|(_, r)| self.region_is_free(r))
            .map(|(slot, _)| slot)
            .collect()
    }

    /// After a shrink the next region is `initial_growth_chunk_size_bytes` again (ORT C).
    pub(crate) fn reset_growth(&mut self, config: &ArenaConfig) {
        let g = config.initial_growth_chunk_size_bytes;
        self.growth = round_up_256(g).unwrap_or(g);
    }

    fn region_firsts(&self) -> Vec<u32> {
        self.regions.iter().map(|(_, r)| r.first_chunk).collect()
    }

    /// Detaches every chunk from `stream` and merges the free runs that now share a stream.
    /// Returns the stream's events if it was a host stream with events, for the caller to drop
    /// once the lock is released.
    #[must_use]
    pub(crate) fn reset_stream(&mut self, stream: StreamId) -> Option<Arc<FreeEvents>> {
        let hosted = self.hosted.remove(stream);
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
                    let class = self.class_of(c.region);
                    self.bins.insert_class(id, c.size, c.addr, class);
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
    /// `Some(false)` a chunk, `None` neither. Costs O(1) at an allocation's first byte or a
    /// few KiB past it, where reads and writes mostly go, however many chunks there are.
    fn contains_range(&self, addr: u64, len: u64) -> Option<bool> {
        if let Some(&size) = self.reserves.get(&addr) {
            if range_inside(addr, len, addr, size) {
                return Some(true);
            }
        }
        // An empty range may also sit at the very end of an allocation, which the byte before
        // names (the byte at `addr` may be another chunk's, or no region's).
        let before = if len == 0 { addr.checked_sub(1) } else { None };
        for at in std::iter::once(addr).chain(before) {
            let holds = self.regions.find(at).and_then(|slot| {
                self.in_use_chunk_holding(slot, at)
                    .filter(|c| range_inside(addr, len, c.addr, c.requested_size))
            });
            if holds.is_some() {
                return Some(false);
            }
        }
        self.reserves
            .iter()
            .any(|(&base, &size)| range_inside(addr, len, base, size))
            .then_some(true)
    }

    /// The in-use chunk of region `slot` whose bytes hold `addr`. Chunks start on 256-byte
    /// granules of their region, and the in-use ones are in `live`: the first in-use start
    /// found stepping down from `addr` either holds it or ends below it (then `addr` is in
    /// free memory). Past [`HOLDING_PROBES`] granules, walks the region's chunks instead.
    fn in_use_chunk_holding(&self, slot: u32, addr: u64) -> Option<&Chunk> {
        let base = self.regions.get(slot).base;
        let mut start = addr - (addr - base) % MIN_ALLOCATION_SIZE;
        for _ in 0..HOLDING_PROBES {
            if let Some(id) = self.live.get(start) {
                let c = self.chunks.get(id);
                return (addr - c.addr < c.size).then_some(c);
            }
            if start == base {
                return None;
            }
            start -= MIN_ALLOCATION_SIZE;
        }
        self.chunk_containing(addr).filter(|c| c.in_use)
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

    pub(crate) fn log(&self) -> MemoryLog {
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

    pub(crate) fn check(&self, vm: Option<&dyn VirtualMemory>) -> std::result::Result<(), String> {
        self.bins.check()?;
        let (mut in_use, mut requested, mut held, mut free_chunks, mut live_chunks) =
            (0, 0, 0, 0, 0);
        let mut dead = 0;
        let mut hosted_in_use = std::collections::BTreeMap::new();
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
                    if self.hosted.contains(c.stream) {
                        *hosted_in_use.entry(c.stream).or_insert(0u64) += 1;
                    }
                    if self.pages.is_some() {
                        dead += c
                            .size
                            .saturating_sub(round_up_256(c.requested_size).unwrap_or(c.size));
                    }
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
                    let hosted = self.hosted.contains(c.stream);
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
                "dead bytes of chunks handed out whole",
                self.dead_bytes,
                dead,
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
        for (id, counted) in self.hosted.in_use_counts() {
            let chunks = hosted_in_use.get(&id).copied().unwrap_or(0);
            if counted != chunks {
                return Err(format!(
                    "host stream {id} counts {counted} chunks in use, the chunks {chunks}"
                ));
            }
        }
        Ok(())
    }
}

/// ORT's rule: a chunk of `chunk_size` bytes handed out for `rounded` is split when at least
/// half of it, or `max_dead` bytes, would be left over.
#[inline]
fn splits(chunk_size: u64, rounded: u64, max_dead: u64) -> bool {
    chunk_size / 2 >= rounded || chunk_size - rounded >= max_dead
}

impl<R: RawAllocator> Drop for Arena<R> {
    fn drop(&mut self) {
        // A stream being released on another thread may still hold the sub-arenas for a moment
        // (to reset its chunks); retiring under their locks leaves it nothing to touch.
        self.retire_all();
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
        // The common case: a chunk this thread's own sub-arena handed out.
        if let Some(sub) = self.subs.get(self.me()) {
            let mut st = sub.lock();
            if let Some(id) = st.live.remove(addr) {
                st.mark_hosted_free(id);
                st.release_chunk(id);
                if let Some(vm) = &self.vm {
                    let before = st.held();
                    st.vm_after_free(&**vm);
                    self.subs.follow_budget(before, st.held());
                }
                return Ok(());
            }
        }
        self.free_elsewhere(addr)
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        if let Some(vm) = &self.vm {
            return self.reserve_vm(&**vm, size);
        }
        let me = self.me();
        let sub = self.subs.get_or_make(me);
        sub.lock().check_live()?;
        let addr = match self.raw_reserve(size) {
            Err(ArenaError::OutOfMemory { .. }) if self.subs.release_idle(&self.raw).0 > 0 => {
                // Decision 7.
                sub.lock().reset_growth(&self.config);
                self.raw_reserve(size)?
            }
            other => other?,
        };
        let mut global = None;
        loop {
            let mut st = sub.lock();
            if let Err(e) = st.check_live() {
                drop(st);
                let _ = self.raw.free(addr, size);
                self.subs.return_budget(size);
                return Err(e);
            }
            let frozen = match self.subs.admit(&mut global, me, &mut st, size) {
                Admit::Fits(frozen) => frozen,
                Admit::Retry => {
                    drop(st);
                    global = Some(self.subs.global());
                    continue;
                }
            };
            st.reserves.insert(addr, size);
            st.stats.add_in_use(size, size);
            st.stats.num_reserves += 1;
            st.stats.reserved_bytes += size;
            st.stats.total_allocated += size;
            drop(frozen);
            drop(global);
            self.subs.directory.insert(addr, size, me as u32);
            return Ok(Some(addr));
        }
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
        self.check_live()?;
        let hosted = self.subs.reset_stream(stream.id());
        drop(hosted);
        Ok(())
    }

    fn retire(&self) {
        self.retire_all();
    }

    fn info(&self) -> MemoryInfo {
        self.raw.info()
    }

    fn stats(&self) -> AllocatorStats {
        self.stats_of(&self.subs.freeze())
    }

    fn can_shrink(&self) -> bool {
        true
    }

    fn shrink(&self) -> Result<()> {
        self.check_live()?;
        if let Some(vm) = &self.vm {
            let Some(sub) = self.subs.get(0) else {
                return Ok(());
            };
            let mut st = sub.lock();
            st.check_live()?;
            let before = st.held();
            let (_, err) = st.vm_release_all_free(&**vm);
            self.subs.follow_budget(before, st.held());
            st.reset_growth(&self.config);
            st.peak_chunk_bytes = st.stats.in_use - st.stats.reserved_bytes;
            return err.map_or(Ok(()), Err);
        }
        let (_, err) = self.subs.release_idle(&self.raw);
        for t in self.subs.used().collect::<Vec<_>>() {
            if let Some(sub) = self.subs.get(t) {
                let mut st = sub.lock();
                st.reset_growth(&self.config);
                st.peak_chunk_bytes = st.stats.in_use - st.stats.reserved_bytes;
            }
        }
        err.map_or(Ok(()), Err)
    }

    fn memory_log(&self) -> MemoryLog {
        // Logs and stats of one instant.
        let (mut logs, stats) = {
            let f = self.subs.freeze();
            let logs: Vec<MemoryLog> = f.subs.iter().map(|(_, st)| st.log()).collect();
            (logs, self.stats_of(&f))
        };
        if logs.len() == 1 {
            let mut log = logs.remove(0);
            log.stats = stats;
            return log;
        }
        let mut log = MemoryLog {
            stats,
            ..MemoryLog::default()
        };
        for l in logs {
            log.regions.extend(l.regions);
            log.reserves.extend(l.reserves);
            for b in l.bins {
                match log.bins.iter_mut().find(|x| x.bin_size == b.bin_size) {
                    Some(x) => {
                        x.chunks += b.chunks;
                        x.in_use_chunks += b.in_use_chunks;
                        x.bytes += b.bytes;
                        x.in_use_bytes += b.in_use_bytes;
                        x.requested_bytes += b.requested_bytes;
                    }
                    None => log.bins.push(b),
                }
            }
        }
        log.regions.sort_by_key(|r| r.base);
        log.reserves.sort_by_key(|r| r.addr);
        log.bins.sort_by_key(|b| b.bin_size);
        log
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        self.with_owner(addr, |st| {
            if let Some(&size) = st.reserves.get(&addr) {
                return Ok(size);
            }
            st.live_chunk(addr).map(|c| c.size)
        })
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        self.with_owner(addr, |st| {
            if let Some(&size) = st.reserves.get(&addr) {
                return Ok(size);
            }
            st.live_chunk(addr).map(|c| c.requested_size)
        })
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
