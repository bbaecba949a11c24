//! The BFC arena: best fit with coalescing over regions obtained from a [`RawAllocator`],
//! with ONNX Runtime's semantics (see `shared/reference/ort-arena-behaviour.md`) and the
//! DESIGN's decisions on top. This file holds the arena's types and its allocation paths (the
//! common path, the slow path, growth) in [`Core`], generic over where the memory comes from;
//! the parts, one file each under `bfc/`:
//!
//! - `modes.rs`: [`Arena`], the public type: the two modes, each a `Core` over one source;
//! - `source.rs`: the [`Source`] of a sub-arena's memory, [`Regions`] or pages (`vm::Paged`);
//! - `state.rs`: one sub-arena's chunks (find, take, split, free, merge, stream tags);
//! - `regions.rs`: its regions in the region mode (ORT's `Extend`, idle regions out);
//! - `moves.rs`: memory moving between sub-arenas before one grows;
//! - `by_address.rs`: what an address belongs to (frees from other threads, copies);
//! - `allocator.rs`: the [`Allocator`] face (stats, shrink, the memory log, retiring);
//! - `inspect.rs`: the memory log of a sub-arena and the invariant walk;
//! - `vm.rs` and `vm/`: the paged source (the page policy, its allocation paths, chunk
//!   surgery at page boundaries, unmapping, its log and checks).
//!
//! The structures they use live in `bins`, `free_list`, `chunks`, `region`, `pages` and
//! `hosted_streams`.
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
//! mapped when a chunk first needs them; the page policy lives in `bfc/vm.rs`, the page
//! bits in `pages.rs`. Unmapped free memory is kept out of the bins, so allocating from and
//! freeing to mapped memory are the region mode's paths, unchanged. With threads, each thread's
//! sub-arena maps pages in ranges of its own (the directory names their owner, as it does
//! regions), so the common path is the region mode's per-thread one; what the arena holds
//! follows what all sub-arenas use, not each one's own peak (`bfc/vm/paths.rs`): past the
//! arena-wide headroom a miss takes another sub-arena's free mapped chunk, then unmaps the
//! others' free pages, before it maps more. Pages are mapped under the sub-arena's lock alone
//! (and the global one too where `arena.max_mem` is set, so the budget stays exact); stats,
//! shrink and decision 7 cover every sub-arena.

mod allocator;
mod by_address;
mod inspect;
mod modes;
mod moves;
mod regions;
mod source;
mod state;
mod vm;

pub use modes::Arena;
pub(crate) use source::{Regions, Source};
use vm::Paged;

use regions::alloc_region;

use super::hosted_streams::{Carried, HostedStreams};
use crate::allocators::allocator::{out_of_range, range_inside, Allocator};
use crate::arena::bins::{bin_for_size, bin_size, round_up_256, MIN_ALLOCATION_SIZE, NUM_BINS};
use crate::arena::chunks::{Chunk, ChunkSlab};
use crate::arena::free_list::{FreeBins, NIL};
use crate::arena::in_use_quota::{self, Admit, Metered};
use crate::arena::region::{Region, RegionSet};
use crate::arena::sub_arenas::{Frozen, Global, SubArenas, SHARED};
use crate::collections::addr_map::{AddrMap, AddrTable};
use crate::raw::{RawAllocator, VirtualMemory};
use crate::streams::stream::{Clock, Stream, StreamId};
use crate::streams::stream_events::{settle_on_device, FreeEvents};
use crate::streams::threads_on;
use crate::types::config::{ArenaConfig, ExtendStrategy};
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::MemoryInfo;
use crate::types::memory_log::{BinLog, ChunkLog, MemoryLog, RegionLog, ReserveLog};
use crate::types::stats::AllocatorStats;
use parking_lot::MutexGuard;
use std::sync::Arc;

/// How far an allocation has gone to get other host streams' freed chunks (issue 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waited {
    Nothing,
    /// Their frees were covered by events and the events queried.
    Polled,
    /// Virtual-memory mode, past the headroom: the host streams holding back free chunks in
    /// any sub-arena were queried too.
    PolledEverywhere,
    /// Virtual-memory mode, past the churn ceiling: the device was waited for, so that the
    /// frees of streams the host may destroy, which no event covers, count as done.
    Settled,
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

/// The most host streams a miss polls (see [`State::hosted_holding_back`]).
const MAX_POLLED_ON_MISS: usize = 4;

/// The most regions an allocation moves from other sub-arenas before it grows its own.
const MAX_ADOPTIONS: u32 = 8;

/// The most regions of one idle sub-arena a miss looks at for one to move.
const ADOPTION_CANDIDATES: usize = 64;

/// How many 256-byte granules below an address a copy looks up in the live map for the chunk
/// holding it (16 KiB) before walking the region's chunks, which costs O(chunks before it).
const HOLDING_PROBES: u32 = 64;

/// One arena of one mode: sub-arenas whose memory comes from source `S`, over the raw
/// allocator `R`, with the allocation paths. [`Arena`] (`modes.rs`) picks the mode.
/// Thread-safe; threads allocate from sub-arenas of their own (see the module docs).
#[derive(Debug)]
pub(crate) struct Core<R: RawAllocator, S: Source> {
    raw: R,
    /// Virtual-memory mode: where the chunks' memory comes from (reserves still come from
    /// `raw`). `None` for regions, which are raw allocations.
    vm: Option<Arc<dyn VirtualMemory>>,
    config: ArenaConfig,
    /// A free chunk handed out is cut when the rest would waste at least this many bytes:
    /// `max_dead_bytes_per_chunk` (ORT's rule), or 256 in virtual-memory mode, where waste
    /// inside a chunk holds mapped pages.
    split_waste: u64,
    stream_aware: bool,
    subs: Arc<SubArenas<S>>,
}

/// One sub-arena: a whole BFC arena's state, behind a lock of its own (`sub_arenas.rs`).
#[derive(Debug)]
pub(crate) struct State<S: Source> {
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
    /// Where the memory comes from: raw regions, or mapped pages of reserved ranges (the
    /// regions) with their policy (`source.rs`).
    source: S,
    /// High-water mark of chunk bytes in use (reserves not counted) since the last shrink:
    /// virtual-memory mode maps past it by at most `arena.vm_peak_headroom_percent`.
    peak_chunk_bytes: u64,
    /// Virtual-memory mode: bytes of in-use chunks past their rounded sizes (chunks handed
    /// out whole rather than cut; see [`State::splits`]).
    dead_bytes: u64,
    /// Virtual-memory mode: memory handed out since the device was last waited for may be
    /// used by work on no stream the arena tracks (a chunk handed out with no stream, or the
    /// chunks of a stream without events that was released). Until an unmap waits for the
    /// device again, every unmap does; otherwise an unmap of pages whose streams are all
    /// known past their frees waits for nothing (issue 25).
    unknown_work: bool,
    /// How many times work became unknown ([`State::work_unknown`]): a wait for the device
    /// clears `unknown_work` only if none happened since it was asked for.
    unknown_events: u64,
    /// What the other host streams' completed marks summed to at the last
    /// [`State::untag_done`] pass.
    untag_progress: u64,
    /// Passes that untagged and merged free chunks ([`Allocator::layout_changes`]).
    layout_changes: u64,
    /// Chunk bytes in use by threads other than this sub-arena's (chunks marked `foreign`).
    foreign_in_use: u64,
    /// Virtual-memory mode: ranges reserved (`true`) or given back (`false`) since the arena
    /// last told its directory, as `(base, size, reserved)`: the sub-arena changes them under
    /// its own lock, deep in its paths; the arena drains this after each call that may.
    range_changes: Vec<(u64, u64, bool)>,
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

impl<R: RawAllocator> Core<R, Regions> {
    /// ONNX Runtime's region arena over `raw` with `config` (validated by the caller).
    pub(crate) fn regions(raw: R, config: ArenaConfig) -> Self {
        Core {
            raw,
            vm: None,
            split_waste: config.max_dead_bytes_per_chunk,
            subs: Arc::new(SubArenas::new(&config, Regions)),
            config,
            stream_aware: true,
        }
    }
}

impl<R: RawAllocator> Core<R, Paged> {
    /// The virtual-memory arena over `vm` (chunks) and `raw` (reserves) with `config`
    /// (validated by the caller); see [`Arena::with_virtual_memory`].
    pub(crate) fn paged(raw: R, vm: Arc<dyn VirtualMemory>, config: ArenaConfig) -> Result<Self> {
        let paged = Paged::new(&*vm, &config)?;
        Ok(Core {
            raw,
            vm: Some(vm),
            // Every chunk is cut to size but for the dead-byte budget's (`State::splits`).
            split_waste: MIN_ALLOCATION_SIZE,
            subs: Arc::new(SubArenas::new(&config, paged)),
            config,
            stream_aware: true,
        })
    }
}

impl<R: RawAllocator, S: Source> Core<R, S> {
    /// The virtual-memory form the arena maps its pages from, in virtual-memory mode.
    pub(crate) fn virtual_memory(&self) -> Option<&Arc<dyn VirtualMemory>> {
        self.vm.as_ref()
    }

    /// No `alloc_on_stream` (ORT's pinned arena).
    pub(crate) fn set_without_streams(&mut self) {
        self.stream_aware = false;
    }

    /// The raw allocator underneath.
    pub(crate) fn raw(&self) -> &R {
        &self.raw
    }

    /// The configuration the arena was made with.
    pub(crate) fn config(&self) -> &ArenaConfig {
        &self.config
    }

    /// How many times the sub-arenas' `InUse` quotas were rebalanced (`in_use_quota.rs`): the
    /// one step of the common path that needs every thread's sub-arena. For benchmarks.
    pub(crate) fn quota_rebalances(&self) -> u64 {
        self.subs.global().ledger.rebalances
    }

    /// Of [`Arena::quota_rebalances`], those that moved quota among the sub-arenas at hand
    /// without waiting for one another thread held.
    pub(crate) fn quota_rebalances_in_part(&self) -> u64 {
        self.subs.global().ledger.rebalances_in_part
    }

    /// Of [`Arena::quota_rebalances`], those that borrowed from one other sub-arena alone.
    pub(crate) fn quota_borrows(&self) -> u64 {
        self.subs.global().ledger.borrows
    }

    /// How many allocations left the common path (no free chunk of the thread's sub-arena
    /// served, or the quota needed a rebalance): each takes the global lock, and in
    /// virtual-memory mode may map pages. For benchmarks and tests.
    pub(crate) fn slow_allocations(&self) -> u64 {
        self.subs.slow.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The calling thread's sub-arena.
    #[inline(always)]
    fn me(&self) -> usize {
        SubArenas::<S>::index()
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
        match self.take_fast(self.me(), rounded, size, stream) {
            Some(addr) => Ok(Some(addr)),
            // Read again: a thread that met another in the shared sub-arena has left it.
            None => self.allocate_slow(self.me(), rounded, size, stream),
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
        let sub = self.subs.get(me)?;
        let mut st = match sub.try_lock_for_use() {
            Some(st) => st,
            // Another thread allocating or freeing in the shared sub-arena: this one takes a
            // sub-arena of its own, as glibc's malloc moves a thread to another arena when its
            // lock is contended. Threads that take turns (PyTorch's autograd thread and the
            // thread it serves, a pool's threads, one ONNX Runtime session's requests) stay one
            // arena and hold what one thread would. A reader of stats (PyTorch's memory
            // polling) moves nobody: on an H100, BERT serving held 640 MiB so, 584 not.
            None if me == SHARED && sub.held_for_use() => {
                SubArenas::<S>::leave_shared();
                return None;
            }
            None => sub.lock_for_use(),
        };
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
        self.subs
            .slow
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let (true, Some(vm)) = (S::PAGED, &self.vm) {
            return self.allocate_vm(&**vm, me, rounded, size, stream);
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
            let (miss, reaped) = {
                let mut st = sub.lock();
                let reaped = st.reap_orphans();
                (self.on_miss(&mut st, rounded, consumer, waited), reaped)
            };
            // Outside the lock: the last references hand their events back to the backend.
            drop(reaped);
            let miss = miss?;
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
    /// goes, and a host stream's frees take its marks. When the stream is not the one that
    /// took a chunk here last, this thread may have changed streams: it counts on this one now
    /// (`threads_on.rs`; a thread that keeps to its stream and its sub-arena never asks).
    #[inline(always)]
    fn tag_with(&self, st: &mut State<S>, stream: &Stream) {
        if st.registered != stream.id() {
            stream.clock().register_user(&self.subs);
            st.registered = stream.id();
            if let Some(events) = stream.free_events() {
                threads_on::allocating_on(events);
            }
        }
        if let Some(events) = stream.free_events() {
            st.hosted.took(stream.id(), events);
        }
    }

    /// No free chunk fits in this thread's sub-arena. First, once, other host streams' frees
    /// may have completed: the caller polls their events. Then the sub-arena grows.
    #[cold]
    #[inline(never)]
    fn on_miss(
        &self,
        st: &mut State<S>,
        rounded: u64,
        consumer: StreamId,
        waited: Waited,
    ) -> Result<Miss> {
        if waited == Waited::Nothing {
            let others = st.hosted_holding_back(rounded, consumer);
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
        let max_mem = crate::types::config::MaxMem(self.config.max_mem);
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

    /// Walks every chunk and checks the arena's invariants: regions tiled exactly by linked
    /// chunks, free chunks in their bins and in-use ones in the address map, no two adjacent
    /// free chunks of one stream left unmerged, every stat equal to what the chunks and
    /// reserves add up to, and across sub-arenas the quotas, the budget and the directory.
    /// O(chunks); for tests and debugging. Returns the first fault.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        self.subs.check(&self.raw, self.vm.as_deref())
    }
}

/// Whether free chunk `c` may go to stream `consumer` (0: no stream). ORT's rule: the
/// consumer's own chunk, an unassigned one, or one whose stream the consumer has waited on
/// since the chunk was handed out there; for a host stream with events, one whose free that
/// stream's work is known past.
#[inline(always)]
fn reusable(c: &Chunk, consumer: StreamId, hosted: &HostedStreams, clock: Option<&Clock>) -> bool {
    reusable_if_waited(c, consumer, hosted, |stream, sync_id| {
        clock.is_some_and(|cl| sync_id < cl.last_wait(stream))
    })
}

/// [`reusable`], where `waited_past(stream, sync_id)` says whether the consumer has waited on
/// an event `stream` recorded after `sync_id`: asked only when the chunk's stream's events do
/// not already say its free is done, so a caller can take the consumer's clock only then. (A
/// stream with events counts sync ids with its marks, so the mark a chunk took at its free is
/// also the sync id to compare; a host's stream records nothing the consumer waits on.)
#[inline(always)]
fn reusable_if_waited(
    c: &Chunk,
    consumer: StreamId,
    hosted: &HostedStreams,
    waited_past: impl FnOnce(StreamId, u64) -> bool,
) -> bool {
    c.stream == consumer || c.stream == 0 || reusable_from_elsewhere(c, hosted, waited_past)
}

/// [`reusable_if_waited`] for a chunk of another stream, out of line: the common case (the
/// consumer's own chunk) stays a comparison wherever a search tests a chunk.
#[inline(never)]
fn reusable_from_elsewhere(
    c: &Chunk,
    hosted: &HostedStreams,
    waited_past: impl FnOnce(StreamId, u64) -> bool,
) -> bool {
    hosted
        .events(c.stream)
        .is_some_and(|events| events.is_complete(c.sync_id))
        || waited_past(c.stream, c.sync_id)
}

/// ORT's rule: a chunk of `chunk_size` bytes handed out for `rounded` is split when at least
/// half of it, or `max_dead` bytes, would be left over.
#[inline]
fn splits(chunk_size: u64, rounded: u64, max_dead: u64) -> bool {
    chunk_size / 2 >= rounded || chunk_size - rounded >= max_dead
}
