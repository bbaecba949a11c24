//! The arena's sub-arenas (issue 15: scale with threads).
//!
//! An arena is up to [`MAX_SUB_ARENAS`] sub-arenas, each a whole BFC arena of its own (regions,
//! chunks, bins, stream tags: the `State` of `bfc.rs`) behind its own lock. Every thread starts
//! on the shared sub-arena ([`SHARED`]); one that finds its lock taken when it allocates leaves
//! it for good, for the sub-arena its thread number picks (`thread_slot.rs`), as glibc's malloc
//! moves a thread to another arena on contention. So threads that run at once get distinct
//! sub-arenas, and on their common path no two touch the same lock or the same cache line;
//! threads that take turns (PyTorch's autograd thread and the thread it serves, a pool's
//! threads, one session's requests on a pool) stay one arena, with every address and every
//! byte held that one thread doing all their work would have (issue 25: GPT-2 training held
//! 13946 MiB on an H100 with the backward pass in a sub-arena of its own, 13864 so). This is
//! glibc's and jemalloc's per-thread arena, and RMM's per-stream `arena_memory_resource` in
//! spirit, keyed by thread rather than stream: ONNX Runtime's concurrent sessions and PyTorch's
//! server threads each run on their own thread and stream, and keying by thread keeps one
//! thread's program exactly the single arena it always was (every
//! stream rule, every address it would get) while threads that never share a stream, or use none,
//! scale too. A stream's rules hold in every sub-arena: a chunk carries its stream and sync id
//! wherever it lives.
//!
//! What stays shared, and how:
//! - **Frees** go to the sub-arena that owns the address: the freeing thread's own first (the
//!   common case), else the one the [`Directory`] names, so memory returns to where it came from.
//! - **Stats** are each sub-arena's, summed under the global lock with every sub-arena locked (an
//!   instant's exact values); `MaxInUse` is kept exact by the escrow of `in_use_quota.rs`.
//! - **Memory**: each sub-arena grows by its own regions, with ORT's growth policy of its own (a
//!   thread replaying a trace holds what one arena would). Before it grows, a sub-arena takes
//!   back the regions it grew that another one holds wholly free, then takes a wholly free region
//!   of a sub-arena with nothing in use (issue 25: a pool's threads taking turns hold the working
//!   set once, not once per thread); `arena.max_mem` is one budget for all,
//!   taken by an atomic reservation before the raw allocator is called. Growth, and the release of
//!   idle regions, call the raw allocator with no lock held. Out of memory, an allocation releases
//!   the wholly free regions of *every* sub-arena and retries (decision 7), then takes any chunk its
//!   stream may use from the other sub-arenas before it fails.
//! - **Streams**: a released or reset stream is reset in every sub-arena.
//!
//! Lock order: the global lock, then sub-arena locks (any number, only by the global lock's
//! holder), then a stream's clock; the directory's lock is taken alone or last. A thread holding a
//! sub-arena lock never blocks on the global lock.

use crate::arena::directory::Directory;
use crate::arena::in_use_quota::{self, Admit, HasInUseQuotas, InUseQuotas, Locked, Metered};
use crate::arena::lock::{ArenaGuard, ArenaLock};
use crate::arena::thread_slot;
use crate::arena::{Source, State};
use crate::raw::{RawAllocator, VirtualMemory};
use crate::streams::stream::{StreamId, StreamUser};
use crate::streams::stream_events::FreeEvents;
use crate::types::config::ArenaConfig;
use crate::types::error::{ArenaError, Result};
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The most sub-arenas an arena has; threads past this many share them.
pub const MAX_SUB_ARENAS: usize = 64;

/// From now on the calling thread allocates from a sub-arena of its own in every arena, as it
/// does once it finds another thread in the shared one (a free still goes to the sub-arena
/// that handed the memory out). For a thread known to run beside others, so that its first
/// allocations need not meet them; threads that take turns are best left shared: they then
/// hold what one thread would.
pub fn leave_shared_sub_arena() {
    thread_slot::leave_shared();
}

/// Whether the calling thread allocates from a sub-arena of its own (it met another thread in
/// the shared one, or called [`leave_shared_sub_arena`]).
pub fn uses_own_sub_arena() -> bool {
    thread_slot::left_shared()
}

/// The sub-arena every thread allocates from until it finds another thread there.
pub(crate) const SHARED: usize = 0;

/// The sub-arena of its own of the thread numbered `number`: never [`SHARED`].
#[inline]
fn own_index(number: u32) -> usize {
    1 + number as usize % (MAX_SUB_ARENAS - 1)
}

/// One sub-arena, on cache lines of its own so neighbours' locks do not share them.
#[derive(Debug)]
#[repr(align(128))]
struct Sub<S: Source>(ArenaLock<State<S>>);

/// What the global lock guards.
#[derive(Debug)]
pub(crate) struct Global {
    pub(crate) ledger: InUseQuotas,
    /// Set when the arena hands everything back for good; sub-arenas made after are retired.
    pub(crate) retired: bool,
    /// Virtual-memory mode: the most chunk bytes (requested, less dead bytes) seen in use
    /// across sub-arenas when pages were about to be mapped, since the last shrink: the peak
    /// the arena-wide headroom follows (`vm/paths.rs`).
    pub(crate) vm_peak: u64,
    /// Virtual-memory mode: by sub-arena, its requested chunk bytes in use and whether it was
    /// idle when last looked at (a sub-arena busy mapping pages is not waited for).
    pub(crate) vm_seen: Vec<(u64, bool)>,
}

impl HasInUseQuotas for Global {
    fn ledger(&mut self) -> &mut InUseQuotas {
        &mut self.ledger
    }
}

/// An arena's sub-arenas; see the module docs.
#[derive(Debug)]
pub(crate) struct SubArenas<S: Source> {
    subs: Box<[OnceLock<Box<Sub<S>>>]>,
    global: Mutex<Global>,
    pub(crate) directory: Directory,
    /// Bytes held from the raw allocator (regions and reserves) plus those being obtained: what
    /// `arena.max_mem` limits. Touched only when memory is obtained or given back.
    held: AtomicU64,
    next_region_id: AtomicU64,
    config: ArenaConfig,
    /// `Global::retired`, readable without the global lock (set under it, never cleared).
    retired: AtomicBool,
    /// Allocations that left the common path (`Arena::slow_allocations`).
    pub(crate) slow: AtomicU64,
    /// What every sub-arena takes its memory from when it is made (a copy each: the
    /// virtual-memory mode's empty page table and policy).
    source: S,
}

/// Every sub-arena locked, with the global lock: one instant of the whole arena.
pub(crate) struct Frozen<'a, S: Source> {
    pub(crate) global: MutexGuard<'a, Global>,
    pub(crate) subs: Vec<(usize, ArenaGuard<'a, State<S>>)>,
}

impl<S: Source> SubArenas<S> {
    /// No sub-arena yet; each, when made, takes its memory from a copy of `source`.
    pub(crate) fn new(config: &ArenaConfig, source: S) -> Self {
        SubArenas {
            subs: (0..MAX_SUB_ARENAS).map(|_| OnceLock::new()).collect(),
            global: Mutex::new(Global {
                ledger: InUseQuotas::new(MAX_SUB_ARENAS),
                retired: false,
                vm_peak: 0,
                vm_seen: vec![(0, true); MAX_SUB_ARENAS],
            }),
            directory: Directory::default(),
            held: AtomicU64::new(0),
            next_region_id: AtomicU64::new(0),
            config: config.clone(),
            retired: AtomicBool::new(false),
            slow: AtomicU64::new(0),
            source,
        }
    }

    /// The index of the calling thread's sub-arena: [`SHARED`] until the thread met another
    /// there, then one of its own (by its thread number).
    #[inline]
    pub(crate) fn index() -> usize {
        if thread_slot::left_shared() {
            own_index(thread_slot::current())
        } else {
            SHARED
        }
    }

    /// The calling thread found another allocating in the shared sub-arena: from now on it
    /// allocates from a sub-arena of its own.
    #[cold]
    pub(crate) fn leave_shared() {
        thread_slot::leave_shared();
    }

    /// Sub-arena `i`, if it was ever used.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&ArenaLock<State<S>>> {
        self.subs.get(i)?.get().map(|s| &s.0)
    }

    /// Sub-arena `i`, made on first use (under the global lock, so a retired arena makes it
    /// retired).
    #[inline]
    pub(crate) fn get_or_make(&self, i: usize) -> &ArenaLock<State<S>> {
        match self.get(i) {
            Some(s) => s,
            None => self.make(i),
        }
    }

    #[cold]
    fn make(&self, i: usize) -> &ArenaLock<State<S>> {
        let g = self.global.lock();
        let slot = &self.subs[i % MAX_SUB_ARENAS];
        let sub = slot.get_or_init(|| {
            let mut st = State::new(&self.config, i as u64, self.source.clone());
            if g.retired {
                st.mark_retired();
            }
            Box::new(Sub(ArenaLock::new(st)))
        });
        &sub.0
    }

    /// Indices of the sub-arenas ever used.
    pub(crate) fn used(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.subs.len()).filter(|&i| self.subs[i].get().is_some())
    }

    /// The global lock, if free now (for a thread that holds a sub-arena lock).
    #[inline]
    pub(crate) fn try_global(&self) -> Option<MutexGuard<'_, Global>> {
        self.global.try_lock()
    }

    /// The global lock (never while holding a sub-arena lock).
    pub(crate) fn global(&self) -> MutexGuard<'_, Global> {
        self.global.lock()
    }

    /// Every sub-arena at one instant.
    pub(crate) fn freeze(&self) -> Frozen<'_, S> {
        let global = self.global.lock();
        let subs = self
            .used()
            .filter_map(|i| self.get(i).map(|s| (i, s.lock())))
            .collect();
        Frozen { global, subs }
    }

    /// Makes `charge` fit sub-arena `me`'s quota (see [`in_use_quota::admit`]); the caller,
    /// holding `mine` locked, applies the charge before dropping what this returns.
    #[inline]
    pub(crate) fn admit<'a>(
        &'a self,
        global: &mut Option<MutexGuard<'a, Global>>,
        me: usize,
        mine: &mut State<S>,
        charge: u64,
    ) -> Admit<Vec<(usize, ArenaGuard<'a, State<S>>)>> {
        // A sub-arena with a quota was used, so it exists.
        in_use_quota::admit(
            global,
            || self.try_global(),
            me,
            mine,
            charge,
            |t, wait| match self.get(t) {
                None => Locked::Missing,
                Some(sub) if wait => Locked::Held(sub.lock()),
                Some(sub) => sub.lock_unless_stalled().map_or(Locked::Busy, Locked::Held),
            },
        )
    }

    /// Whether the arena was retired (see [`Global::retired`]).
    #[inline]
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Marks the arena retired, under the global lock `g`.
    pub(crate) fn mark_retired(&self, g: &mut Global) {
        g.retired = true;
        self.retired.store(true, Ordering::Release);
    }

    /// A new region id (ids are unique across sub-arenas).
    pub(crate) fn next_region_id(&self) -> u64 {
        self.next_region_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Bytes held or being obtained from the raw allocator.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Reserves room under `arena.max_mem` for a raw request: `plan` gets the bytes still
    /// available (exactly: a region rounds them down to 256 itself, a reserve may use them
    /// all) and the bytes held, and returns how many to reserve and
    /// anything else the caller needs; retried if another thread changed the budget meanwhile.
    pub(crate) fn reserve_budget<T>(
        &self,
        mut plan: impl FnMut(u64, u64) -> Result<(u64, T)>,
    ) -> Result<(u64, T)> {
        let max_mem = self.config.max_mem;
        let mut held = self.held.load(Ordering::Acquire);
        loop {
            let available = max_mem.saturating_sub(held);
            let (bytes, extra) = plan(available, held)?;
            let Some(after) = held.checked_add(bytes).filter(|&a| a <= max_mem) else {
                return Err(ArenaError::oom(
                    bytes,
                    "the request does not fit under arena.max_mem",
                ));
            };
            match self
                .held
                .compare_exchange_weak(held, after, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok((bytes, extra)),
                Err(now) => held = now,
            }
        }
    }

    /// Moves the budget by what a sub-arena holds now (`after`) against before (`before`):
    /// virtual-memory mode maps and unmaps pages under the sub-arena's lock.
    /// Nothing moved, nothing is written: most frees unmap nothing, and an atomic write per
    /// free was a tenth of the virtual-memory mode's free path.
    #[inline]
    pub(crate) fn follow_budget(&self, before: u64, after: u64) {
        if after == before {
            return;
        }
        if after > before {
            self.held.fetch_add(after - before, Ordering::AcqRel);
        } else {
            self.return_budget(before - after);
        }
    }

    /// Gives back `bytes` of the budget (a raw request refused or smaller, memory returned).
    pub(crate) fn return_budget(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Returns every wholly free region of every sub-arena to `raw`, calling it with no lock
    /// held. Returns how many went back and the first raw error (its region is kept).
    pub(crate) fn release_idle<R: RawAllocator>(&self, raw: &R) -> (usize, Option<ArenaError>) {
        let (mut released, mut first_err) = (0, None);
        for i in self.used().collect::<Vec<_>>() {
            let Some(sub) = self.get(i) else { continue };
            let detached = sub.lock().detach_idle_regions();
            for d in detached {
                self.directory.remove(d.base());
                match raw.free(d.base(), d.size()) {
                    Ok(()) => {
                        self.return_budget(d.size());
                        released += 1;
                    }
                    Err(e) => {
                        first_err.get_or_insert(e);
                        let (base, size) = (d.base(), d.size());
                        sub.lock().restore_region(d);
                        self.directory.insert(base, size, i as u32);
                    }
                }
            }
        }
        (released, first_err)
    }

    /// As [`SubArenas::reset_stream`], for a stream released (`State::release_stream`).
    pub(crate) fn release_stream(&self, id: StreamId) -> Vec<Arc<FreeEvents>> {
        self.used()
            .filter_map(|i| self.get(i))
            .filter_map(|s| s.lock().release_stream(id))
            .collect()
    }

    /// Resets stream `id` in every sub-arena; returns what must be dropped with no lock held.
    pub(crate) fn reset_stream(&self, id: StreamId) -> Vec<Arc<FreeEvents>> {
        self.used()
            .filter_map(|i| self.get(i))
            .filter_map(|s| s.lock().reset_stream(id))
            .collect()
    }

    /// The arena's own checks across sub-arenas: quotas, the budget, the directory.
    pub(crate) fn check<R: RawAllocator>(
        &self,
        raw: &R,
        vm: Option<&dyn VirtualMemory>,
    ) -> std::result::Result<(), String> {
        let f = self.freeze();
        let mut in_use = 0u64;
        let mut quotas = 0u64;
        let mut held = 0u64;
        let mut ranges = Vec::new();
        let mut mapped = 0u64;
        for (i, st) in &f.subs {
            st.check()?;
            mapped += st.vm_mapped_bytes();
            let q = f.global.ledger.quotas[*i];
            if st.quota() != q || st.in_use() > q {
                return Err(format!(
                    "sub-arena {i}: InUse {} quota {} ledger {q}",
                    st.in_use(),
                    st.quota()
                ));
            }
            in_use += st.in_use();
            quotas += q;
            held += st.held();
            ranges.extend(st.ranges().into_iter().map(|(b, s)| (b, b + s, *i as u32)));
        }
        let max = f.global.ledger.max_in_use;
        if quotas > max || in_use > max {
            return Err(format!(
                "quotas {quotas} or InUse {in_use} exceed MaxInUse {max}"
            ));
        }
        let outstanding = raw.raw_stats().raw_bytes_outstanding;
        if held != outstanding || held != self.held() {
            return Err(format!(
                "sub-arenas hold {held} bytes, the raw allocator has {outstanding} outstanding, the budget counts {}",
                self.held()
            ));
        }
        if let Some(vm) = vm {
            if vm.mapped_bytes() != mapped {
                return Err(format!(
                    "the backend has {} bytes mapped, the arena {mapped}",
                    vm.mapped_bytes()
                ));
            }
        }
        ranges.sort_unstable();
        if ranges != self.directory.entries() {
            return Err("the directory differs from the regions and reserves".into());
        }
        Ok(())
    }
}

impl<S: Source> StreamUser for SubArenas<S> {
    fn stream_released(&self, id: StreamId) {
        let hosted = self.release_stream(id);
        // Outside the locks: the last reference hands its events back to the backend.
        drop(hosted);
    }

    fn stream_holds_memory(&self, id: StreamId) -> bool {
        self.used()
            .filter_map(|i| self.get(i))
            .any(|s| s.lock().holds_stream(id))
    }
}
