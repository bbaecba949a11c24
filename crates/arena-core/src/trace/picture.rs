//! What an allocator's memory looked like at every operation of a replay, for the
//! `cuda-arena replay --html` page: each allocation with its address, size and life, the
//! regions with theirs, the free chunks a stream owns with theirs, and the bytes held
//! wherever they change. State `k` is the allocator after the trace's first `k` operations.
//!
//! Allocations come from what the replay's calls returned, regions and held bytes from the
//! allocator's own stats and memory log (read again whenever the bytes held change, which is
//! how regions come and go). Free chunks are what a region's bytes outside the in-use chunks
//! are; those a stream owns are followed between memory-log reads by asking the allocator,
//! after each allocation and free, for the chunks around it ([`Allocator::chunks_from`]):
//! the picture knows no rule of the arena's. The replay checks what it follows against the
//! allocator's memory log at evenly spaced states and at every state asked for
//! ([`PictureOptions`]): a state where they differ is counted and the chunks are read again.

use super::{ReplayObserver, Replayed, TraceStreams};
use crate::allocators::allocator::Allocator;
use crate::streams::stream::StreamId;
use crate::types::error::Result;
use crate::types::memory_log::{ChunkLog, MemoryLog};
use std::collections::{BTreeMap, HashMap};

/// One allocation (or reserve) of the trace, in trace order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocSpan {
    /// The first state in which it is live (its operation's index + 1).
    pub born: u64,
    /// The first state in which it is no longer live; `None` while live at the end.
    pub died: Option<u64>,
    /// Where it went (0 when it failed or asked for 0 bytes).
    pub addr: u64,
    /// Bytes the allocator handed out for it (its chunk's size; 0 when it failed).
    pub size: u64,
    /// Bytes the trace asked for.
    pub requested: u64,
    /// Trace stream number, 0 for none.
    pub stream: u32,
    /// Whether it was a reserve.
    pub reserve: bool,
    /// Whether the allocator refused it for lack of memory (then `died == Some(born)`).
    pub failed: bool,
}

/// One region (or mapped extent) over the states it existed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpan {
    /// The first state it is in.
    pub born: u64,
    /// The first state it is not in; `None` while there at the end.
    pub died: Option<u64>,
    /// The allocator's id for it.
    pub id: u64,
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub size: u64,
}

/// A free chunk that a stream owns (tagged with it), over the states it existed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamFreeSpan {
    /// The first state it is in.
    pub born: u64,
    /// The first state it is not in (taken, merged or split); `None` at the end.
    pub died: Option<u64>,
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// The trace stream number that owns it.
    pub stream: u32,
}

/// What [`PictureRecorder`] records beyond the allocations.
#[derive(Debug, Clone, Default)]
pub struct PictureOptions {
    /// Follow regions and the free chunks streams own (an arena). Leave it off for an
    /// allocator without regions (a memory pool).
    pub layout: bool,
    /// States to take the allocator's own memory log at (0 … the trace's length).
    pub memory_logs_at: Vec<u64>,
    /// Check the followed chunks against the allocator's memory log every so many states
    /// (0: only at `memory_logs_at`).
    pub check_every: u64,
}

/// The picture of one replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Picture {
    /// Operations replayed: the last state.
    pub ops: u64,
    /// Every alloc and reserve, in trace order.
    pub allocs: Vec<AllocSpan>,
    /// Every region that existed (empty without `layout`).
    pub regions: Vec<RegionSpan>,
    /// Every free chunk a stream owned (empty without `layout`).
    pub stream_free: Vec<StreamFreeSpan>,
    /// `(state, bytes held)`: at state 0 and at every state where it changed.
    pub held: Vec<(u64, u64)>,
    /// The most bytes held.
    pub peak_held: u64,
    /// The first state that held them.
    pub peak_held_at: u64,
    /// The allocator's memory log at each state asked for, streams given as trace stream
    /// numbers, by state.
    pub memory_logs: Vec<(u64, MemoryLog)>,
    /// How many times the followed chunks were checked against the memory log.
    pub checks: u64,
    /// How many times the followed chunks differed from the memory log or lost track of a
    /// chunk (each time, they were read again from the allocator).
    pub mismatches: u64,
    /// The first [`MAX_MISMATCHES_KEPT`] states where that happened.
    pub mismatched_at: Vec<u64>,
}

/// How many states of mismatches a [`Picture`] keeps.
pub const MAX_MISMATCHES_KEPT: usize = 16;

/// A chunk of the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    size: u64,
    in_use: bool,
    /// The allocator's stream id it is tagged with (0: none).
    tag: StreamId,
    region: u64,
    born: u64,
}

/// Records a [`Picture`] as a [`ReplayObserver`] of a replay; [`PictureRecorder::finish`]
/// gives it.
#[derive(Debug)]
pub struct PictureRecorder {
    options: PictureOptions,
    picture: Picture,
    /// Trace stream number → the allocator's stream id, and back.
    ids: HashMap<u32, StreamId>,
    numbers: HashMap<StreamId, u32>,
    /// The record of the allocation in each live slot.
    slots: Vec<usize>,
    /// Chunks by address, while following regions.
    chunks: BTreeMap<u64, Chunk>,
    /// Open regions: index into `picture.regions`.
    open_regions: Vec<usize>,
    /// What the last look said: bytes held, extensions, shrinkages (the stats) and the
    /// allocator's layout changes.
    last: (u64, u64, u64, u64),
}

impl PictureRecorder {
    /// A recorder that records what `options` asks for.
    pub fn new(mut options: PictureOptions) -> Self {
        options.memory_logs_at.sort_unstable();
        options.memory_logs_at.dedup();
        PictureRecorder {
            options,
            picture: Picture::default(),
            ids: HashMap::new(),
            numbers: HashMap::new(),
            slots: Vec::new(),
            chunks: BTreeMap::new(),
            open_regions: Vec::new(),
            last: (0, 0, 0, 0),
        }
    }

    /// The picture, once the replay is done.
    pub fn finish(mut self) -> Picture {
        // Free chunks a stream still owns at the end.
        let open: Vec<StreamFreeSpan> = self
            .chunks
            .iter()
            .filter(|(_, c)| !c.in_use && c.tag != 0)
            .map(|(&addr, c)| StreamFreeSpan {
                born: c.born,
                died: None,
                addr,
                size: c.size,
                stream: self.number(c.tag),
            })
            .collect();
        self.picture.stream_free.extend(open);
        self.picture
    }

    /// Counts a mismatch at `state` and reads the chunks again from the allocator.
    fn mismatched(&mut self, state: u64, log: &MemoryLog) {
        self.picture.mismatches += 1;
        if self.picture.mismatched_at.len() < MAX_MISMATCHES_KEPT {
            self.picture.mismatched_at.push(state);
        }
        self.resync(state, log);
    }

    fn number(&self, tag: StreamId) -> u32 {
        // A tag the replay's streams did not make cannot occur; u32::MAX marks one anyway.
        self.numbers.get(&tag).copied().unwrap_or(u32::MAX)
    }

    /// Whether the bytes held, the regions or the free chunks beyond a call's own
    /// ([`Allocator::layout_changes`]) changed since the last look.
    fn regions_changed(&self, allocator: &dyn Allocator) -> (bool, (u64, u64, u64, u64)) {
        let st = allocator.stats();
        let now = (
            st.total_allocated,
            st.num_arena_extensions,
            st.num_arena_shrinkages,
            allocator.layout_changes(),
        );
        (now != self.last, now)
    }

    /// After state `state`: bytes held, regions and logs. `changed` and `now` are what
    /// [`Self::regions_changed`] said.
    fn observe(
        &mut self,
        state: u64,
        changed: bool,
        now: (u64, u64, u64, u64),
        allocator: &dyn Allocator,
    ) {
        if state == 0 || now.0 != self.last.0 {
            self.picture.held.push((state, now.0));
            if now.0 > self.picture.peak_held || state == 0 {
                self.picture.peak_held = now.0;
                self.picture.peak_held_at = state;
            }
        }
        let changed = state == 0 || changed;
        self.last = now;
        let wanted = self.options.memory_logs_at.binary_search(&state).is_ok();
        let check = self.options.layout
            && !changed
            && (wanted
                || (self.options.check_every > 0
                    && state.is_multiple_of(self.options.check_every)));
        if !(wanted || check || (self.options.layout && changed)) {
            return;
        }
        let log = allocator.memory_log();
        if self.options.layout {
            if check {
                self.picture.checks += 1;
                if !self.matches(&log) {
                    self.mismatched(state, &log);
                }
            } else {
                self.resync(state, &log);
            }
        }
        if wanted {
            let mut log = log;
            for c in log.regions.iter_mut().flat_map(|r| r.chunks.iter_mut()) {
                c.stream = c.stream.map(|s| u64::from(self.number(s)));
            }
            self.picture.memory_logs.push((state, log));
        }
    }

    /// Whether the mirror is what `log` says.
    fn matches(&self, log: &MemoryLog) -> bool {
        let regions = self
            .open_regions
            .iter()
            .map(|&i| &self.picture.regions[i])
            .map(|r| (r.id, r.base, r.size));
        if !regions.eq(log.regions.iter().map(|r| (r.id, r.base, r.size))) {
            return false;
        }
        let ours = self
            .chunks
            .iter()
            .map(|(&addr, c)| (addr, c.size, c.in_use, c.tag, c.region));
        let theirs = log.regions.iter().flat_map(|r| {
            r.chunks
                .iter()
                .map(move |c| (c.addr, c.size, c.in_use, c.stream.unwrap_or(0), r.id))
        });
        ours.eq(theirs)
    }

    /// Takes regions and chunks from `log` at `state`, keeping the records of those that
    /// did not change.
    fn resync(&mut self, state: u64, log: &MemoryLog) {
        let mut open = Vec::with_capacity(log.regions.len());
        let mut still = vec![false; self.open_regions.len()];
        for r in &log.regions {
            let same = self.open_regions.iter().position(|&i| {
                let o = &self.picture.regions[i];
                (o.id, o.base, o.size) == (r.id, r.base, r.size)
            });
            match same {
                Some(k) => {
                    still[k] = true;
                    open.push(self.open_regions[k]);
                }
                None => {
                    open.push(self.picture.regions.len());
                    self.picture.regions.push(RegionSpan {
                        born: state,
                        died: None,
                        id: r.id,
                        base: r.base,
                        size: r.size,
                    });
                }
            }
        }
        for (k, &i) in self.open_regions.iter().enumerate() {
            if !still[k] {
                self.picture.regions[i].died = Some(state);
            }
        }
        self.open_regions = open;
        let mut old = std::mem::take(&mut self.chunks);
        for r in &log.regions {
            for c in &r.chunks {
                let mut chunk = Chunk {
                    size: c.size,
                    in_use: c.in_use,
                    tag: c.stream.unwrap_or(0),
                    region: r.id,
                    born: state,
                };
                if let Some(o) = old.remove(&c.addr) {
                    if (Chunk {
                        born: o.born,
                        ..chunk
                    }) == o
                    {
                        chunk.born = o.born;
                    } else {
                        self.ended(c.addr, &o, state);
                    }
                }
                self.chunks.insert(c.addr, chunk);
            }
        }
        for (addr, o) in old {
            self.ended(addr, &o, state);
        }
    }

    /// Chunk `c` at `addr` is gone at `state`: a free one a stream owned is recorded.
    fn ended(&mut self, addr: u64, c: &Chunk, state: u64) {
        if !c.in_use && c.tag != 0 {
            self.picture.stream_free.push(StreamFreeSpan {
                born: c.born,
                died: Some(state),
                addr,
                size: c.size,
                stream: self.number(c.tag),
            });
        }
    }

    /// After an operation at `addr` (an allocation there, or the free of the chunk there):
    /// reads from the allocator the chunks from the last in-use chunk below `addr` in its
    /// region (or the region's first chunk) through the first in-use chunk past `addr`, and
    /// takes them in place of the mirror's, so splits and merges are the allocator's own. False
    /// when the mirror has no chunk holding `addr`, the allocator no chunk where the mirror
    /// has one, or their chunks part at the end of that stretch.
    fn follow(&mut self, addr: u64, state: u64, allocator: &dyn Allocator) -> bool {
        let Some((&at, &holder)) = self.chunks.range(..=addr).next_back() else {
            return false;
        };
        if addr - at >= holder.size {
            return false;
        }
        let region = holder.region;
        let mut anchor = at;
        for (&a, c) in self.chunks.range(..addr).rev() {
            if c.region != region {
                break;
            }
            anchor = a;
            if c.in_use {
                break;
            }
        }
        let mut fresh = Vec::new();
        let mut from = anchor;
        loop {
            let Some(run) = allocator.chunks_from(from) else {
                return false;
            };
            let ends_at_addr = run.last().is_some_and(|c| c.in_use && c.addr == addr);
            // The run from `addr` starts with the chunk this one ended with.
            fresh.pop_if(|c: &mut ChunkLog| c.addr == from);
            fresh.extend(run);
            if !ends_at_addr || from == addr {
                break;
            }
            from = addr;
        }
        let Some(end) = fresh.last().map(|c| c.addr + c.size) else {
            return false;
        };
        let old: Vec<(u64, Chunk)> = self
            .chunks
            .range(anchor..end)
            .map(|(&a, &c)| (a, c))
            .collect();
        if old.last().is_some_and(|(a, c)| a + c.size != end) {
            return false;
        }
        let mut old = old.into_iter().peekable();
        for c in fresh {
            let chunk = Chunk {
                size: c.size,
                in_use: c.in_use,
                tag: c.stream.unwrap_or(0),
                region,
                born: state,
            };
            while let Some((a, o)) = old.next_if(|&(a, _)| a < c.addr) {
                self.chunks.remove(&a);
                self.ended(a, &o, state);
            }
            match old.next_if(|&(a, _)| a == c.addr) {
                // Unchanged: it keeps its record.
                Some((_, o))
                    if (Chunk {
                        born: o.born,
                        ..chunk
                    }) == o => {}
                Some((a, o)) => {
                    self.ended(a, &o, state);
                    self.chunks.insert(c.addr, chunk);
                }
                None => {
                    self.chunks.insert(c.addr, chunk);
                }
            }
        }
        for (a, o) in old {
            self.chunks.remove(&a);
            self.ended(a, &o, state);
        }
        true
    }
}

impl ReplayObserver for PictureRecorder {
    fn start(&mut self, allocator: &dyn Allocator, streams: &TraceStreams) -> Result<()> {
        for &(number, ref stream) in &streams.streams {
            self.ids.insert(number, stream.id());
            self.numbers.insert(stream.id(), number);
        }
        let (changed, now) = self.regions_changed(allocator);
        self.observe(0, changed, now, allocator);
        Ok(())
    }

    fn replayed(&mut self, index: u64, what: Replayed, allocator: &dyn Allocator) -> Result<()> {
        let state = index + 1;
        // When regions came or went, the mirror is read again from the allocator below
        // rather than moved.
        let (changed, now) = self.regions_changed(allocator);
        let follow = self.options.layout && !changed;
        let mut lost = false;
        match what {
            Replayed::Alloc {
                slot,
                size,
                stream,
                reserve,
                addr,
            } => {
                let record = self.picture.allocs.len();
                let failed = addr.is_none();
                let addr = addr.unwrap_or(0);
                let chunk = match addr {
                    0 => 0,
                    a => allocator.allocated_size(a)?,
                };
                self.picture.allocs.push(AllocSpan {
                    born: state,
                    died: failed.then_some(state),
                    addr,
                    size: chunk,
                    requested: size,
                    stream,
                    reserve,
                    failed,
                });
                let slot = slot as usize;
                if self.slots.len() <= slot {
                    self.slots.resize(slot + 1, usize::MAX);
                }
                self.slots[slot] = record;
                if follow && chunk > 0 && !reserve {
                    lost = !self.follow(addr, state, allocator);
                }
            }
            Replayed::Free { slot, addr } => {
                if let Some(a) = self
                    .slots
                    .get(slot as usize)
                    .and_then(|&i| self.picture.allocs.get_mut(i))
                {
                    a.died = Some(state);
                    if follow && a.size > 0 && !a.reserve {
                        lost = !self.follow(addr, state, allocator);
                    }
                }
            }
            Replayed::Nothing => {}
        }
        if lost {
            let log = allocator.memory_log();
            self.mismatched(state, &log);
        }
        self.picture.ops = state;
        self.observe(state, changed, now, allocator);
        Ok(())
    }
}

impl Picture {
    /// The regions' chunks at `state` as the picture has them, as `(region id, addr, size,
    /// in use, stream)`: in-use chunks from the allocations, free chunks a stream owns from
    /// theirs, and every other byte of a region free and owned by none. For tests and the
    /// page's reader.
    pub fn chunks_at(&self, state: u64) -> Vec<(u64, u64, u64, bool, u32)> {
        let live = |born: u64, died: Option<u64>| born <= state && died.is_none_or(|d| state < d);
        let mut taken: Vec<(u64, u64, bool, u32)> = self
            .allocs
            .iter()
            .filter(|a| live(a.born, a.died) && a.size > 0 && !a.reserve)
            .map(|a| (a.addr, a.size, true, a.stream))
            .chain(
                self.stream_free
                    .iter()
                    .filter(|f| live(f.born, f.died))
                    .map(|f| (f.addr, f.size, false, f.stream)),
            )
            .collect();
        taken.sort_unstable();
        let mut regions: Vec<&RegionSpan> = self
            .regions
            .iter()
            .filter(|r| live(r.born, r.died))
            .collect();
        regions.sort_unstable_by_key(|r| r.base);
        let mut out = Vec::new();
        let mut next = taken.iter().peekable();
        for r in regions {
            let mut at = r.base;
            while let Some(&&(addr, size, in_use, stream)) = next.peek() {
                if addr >= r.base + r.size {
                    break;
                }
                next.next();
                if addr > at {
                    out.push((r.id, at, addr - at, false, 0));
                }
                out.push((r.id, addr, size, in_use, stream));
                at = addr + size;
            }
            if at < r.base + r.size {
                out.push((r.id, at, r.base + r.size - at, false, 0));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::synthetic::mixed_trace;
    use crate::trace::{replay_with, ReplayOptions, TraceOp};
    use crate::{AddressSpaceAllocator, Arena, ArenaConfig, Stream};

    fn arena(pairs: &[(&str, &str)]) -> Arena<AddressSpaceAllocator> {
        let config = ArenaConfig::from_pairs(pairs.iter().map(|&(k, v)| (k, v))).expect("config");
        Arena::new(AddressSpaceAllocator::default(), config).expect("arena")
    }

    /// The memory log's chunks at the moment, as `chunks_at` gives them.
    fn log_chunks(log: &MemoryLog) -> Vec<(u64, u64, u64, bool, u32)> {
        log.regions
            .iter()
            .flat_map(|r| {
                r.chunks.iter().map(move |c| {
                    let stream = c.stream.map_or(0, |s| s as u32);
                    (r.id, c.addr, c.size, c.in_use, stream)
                })
            })
            .collect()
    }

    /// Replays `trace` on `streams` streams with a picture whose memory logs are taken at
    /// every state; returns the picture.
    fn pictured(a: &dyn Allocator, trace: &[TraceOp], streams: usize) -> Picture {
        let streams: Vec<Stream> = (0..streams).map(|_| Stream::new()).collect();
        let mut rec = PictureRecorder::new(PictureOptions {
            layout: true,
            memory_logs_at: (0..=trace.len() as u64).collect(),
            check_every: 1,
        });
        replay_with(
            a,
            trace,
            &TraceStreams::numbered(&streams),
            ReplayOptions {
                observer: Some(&mut rec),
                ..ReplayOptions::default()
            },
        )
        .expect("replays");
        rec.finish()
    }

    /// A trace on `streams` streams (0: none): sizes 1 KiB … 4 MiB, every allocation on a
    /// random stream or none.
    fn streamed_trace(ops: usize, streams: u32, seed: u64) -> Vec<TraceOp> {
        let mut rng = crate::trace::synthetic::TraceRng::new(seed ^ 77);
        mixed_trace(ops, 1 << 10, 4 << 20, 60, seed)
            .into_iter()
            .map(|op| match op {
                TraceOp::Alloc { id, size, .. } if streams > 0 => TraceOp::Alloc {
                    id,
                    size,
                    stream: rng.below(u64::from(streams) + 1) as u32,
                },
                other => other,
            })
            .collect()
    }

    fn assert_every_state_matches_the_memory_log(p: &Picture) {
        assert!(!p.memory_logs.is_empty());
        for (state, log) in &p.memory_logs {
            assert_eq!(
                p.chunks_at(*state),
                log_chunks(log),
                "chunks at state {state}"
            );
        }
        assert_eq!((p.mismatches, &p.mismatched_at[..]), (0, &[][..]));
    }

    #[test]
    fn the_pictured_chunks_are_the_memory_log_at_every_state_without_streams() {
        let a = arena(&[]);
        let p = pictured(&a, &streamed_trace(3000, 0, 1), 0);
        assert_every_state_matches_the_memory_log(&p);
    }

    #[test]
    fn the_pictured_chunks_are_the_memory_log_at_every_state_with_streams() {
        for seed in 1..4 {
            let a = arena(&[("arena.extend_strategy", "1")]);
            let p = pictured(&a, &streamed_trace(3000, 3, seed), 3);
            assert!(
                !p.stream_free.is_empty(),
                "streams own free chunks (seed {seed})"
            );
            assert_every_state_matches_the_memory_log(&p);
        }
    }

    #[test]
    fn the_pictured_chunks_are_the_memory_log_at_every_state_with_virtual_memory() {
        // Mapped extents are the memory log's regions: they come and go with the pages, at
        // every free that passes a threshold of 0.
        for threshold in [None, Some("0")] {
            let mut pairs = vec![("arena.use_virtual_memory", "1")];
            pairs.extend(threshold.map(|t| ("arena.vm_unmap_threshold_bytes", t)));
            let config = ArenaConfig::from_pairs(pairs).expect("config");
            let backend = crate::SimBackend::new(crate::SimKind::Virtual, &[]);
            let selected = crate::devices::factory::selected_allocator(
                &backend,
                crate::MemoryKind::Cuda,
                0,
                &config,
            )
            .expect("allocator");
            let p = pictured(&*selected.allocator, &streamed_trace(3000, 2, 8), 2);
            assert!(
                p.regions.iter().filter(|r| r.died.is_some()).count() > 10,
                "extents are unmapped ({threshold:?})"
            );
            assert_every_state_matches_the_memory_log(&p);
        }
    }

    #[test]
    fn the_pictured_chunks_follow_regions_released_when_memory_runs_out() {
        // A budget of 24 MiB makes allocations fail, and failing ones release idle regions
        // (DESIGN decision 7) before the arena grows again.
        let a = arena(&[
            ("arena.max_mem", &(24u64 << 20).to_string()),
            ("arena.extend_strategy", "1"),
        ]);
        let p = pictured(&a, &streamed_trace(3000, 2, 9), 2);
        assert!(p.allocs.iter().any(|x| x.failed), "some allocations fail");
        assert!(
            p.regions.iter().any(|r| r.died.is_some()),
            "some regions are released"
        );
        assert_every_state_matches_the_memory_log(&p);
    }

    #[test]
    fn held_bytes_and_their_peak_are_the_stats_at_every_state() {
        let a = arena(&[("arena.extend_strategy", "1")]);
        let trace = streamed_trace(2000, 0, 5);
        let p = pictured(&a, &trace, 0);
        let mut peak = (0, 0);
        for (state, log) in &p.memory_logs {
            let held = p
                .held
                .iter()
                .take_while(|(s, _)| s <= state)
                .last()
                .map(|&(_, h)| h);
            assert_eq!(held, Some(log.stats.total_allocated), "state {state}");
            if log.stats.total_allocated > peak.0 {
                peak = (log.stats.total_allocated, *state);
            }
        }
        assert_eq!((p.peak_held, p.peak_held_at), peak);
    }

    #[test]
    fn live_allocations_add_up_to_the_bytes_in_use_and_requested_at_every_state() {
        let a = arena(&[]);
        let mut trace = streamed_trace(2000, 0, 6);
        trace.insert(
            10,
            TraceOp::Reserve {
                id: 1 << 40,
                size: 3 << 20,
            },
        );
        trace.insert(900, TraceOp::Free { id: 1 << 40 });
        let p = pictured(&a, &trace, 0);
        for (state, log) in &p.memory_logs {
            let live = p
                .allocs
                .iter()
                .filter(|x| x.born <= *state && x.died.is_none_or(|d| *state < d));
            let (size, requested) = live.fold((0, 0), |(s, r), x| (s + x.size, r + x.requested));
            assert_eq!(size, log.stats.in_use, "in use at state {state}");
            assert_eq!(
                requested, log.stats.requested_in_use,
                "requested at state {state}"
            );
        }
    }

    #[test]
    fn an_allocation_records_its_life_address_size_and_stream() {
        let a = arena(&[]);
        let trace = [
            TraceOp::Alloc {
                id: 1,
                size: 1000,
                stream: 0,
            },
            TraceOp::Alloc {
                id: 2,
                size: 3000,
                stream: 2,
            },
            TraceOp::Free { id: 1 },
            TraceOp::Free { id: 2 },
        ];
        let p = pictured(&a, &trace, 2);
        let second = p.allocs[1];
        assert_eq!(
            (second.born, second.died, second.requested, second.stream),
            (2, Some(4), 3000, 2)
        );
        let (_, log) = &p.memory_logs[2];
        let chunk = log
            .regions
            .iter()
            .flat_map(|r| &r.chunks)
            .find(|c| c.in_use && c.requested_size == 3000)
            .expect("the second allocation's chunk");
        assert_eq!((second.addr, second.size), (chunk.addr, chunk.size));
        assert_eq!(
            chunk.stream,
            Some(2),
            "the log names the trace's stream number"
        );
    }

    /// Forwards to a recorder, and at the first op from 100 on where it can, makes its mirror
    /// wrong: the tag of a free chunk that an in-use chunk parts from the op's address, so
    /// following the op leaves it be. Keeps the index of that op.
    struct Spoiler(PictureRecorder, Option<u64>);

    impl ReplayObserver for Spoiler {
        fn start(&mut self, allocator: &dyn Allocator, streams: &TraceStreams) -> Result<()> {
            self.0.start(allocator, streams)
        }

        fn replayed(&mut self, index: u64, what: Replayed, a: &dyn Allocator) -> Result<()> {
            let at = match what {
                Replayed::Alloc { addr, .. } => addr.unwrap_or(0),
                Replayed::Free { addr, .. } => addr,
                Replayed::Nothing => 0,
            };
            if index >= 100 && self.1.is_none() {
                let chunks = &self.0.chunks;
                let apart = |free: u64| {
                    let (lo, hi) = (free.min(at), free.max(at));
                    hi > lo + 1 && chunks.range(lo + 1..hi).any(|(&b, c)| c.in_use && b != at)
                };
                let spoilt = chunks
                    .iter()
                    .find(|(&b, c)| !c.in_use && apart(b))
                    .map(|(&b, _)| b);
                if let Some(c) = spoilt.and_then(|b| self.0.chunks.get_mut(&b)) {
                    c.tag = 12345;
                    self.1 = Some(index);
                }
            }
            self.0.replayed(index, what, a)
        }
    }

    #[test]
    fn a_mirror_that_goes_wrong_is_counted_and_read_again_from_the_memory_log() {
        let a = arena(&[]);
        let trace = streamed_trace(1000, 0, 4);
        let mut spoiler = Spoiler(
            PictureRecorder::new(PictureOptions {
                layout: true,
                memory_logs_at: (0..=trace.len() as u64).collect(),
                check_every: 1,
            }),
            None,
        );
        replay_with(
            &a,
            &trace,
            &TraceStreams::default(),
            ReplayOptions {
                observer: Some(&mut spoiler),
                ..ReplayOptions::default()
            },
        )
        .expect("replays");
        let caught = spoiler.1.expect("a chunk to spoil") + 1;
        let p = spoiler.0.finish();
        assert_eq!((p.mismatches, &p.mismatched_at[..]), (1, &[caught][..]));
        // From the check that caught it on, the picture is the log again.
        for (state, log) in p.memory_logs.iter().filter(|(s, _)| *s >= caught) {
            assert_eq!(
                p.chunks_at(*state),
                log_chunks(log),
                "chunks at state {state}"
            );
        }
    }

    #[test]
    fn a_failed_allocation_is_recorded_as_failed_and_never_live() {
        let a = arena(&[("arena.max_mem", &(4u64 << 20).to_string())]);
        let trace = [
            TraceOp::Alloc {
                id: 1,
                size: 8 << 20,
                stream: 0,
            },
            TraceOp::Free { id: 1 },
        ];
        let p = pictured(&a, &trace, 0);
        assert_eq!(
            (p.allocs[0].failed, p.allocs[0].born, p.allocs[0].died),
            (true, 1, Some(1))
        );
    }
}
