//! Randomized model test: random op sequences over random valid configs and device limits
//! on the `virtual` backend, checked after every op against a shadow model of what must
//! hold, for the region arena and the virtual-memory mode (issue 14: chunks in use lie in
//! mapped pages, the backend counts what the arena mapped, nothing is mapped after freeing
//! everything and shrinking). The case count defaults to 10,000; `MODEL_CASES` overrides it.
//!
//! Issue 15: the same sequences also run with every allocation, reserve and free made on one
//! of four threads (chosen per op), one op at a time, so each thread has a sub-arena of its
//! own and frees, stream rules, out-of-memory paths and stats cross them; the model and every
//! check stay the same (2,000 cases; `MODEL_THREAD_CASES` overrides). Virtual-memory cases
//! on four threads share one sub-arena (the mode's design) and check the same.

use cuda_arena_core::{
    Allocator, Arena, ArenaConfig, DeviceLimits, MemoryLog, RawAllocator, Stream, VirtualAllocator,
    VirtualMemory,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

const STREAMS: usize = 3;
/// Threads of the many-thread run.
const THREADS: usize = 4;

/// What the sequences exercised, printed at the end so a reader can see the test bites.
#[derive(Debug, Default)]
struct Tally {
    ops: AtomicU64,
    allocs: AtomicU64,
    out_of_memory: AtomicU64,
    released_on_failure_path: AtomicU64,
    cross_stream_reuse: AtomicU64,
    bogus_frees: AtomicU64,
    vm_cases: AtomicU64,
    vm_bytes_unmapped: AtomicU64,
}
static TALLY: Tally = Tally {
    ops: AtomicU64::new(0),
    allocs: AtomicU64::new(0),
    out_of_memory: AtomicU64::new(0),
    released_on_failure_path: AtomicU64::new(0),
    cross_stream_reuse: AtomicU64::new(0),
    bogus_frees: AtomicU64::new(0),
    vm_cases: AtomicU64::new(0),
    vm_bytes_unmapped: AtomicU64::new(0),
};

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: u64,
        stream: Option<usize>,
        /// The thread that calls (many-thread run only).
        thread: usize,
    },
    Reserve(u64, usize),
    Free(usize, usize),
    /// A free the allocator must refuse: 0 interior, 1 double, 2 foreign, 3 inside a reserve.
    FreeBogus {
        pick: usize,
        kind: u8,
    },
    Shrink,
    /// `to` waits on an event recorded on `from`.
    Sync {
        from: usize,
        to: usize,
    },
    Reset(usize),
}

#[derive(Debug, Clone)]
struct Setup {
    pairs: Vec<(String, String)>,
    limits: DeviceLimits,
    /// Virtual-memory mode with this granularity (its `arena.vm_*` keys are in `pairs`).
    vm: Option<u64>,
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        8 => 1u64..=4096,
        5 => 4097u64..=(1 << 20),
        3 => (1u64 << 20)..=(64 << 20),
        1 => (1u64 << 28)..=(1 << 36),
        1 => (u64::MAX - 512)..=u64::MAX,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (size(), proptest::option::of(0..STREAMS), 0..THREADS)
            .prop_map(|(size, stream, thread)| Op::Alloc { size, stream, thread }),
        1 => (size(), 0..THREADS).prop_map(|(size, thread)| Op::Reserve(size, thread)),
        8 => (any::<usize>(), 0..THREADS).prop_map(|(pick, thread)| Op::Free(pick, thread)),
        1 => (any::<usize>(), 0u8..4).prop_map(|(pick, kind)| Op::FreeBogus { pick, kind }),
        1 => Just(Op::Shrink),
        2 => (0..STREAMS, 0..STREAMS).prop_map(|(from, to)| Op::Sync { from, to }),
        1 => (0..STREAMS).prop_map(Op::Reset),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (
            0u8..2,
            1u64..=(16 << 20),
            1u64..=(256 << 20),
            1u64..=(16 << 20),
            1u64..=(4u64 << 30),
        ),
        proptest::option::of(1u64..=(8u64 << 30)),
        (1u64 << 20)..=(16u64 << 30),
        proptest::option::of(4096u64..=(4u64 << 30)),
    )
        .prop_map(
            |((strategy, initial, dead, growth, p2), max_mem, total, max_alloc)| {
                let mut pairs = vec![
                    ("arena.extend_strategy".to_string(), strategy.to_string()),
                    (
                        "arena.initial_chunk_size_bytes".to_string(),
                        initial.min(i32::MAX as u64).to_string(),
                    ),
                    (
                        "arena.max_dead_bytes_per_chunk".to_string(),
                        dead.min(i32::MAX as u64).to_string(),
                    ),
                    (
                        "arena.initial_growth_chunk_size_bytes".to_string(),
                        growth.min(i32::MAX as u64).to_string(),
                    ),
                    (
                        "arena.max_power_of_two_extend_bytes".to_string(),
                        p2.to_string(),
                    ),
                ];
                if let Some(m) = max_mem {
                    pairs.push(("arena.max_mem".to_string(), m.to_string()));
                }
                let limits = DeviceLimits {
                    total_memory: total,
                    max_allocation: max_alloc.unwrap_or(u64::MAX),
                };
                Setup {
                    pairs,
                    limits,
                    vm: None,
                }
            },
        )
}

/// A setup in virtual-memory mode: a granularity of 4 KiB to 2 MiB, pages of 1 to 4
/// granules, ranges of a few pages to many (so requests also need new ranges), a headroom
/// from none to none needed, and no threshold or one from 0 up.
fn vm_setup() -> impl Strategy<Value = Setup> {
    (
        setup(),
        prop_oneof![Just(4096u64), Just(65536), Just(1 << 20), Just(2 << 20)],
        0u32..3,
        prop_oneof![Just(0u64), (1u64..=64).prop_map(|p| p << 20)],
        prop_oneof![Just(0u64), Just(2), Just(10), Just(1000)],
        proptest::option::of(prop_oneof![Just(0u64), 1u64..=(64 << 20)]),
    )
        .prop_map(
            |(mut setup, granularity, shift, reserve, headroom, threshold)| {
                let page = granularity << shift;
                // The default range is the device's size: keep its page table small.
                let reserve = if reserve == 0 && setup.limits.total_memory / page > (1 << 16) {
                    page << 12
                } else {
                    reserve
                };
                setup.pairs.extend([
                    ("arena.vm_page_size_bytes".to_string(), page.to_string()),
                    ("arena.vm_reserve_bytes".to_string(), reserve.to_string()),
                    (
                        "arena.vm_peak_headroom_percent".to_string(),
                        headroom.to_string(),
                    ),
                ]);
                if let Some(t) = threshold {
                    setup
                        .pairs
                        .push(("arena.vm_unmap_threshold_bytes".to_string(), t.to_string()));
                }
                setup.vm = Some(granularity);
                setup
            },
        )
}

#[derive(Debug, Clone, Copy)]
struct Live {
    addr: u64,
    requested: u64,
    reserve: bool,
    /// Stream index + 1 the chunk belongs to, 0 for none.
    stream: usize,
    sync_id: u64,
}

/// Memory a stream freed: another stream may only get it back under the sync-id rule.
#[derive(Debug, Clone, Copy)]
struct Freed {
    start: u64,
    end: u64,
    stream: usize,
    sync_id: u64,
}

/// A thread that makes the calls sent to it, one at a time.
struct Worker {
    tx: Sender<Box<dyn FnOnce() + Send>>,
    handle: std::thread::JoinHandle<()>,
}

impl Worker {
    fn new() -> Self {
        let (tx, rx) = channel::<Box<dyn FnOnce() + Send>>();
        let handle = std::thread::spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        });
        Worker { tx, handle }
    }
}

struct Model {
    arena: Arc<Arena<VirtualAllocator>>,
    /// Where calls are made: none, this thread; else the op's thread among these.
    workers: Vec<Worker>,
    streams: Vec<Stream>,
    live: Vec<Live>,
    freed: Vec<Freed>,
    vm: bool,
}

fn regions_removed(before: &MemoryLog, after: &MemoryLog) -> Vec<(u64, u64, u64)> {
    before
        .regions
        .iter()
        .filter(|r| !after.regions.iter().any(|a| a.id == r.id))
        .map(|r| (r.id, r.base, r.size))
        .collect()
}

impl Model {
    /// Runs `f` on the arena from the op's `thread` (or here, without workers).
    fn on<T: Send + 'static>(
        &self,
        thread: usize,
        f: impl FnOnce(&Arena<VirtualAllocator>) -> T + Send + 'static,
    ) -> T {
        let Some(w) = self.workers.get(thread % self.workers.len().max(1)) else {
            return f(&self.arena);
        };
        let (tx, rx) = channel();
        let arena = self.arena.clone();
        w.tx.send(Box::new(move || {
            let _ = tx.send(f(&arena));
        }))
        .expect("worker alive");
        rx.recv().expect("worker answered")
    }

    fn may_reuse(&self, consumer: usize, f: &Freed) -> bool {
        f.stream == consumer
            || f.stream == 0
            || (consumer != 0
                && f.sync_id
                    < self.streams[consumer - 1].last_wait_sync_id(self.streams[f.stream - 1].id()))
    }

    /// Forgets freed records inside regions that went back to the raw allocator.
    fn drop_released(&mut self, released: &[(u64, u64, u64)]) {
        self.freed.retain(|f| {
            !released
                .iter()
                .any(|&(_, base, size)| f.start >= base && f.end <= base + size)
        });
    }

    fn claim(&mut self, addr: u64, len: u64, consumer: usize) -> Result<(), String> {
        let end = addr + len;
        let mut kept = Vec::new();
        for f in std::mem::take(&mut self.freed) {
            if f.end <= addr || f.start >= end {
                kept.push(f);
                continue;
            }
            if !self.may_reuse(consumer, &f) {
                return Err(format!(
                    "stream {consumer} got [{addr:#x}, {end:#x}) overlapping {f:?} without a wait"
                ));
            }
            if f.stream != consumer && f.stream != 0 {
                count(&TALLY.cross_stream_reuse);
            }
            if f.start < addr {
                kept.push(Freed { end: addr, ..f });
            }
            if f.end > end {
                kept.push(Freed { start: end, ..f });
            }
        }
        self.freed = kept;
        Ok(())
    }

    /// Virtual-memory mode: forgets freed records (or their parts) in pages that are no longer
    /// mapped: that memory went back to the device.
    fn drop_unmapped(&mut self, log: &MemoryLog) {
        if !self.vm {
            return;
        }
        let extents: Vec<(u64, u64)> = log
            .regions
            .iter()
            .map(|r| (r.base, r.base + r.size))
            .collect();
        let mut kept = Vec::new();
        for f in std::mem::take(&mut self.freed) {
            for &(lo, hi) in &extents {
                let (s, e) = (f.start.max(lo), f.end.min(hi));
                if s < e {
                    kept.push(Freed {
                        start: s,
                        end: e,
                        ..f
                    });
                }
            }
        }
        self.freed = kept;
    }

    /// Virtual-memory mode: a failed call may have unmapped wholly free pages (decision 7),
    /// nothing else.
    fn check_unchanged_vm(&self, before: &MemoryLog, after: &MemoryLog) -> Result<(), String> {
        if after.live_chunks() != before.live_chunks() || after.reserves != before.reserves {
            return Err("a failed call changed live memory".into());
        }
        let (b, a) = (before.stats, after.stats);
        let same = |s: cuda_arena_core::AllocatorStats| {
            (
                s.in_use,
                s.requested_in_use,
                s.num_allocs,
                s.num_reserves,
                s.max_in_use,
            )
        };
        if same(b) != same(a) || a.total_allocated > b.total_allocated {
            return Err(format!(
                "a failed call changed stats beyond unmapping free pages: {b:?} → {a:?}"
            ));
        }
        if a.total_allocated < b.total_allocated {
            count(&TALLY.released_on_failure_path);
            if a.num_arena_shrinkages <= b.num_arena_shrinkages {
                return Err("pages went back on a failed call without a shrinkage".into());
            }
        } else if before != after {
            return Err("a failed call changed the arena".into());
        }
        Ok(())
    }

    /// Virtual-memory mode: every mapping (what one map call mapped; only whole ones can be
    /// unmapped) has a chunk in use on one of its pages.
    fn no_free_mapping_mapped(log: &MemoryLog, mappings: &[(u64, u64)]) -> Result<(), String> {
        for &(at, len) in mappings {
            let used = log.regions.iter().any(|r| {
                r.chunks
                    .iter()
                    .any(|c| c.in_use && c.addr < at + len && at < c.addr + c.size)
            });
            if !used {
                return Err(format!(
                    "the free mapping at {at:#x} (+{len}) is still mapped"
                ));
            }
        }
        Ok(())
    }

    /// Checks a failed call left everything as it was, but for decision 7's release of
    /// wholly free regions.
    fn check_unchanged(&self, before: &MemoryLog, after: &MemoryLog) -> Result<(), String> {
        if self.vm {
            return self.check_unchanged_vm(before, after);
        }
        let removed = regions_removed(before, after);
        if removed.is_empty() {
            return if before == after {
                Ok(())
            } else {
                Err("a failed call changed the arena".into())
            };
        }
        for &(id, _, _) in &removed {
            let r = before
                .regions
                .iter()
                .find(|r| r.id == id)
                .expect("from before");
            if r.chunks.iter().any(|c| c.in_use) {
                return Err(format!(
                    "a failed call released region {id} with live chunks"
                ));
            }
        }
        if after
            .regions
            .iter()
            .any(|a| !before.regions.iter().any(|b| b == a))
        {
            return Err("a failed call left a new or changed region".into());
        }
        let k = removed.len() as u64;
        count(&TALLY.released_on_failure_path);
        let bytes: u64 = removed.iter().map(|r| r.2).sum();
        let mut expect = before.stats;
        expect.num_arena_extensions -= k;
        expect.num_arena_shrinkages += k;
        expect.total_allocated -= bytes;
        if after.stats != expect || after.reserves != before.reserves {
            return Err(format!(
                "a failed call changed stats beyond releasing regions: {:?} vs {expect:?}",
                after.stats
            ));
        }
        Ok(())
    }

    fn check(&self, log: &MemoryLog) -> Result<(), String> {
        self.arena.check_invariants()?;
        let mut spans = Vec::new();
        let (mut in_use, mut requested) = (0, 0);
        for l in &self.live {
            let allocated = self
                .arena
                .allocated_size(l.addr)
                .map_err(|e| format!("live {l:?}: {e}"))?;
            if self
                .arena
                .requested_size(l.addr)
                .map_err(|e| e.to_string())?
                != l.requested
            {
                return Err(format!("requested size of {l:?} differs"));
            }
            if l.addr % 256 != 0 {
                return Err(format!("{l:?} is not 256-aligned"));
            }
            if !l.reserve
                && !log
                    .regions
                    .iter()
                    .any(|r| l.addr >= r.base && l.addr + allocated <= r.base + r.size)
            {
                return Err(format!("{l:?} lies outside every region"));
            }
            spans.push((l.addr, allocated));
            in_use += allocated;
            requested += l.requested;
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!(
                    "allocations {:#x}+{} and {:#x} overlap",
                    w[0].0, w[0].1, w[1].0
                ));
            }
        }
        let s = self.arena.stats();
        let raw = self.arena.raw().raw_stats();
        if s.in_use != in_use || s.requested_in_use != requested {
            return Err(format!(
                "InUse {} / RequestedInUse {} but live adds up to {in_use} / {requested}",
                s.in_use, s.requested_in_use
            ));
        }
        if s.total_allocated != raw.raw_bytes_outstanding {
            return Err(format!(
                "TotalAllocated {} but the raw allocator has {} outstanding",
                s.total_allocated, raw.raw_bytes_outstanding
            ));
        }
        let mut chunk_allocs: Vec<(u64, u64)> = self
            .live
            .iter()
            .filter(|l| !l.reserve)
            .map(|l| (l.addr, l.requested))
            .collect();
        chunk_allocs.sort_unstable();
        let logged: Vec<(u64, u64)> = log.live_chunks().iter().map(|&(a, _, r)| (a, r)).collect();
        if chunk_allocs != logged {
            return Err("the memory log's live chunks differ from the model's".into());
        }
        Ok(())
    }

    /// How many times the arena has waited for the device (virtual-memory mode).
    fn device_waits(&self) -> u64 {
        self.arena
            .virtual_memory()
            .map_or(0, |v| v.synchronizations())
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        count(&TALLY.ops);
        let before = self.arena.memory_log();
        match *op {
            Op::Alloc {
                size,
                stream,
                thread,
            } => {
                let consumer = stream.map_or(0, |s| s + 1);
                let on = stream.map(|s| self.streams[s].clone());
                let waits = self.device_waits();
                let result = self.on(thread, move |a| match on {
                    Some(s) => a.alloc_on_stream(size, &s),
                    None => a.alloc(size),
                });
                let after = self.arena.memory_log();
                match result {
                    Ok(None) if size == 0 => self.check_unchanged(&before, &after)?,
                    Ok(Some(addr)) if size > 0 => {
                        count(&TALLY.allocs);
                        if self.device_waits() != waits {
                            // The arena waited for the device: every free before is past,
                            // for every stream.
                            self.freed.clear();
                        }
                        self.drop_released(&regions_removed(&before, &after));
                        let allocated =
                            self.arena.allocated_size(addr).map_err(|e| e.to_string())?;
                        self.claim(addr, allocated, consumer)?;
                        let sync_id = stream.map_or(0, |s| self.streams[s].sync_id());
                        self.live.push(Live {
                            addr,
                            requested: size,
                            reserve: false,
                            stream: consumer,
                            sync_id,
                        });
                    }
                    Err(e) if e.code() == "ERR_ARENA_OUT_OF_MEMORY" => {
                        count(&TALLY.out_of_memory);
                        self.check_unchanged(&before, &after)?;
                        self.drop_released(&regions_removed(&before, &after));
                    }
                    other => return Err(format!("alloc({size}) gave {other:?}")),
                }
            }
            Op::Reserve(size, thread) => {
                let result = self.on(thread, move |a| a.reserve(size));
                let after = self.arena.memory_log();
                match result {
                    Ok(None) if size == 0 => self.check_unchanged(&before, &after)?,
                    Ok(Some(addr)) if size > 0 => {
                        self.drop_released(&regions_removed(&before, &after));
                        self.live.push(Live {
                            addr,
                            requested: size,
                            reserve: true,
                            stream: 0,
                            sync_id: 0,
                        });
                    }
                    Err(e) if e.code() == "ERR_ARENA_OUT_OF_MEMORY" => {
                        count(&TALLY.out_of_memory);
                        self.check_unchanged(&before, &after)?;
                        self.drop_released(&regions_removed(&before, &after));
                    }
                    other => return Err(format!("reserve({size}) gave {other:?}")),
                }
            }
            Op::Free(pick, thread) => {
                if self.live.is_empty() {
                    return Ok(());
                }
                let l = self.live.swap_remove(pick % self.live.len());
                let allocated = self
                    .arena
                    .allocated_size(l.addr)
                    .map_err(|e| e.to_string())?;
                let addr = l.addr;
                self.on(thread, move |a| a.free(addr))
                    .map_err(|e| format!("free of live {l:?}: {e}"))?;
                if !l.reserve {
                    self.freed.push(Freed {
                        start: l.addr,
                        end: l.addr + allocated,
                        stream: l.stream,
                        sync_id: l.sync_id,
                    });
                }
            }
            Op::FreeBogus { pick, kind } => {
                let addr = match (kind, self.live.is_empty()) {
                    (0 | 3, false) => {
                        let l = self.live[pick % self.live.len()];
                        l.addr + 1 + (pick as u64 % 255)
                    }
                    (1, _) => match self.freed.get(pick % self.freed.len().max(1)) {
                        Some(f) if !self.live.iter().any(|l| l.addr == f.start) => f.start,
                        _ => 0x1000,
                    },
                    _ => 0x1000 + (pick as u64 % 1000) * 256,
                };
                let result = self.arena.free(addr);
                count(&TALLY.bogus_frees);
                if result.as_ref().map_err(|e| e.code()) != Err("ERR_ARENA_UNKNOWN_POINTER") {
                    return Err(format!(
                        "free({addr:#x}) of a bogus address gave {result:?}"
                    ));
                }
                self.check_unchanged(&before, &self.arena.memory_log())?;
            }
            Op::Shrink => {
                self.arena.shrink().map_err(|e| e.to_string())?;
                let after = self.arena.memory_log();
                if after
                    .regions
                    .iter()
                    .any(|r| r.chunks.iter().all(|c| !c.in_use))
                {
                    return Err("shrink left a wholly free region".into());
                }
                if let Some(vm) = self.arena.virtual_memory() {
                    Self::no_free_mapping_mapped(&after, &vm.mappings())?;
                }
                if after.live_chunks() != before.live_chunks() {
                    return Err("shrink changed live chunks".into());
                }
                self.drop_released(&regions_removed(&before, &after));
            }
            Op::Sync { from, to } => {
                let ev = self.streams[from].record();
                self.streams[to].wait(&ev);
            }
            Op::Reset(s) => {
                self.arena
                    .reset_chunks_using_stream(&self.streams[s])
                    .map_err(|e| e.to_string())?;
                let after = self.arena.memory_log();
                if after.live_chunks() != before.live_chunks() || after.stats != before.stats {
                    return Err("reset changed live chunks or stats".into());
                }
                for l in self.live.iter_mut().filter(|l| l.stream == s + 1) {
                    l.stream = 0;
                }
                self.freed.retain(|f| f.stream != s + 1);
            }
        }
        let log = self.arena.memory_log();
        if self.vm {
            let gone = before
                .stats
                .total_allocated
                .saturating_sub(log.stats.total_allocated);
            TALLY.vm_bytes_unmapped.fetch_add(gone, Ordering::Relaxed);
        }
        self.drop_unmapped(&log);
        self.check(&log)
    }

    fn finish(&mut self) -> Result<(), String> {
        for l in std::mem::take(&mut self.live) {
            if l.reserve {
                self.live.push(l);
            } else {
                self.arena.free(l.addr).map_err(|e| e.to_string())?;
            }
        }
        self.arena.shrink().map_err(|e| e.to_string())?;
        let reserved: u64 = self.live.iter().map(|l| l.requested).sum();
        let outstanding = self.arena.raw().raw_stats().raw_bytes_outstanding;
        if outstanding != reserved || self.arena.stats().num_arena_extensions != 0 {
            return Err(format!("after freeing all and shrinking {outstanding} bytes are outstanding, reserves are {reserved}"));
        }
        if let Some(vm) = self.arena.virtual_memory() {
            if vm.mapped_bytes() != 0 {
                return Err(format!(
                    "{} bytes mapped after freeing all and shrinking",
                    vm.mapped_bytes()
                ));
            }
        }
        for l in std::mem::take(&mut self.live) {
            self.arena.free(l.addr).map_err(|e| e.to_string())?;
        }
        if self.arena.raw().raw_stats().raw_bytes_outstanding != 0 {
            return Err("bytes outstanding after freeing reserves".into());
        }
        Ok(())
    }
}

/// Runs one case; `threads` 0 makes every call on this thread.
fn run_case(setup: &Setup, ops: &[Op], threads: usize) -> Result<(), String> {
    let config = ArenaConfig::from_pairs(setup.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| format!("generated config rejected: {e}"))?;
    let arena = match setup.vm {
        None => {
            Arena::new(VirtualAllocator::new(setup.limits), config).map_err(|e| e.to_string())?
        }
        Some(granularity) => {
            count(&TALLY.vm_cases);
            let raw = VirtualAllocator::new(setup.limits).with_granularity(granularity);
            let vm: std::sync::Arc<dyn VirtualMemory> = std::sync::Arc::new(raw.vm());
            Arena::with_virtual_memory(raw, vm, config).map_err(|e| e.to_string())?
        }
    };
    let mut model = Model {
        arena: Arc::new(arena),
        workers: (0..threads).map(|_| Worker::new()).collect(),
        streams: (0..STREAMS).map(|_| Stream::new()).collect(),
        live: Vec::new(),
        freed: Vec::new(),
        vm: setup.vm.is_some(),
    };
    let r = (|| {
        for (i, op) in ops.iter().enumerate() {
            model.apply(op).map_err(|e| format!("op {i} {op:?}: {e}"))?;
        }
        model.finish()
    })();
    for w in std::mem::take(&mut model.workers) {
        drop(w.tx);
        w.handle
            .join()
            .map_err(|_| "a worker panicked".to_string())?;
    }
    r
}

#[test]
fn random_op_sequences_keep_every_invariant() {
    run_many("MODEL_CASES", 10_000, 0);
}

#[test]
fn random_op_sequences_on_four_threads_keep_every_invariant() {
    run_many("MODEL_THREAD_CASES", 2_000, THREADS);
}

fn run_many(env: &str, default_cases: u32, threads: usize) {
    let cases = std::env::var(env)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    // A third of the cases in virtual-memory mode.
    let strategy = (
        prop_oneof![2 => setup(), 1 => vm_setup()],
        proptest::collection::vec(op(), 1..120),
    );
    let result = runner.run(&strategy, |(setup, ops)| {
        run_case(&setup, &ops, threads).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    println!(
        "{cases} random sequences on {} passed; what the runs so far exercised (shrinking \
         included): {TALLY:?}",
        if threads == 0 {
            "one thread".to_string()
        } else {
            format!("{threads} threads")
        }
    );
}
