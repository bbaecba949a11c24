//! Allocation traces: generating them and replaying them through any [`Allocator`].
//!
//! A trace is a list of `alloc` (id, size, stream), `reserve` (id, size) and `free` (id)
//! operations (ids: the trace's own names), the JSON lines of `cuda-arena replay`.

use crate::allocators::allocator::Allocator;
use crate::streams::stream::{Stream, StreamId};
use crate::types::error::{ArenaError, Result};
use std::time::Instant;

mod forks;
pub mod picture;
pub(crate) mod recorder;
mod recording_files;
pub mod replay_file;
pub mod synthetic;
pub mod torch_snapshot;
pub mod trace_format;

/// One trace operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    /// Allocate `size` bytes as allocation `id`, on trace stream `stream` (0: no stream).
    Alloc {
        /// The allocation's name in the trace.
        id: u64,
        /// Bytes requested.
        size: u64,
        /// Trace stream number; 0 allocates without a stream.
        stream: u32,
    },
    /// Reserve `size` bytes as allocation `id` (`Allocator::reserve`: outside the arena's
    /// bins, no stream); freed by a `Free` like any allocation.
    Reserve {
        /// The allocation's name in the trace.
        id: u64,
        /// Bytes requested.
        size: u64,
    },
    /// Free allocation `id`.
    Free {
        /// The allocation's name in the trace.
        id: u64,
    },
}

/// The most distinct trace stream numbers a replay creates streams for
/// ([`TraceStreams::for_trace`]).
pub const MAX_TRACE_STREAMS: usize = 1024;

/// What a replay measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReplayReport {
    /// Operations replayed.
    pub ops: u64,
    /// Largest sum of requested bytes live at once.
    pub peak_requested: u64,
    /// Largest `TotalAllocated` seen after an allocation (bytes held from the raw allocator).
    pub peak_held: u64,
    /// Allocations that failed for lack of memory.
    pub failed_allocs: u64,
    /// Allocations the trace left live after its last operation; the replay frees them
    /// after the timed loop.
    pub live_at_end: u64,
    /// Wall time of the replay loop, in nanoseconds.
    pub elapsed_ns: u64,
}

impl ReplayReport {
    /// Mean nanoseconds per operation.
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed_ns as f64 / self.ops.max(1) as f64
    }
}

/// The streams a replay allocates on, by trace stream number: number 0 allocates without a
/// stream; every other number a trace uses must have a stream here.
#[derive(Debug, Clone, Default)]
pub struct TraceStreams {
    /// `(number, stream)`, sorted by number; numbers are distinct and never 0.
    streams: Vec<(u32, Stream)>,
}

impl TraceStreams {
    /// Trace stream `k` is `streams[k - 1]` (the numbering of [`replay`]).
    pub fn numbered(streams: &[Stream]) -> Self {
        TraceStreams {
            streams: (1..=u32::MAX).zip(streams.iter().cloned()).collect(),
        }
    }

    /// A new logical stream for every distinct non-zero stream number in `trace`. More than
    /// [`MAX_TRACE_STREAMS`] distinct numbers is [`ArenaError::InvalidArgument`] naming the
    /// operation (0-based) that brings the one too many.
    pub fn for_trace(trace: &[TraceOp]) -> Result<Self> {
        let mut numbers = std::collections::BTreeSet::new();
        for (i, op) in trace.iter().enumerate() {
            if let TraceOp::Alloc { stream, .. } = *op {
                if stream != 0 && numbers.insert(stream) && numbers.len() > MAX_TRACE_STREAMS {
                    return Err(ArenaError::invalid_argument(format!(
                        "trace op {i}: stream {stream} is one more than the {MAX_TRACE_STREAMS} \
                         distinct streams a replay takes"
                    )));
                }
            }
        }
        Ok(TraceStreams {
            streams: numbers.into_iter().map(|n| (n, Stream::new())).collect(),
        })
    }

    /// The stream for trace stream `number` (`None` for 0 and for numbers not given).
    pub fn get(&self, number: u32) -> Option<&Stream> {
        self.index(number).map(|i| &self.streams[i].1)
    }

    fn index(&self, number: u32) -> Option<usize> {
        self.streams.binary_search_by_key(&number, |(n, _)| *n).ok()
    }

    /// How many streams there are.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// The trace stream number of the stream with id `id` (what memory logs tag chunks
    /// with), if it is one of these.
    pub fn number_of(&self, id: StreamId) -> Option<u32> {
        self.streams
            .iter()
            .find(|(_, s)| s.id() == id)
            .map(|&(n, _)| n)
    }
}

/// One step of a trace compiled for replay: trace ids become slots of a table that holds
/// only the allocations live at once (slots are reused), so the timed loop touches a table
/// that fits in cache instead of one entry per id ever used.
#[derive(Debug, Clone, Copy)]
enum Step {
    Alloc {
        slot: u32,
        size: u64,
        /// 1 + the index of the stream in [`TraceStreams`]; 0 for none.
        stream: u32,
    },
    Reserve {
        slot: u32,
        size: u64,
    },
    Free {
        slot: u32,
    },
    /// A free of an id that was never allocated: ignored, as before.
    Nothing,
}

/// The slots of a compiled trace: one per allocation live at once, reused after frees.
#[derive(Default)]
struct Slots {
    slot_of: std::collections::HashMap<u64, u32>,
    vacant: Vec<u32>,
    count: u32,
}

impl Slots {
    /// A slot for trace op `i`, which allocates `id`; an id allocated while live is an error.
    fn take(&mut self, i: usize, id: u64) -> Result<u32> {
        let slot = match self.vacant.pop() {
            Some(slot) => slot,
            None => {
                self.count = self.count.checked_add(1).ok_or_else(|| {
                    ArenaError::invalid_argument(format!(
                        "trace op {i}: more than {} allocations live at once",
                        u32::MAX
                    ))
                })?;
                self.count - 1
            }
        };
        if self.slot_of.insert(id, slot).is_some() {
            return Err(ArenaError::invalid_argument(format!(
                "trace op {i}: id {id} is allocated while live"
            )));
        }
        Ok(slot)
    }

    /// The slot `id` held, now vacant; `None` for an id that is not live.
    fn give_back(&mut self, id: u64) -> Option<u32> {
        let slot = self.slot_of.remove(&id)?;
        self.vacant.push(slot);
        Some(slot)
    }
}

/// Compiles `trace` (untimed). An id allocated while live, and a stream number `streams`
/// has no stream for, are errors naming the operation (0-based).
fn compile(trace: &[TraceOp], streams: &TraceStreams) -> Result<(Vec<Step>, usize)> {
    let mut slots = Slots::default();
    let steps = trace
        .iter()
        .enumerate()
        .map(|(i, op)| match *op {
            TraceOp::Alloc { id, size, stream } => {
                let stream = match stream {
                    0 => 0,
                    n => match streams.index(n) {
                        // At most `u32::MAX` streams: `numbered` numbers them with u32s, and
                        // `for_trace` keeps a few.
                        Some(index) => index as u32 + 1,
                        None => {
                            return Err(ArenaError::invalid_argument(format!(
                                "trace op {i}: stream {n} was not given ({} streams given)",
                                streams.len()
                            )))
                        }
                    },
                };
                let slot = slots.take(i, id)?;
                Ok(Step::Alloc { slot, size, stream })
            }
            TraceOp::Reserve { id, size } => Ok(Step::Reserve {
                slot: slots.take(i, id)?,
                size,
            }),
            TraceOp::Free { id } => Ok(match slots.give_back(id) {
                Some(slot) => Step::Free { slot },
                None => Step::Nothing,
            }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((steps, slots.count as usize))
}

/// What one replayed operation did, as a [`ReplayObserver`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replayed {
    /// An `alloc` or `reserve` of `size` bytes into `slot` (a number the replay gives each
    /// live allocation, reused after its free). `addr` is `None` when the allocator refused
    /// it for lack of memory, and `Some(0)` for a size of 0.
    Alloc {
        /// The allocation's slot, until its free.
        slot: u32,
        /// Bytes requested.
        size: u64,
        /// Trace stream number, 0 for none (always 0 for a reserve).
        stream: u32,
        /// Whether it was a `reserve`.
        reserve: bool,
        /// Where it went.
        addr: Option<u64>,
    },
    /// The free of the live allocation in `slot`, at `addr`.
    Free {
        /// The slot its allocation took.
        slot: u32,
        /// Its address (0 for an allocation of size 0).
        addr: u64,
    },
    /// Nothing replayed: a free of an id never allocated, or of an allocation that failed.
    Nothing,
}

/// Watches a replay operation by operation ([`ReplayOptions::observer`]). Its calls run
/// inside the replay loop, so an observed replay's time is not the allocator's alone: time
/// a replay without one.
pub trait ReplayObserver {
    /// Before the first operation, with the allocator as it starts (its state 0).
    fn start(&mut self, allocator: &dyn Allocator, streams: &TraceStreams) -> Result<()>;
    /// After operation `index` (0-based), with the allocator in its state `index + 1`. An
    /// error stops the replay with it.
    fn replayed(&mut self, index: u64, what: Replayed, allocator: &dyn Allocator) -> Result<()>;
}

/// How [`replay_with`] replays, beyond the trace and the streams.
#[derive(Default)]
pub struct ReplayOptions<'a> {
    /// Read the stats after every allocation to find the peak held (slower; leave it off to
    /// time the allocator alone).
    pub track_peaks: bool,
    /// Read the stats every so many operations into a [`Sample`] (0: never). The reads are
    /// inside the timed loop: sample sparsely when timing matters.
    pub sample_every: usize,
    /// Called with each sample as it is taken (for progress).
    pub on_sample: Option<&'a mut dyn FnMut(&Sample)>,
    /// Told of every operation (see [`ReplayObserver`]).
    pub observer: Option<&'a mut dyn ReplayObserver>,
}

impl std::fmt::Debug for ReplayOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayOptions")
            .field("track_peaks", &self.track_peaks)
            .field("sample_every", &self.sample_every)
            .field("on_sample", &self.on_sample.is_some())
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// Replays `trace` through `allocator`; trace stream `k` allocates on `streams[k - 1]`. With
/// `track_peaks`, reads the stats after every allocation to find the peak held (slower;
/// leave it off to time the allocator alone). An allocation the allocator refuses for lack
/// of memory is counted and its frees skipped; a free of an id never allocated is ignored.
/// An id allocated while live and a stream number without a stream are errors found before
/// anything is replayed; any other error stops the replay with it. Every allocation still
/// live at the end is counted and freed (not timed). The trace is compiled first (not
/// timed).
pub fn replay(
    allocator: &dyn Allocator,
    trace: &[TraceOp],
    streams: &[Stream],
    track_peaks: bool,
) -> Result<ReplayReport> {
    replay_sampled(allocator, trace, streams, track_peaks, 0).map(|(r, _)| r)
}

/// Memory over time during a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Operations done so far.
    pub op: u64,
    /// Bytes held from the raw allocator (`TotalAllocated`).
    pub held: u64,
    /// Bytes handed out (`InUse`).
    pub in_use: u64,
    /// Bytes asked for by live allocations.
    pub requested: u64,
}

/// [`replay`], also reading the stats every `sample_every` operations (0: never; the reads
/// are inside the timed loop, so sample sparsely when timing matters). The last sample is
/// taken after the last operation.
pub fn replay_sampled(
    allocator: &dyn Allocator,
    trace: &[TraceOp],
    streams: &[Stream],
    track_peaks: bool,
    sample_every: usize,
) -> Result<(ReplayReport, Vec<Sample>)> {
    replay_observed(
        allocator,
        trace,
        &TraceStreams::numbered(streams),
        track_peaks,
        sample_every,
        &mut |_| {},
    )
}

/// [`replay_sampled`] with the streams given by number ([`TraceStreams`]), calling
/// `on_sample` with each sample as it is taken (for progress).
pub fn replay_observed(
    allocator: &dyn Allocator,
    trace: &[TraceOp],
    streams: &TraceStreams,
    track_peaks: bool,
    sample_every: usize,
    on_sample: &mut dyn FnMut(&Sample),
) -> Result<(ReplayReport, Vec<Sample>)> {
    replay_with(
        allocator,
        trace,
        streams,
        ReplayOptions {
            track_peaks,
            sample_every,
            on_sample: Some(on_sample),
            observer: None,
        },
    )
}

/// [`replay`] with the streams given by number ([`TraceStreams`]) and the rest of what it
/// can do in `options`: peaks, samples, an observer of every operation. The observer is
/// started once the trace is compiled and checked, before the first operation.
pub fn replay_with(
    allocator: &dyn Allocator,
    trace: &[TraceOp],
    streams: &TraceStreams,
    options: ReplayOptions<'_>,
) -> Result<(ReplayReport, Vec<Sample>)> {
    let ReplayOptions {
        track_peaks,
        sample_every,
        mut on_sample,
        mut observer,
    } = options;
    let mut samples = Vec::new();
    /// A slot with nothing live: `(address, size)` with an impossible size.
    const EMPTY: (u64, u64) = (0, u64::MAX);
    let (steps, slots) = compile(trace, streams)?;
    // Refused before the first op, so a failed replay changes nothing (issue 11's fuzzer
    // found a replay that stopped halfway at the first stream op).
    if !allocator.is_stream_aware() {
        if let Some(i) = steps
            .iter()
            .position(|s| matches!(s, Step::Alloc { stream, .. } if *stream != 0))
        {
            return Err(ArenaError::invalid_argument(format!(
                "trace op {i} allocates on a stream, and this allocator has no streams"
            )));
        }
    }
    let mut table: Vec<(u64, u64)> = vec![EMPTY; slots];
    let mut report = ReplayReport::default();
    let mut requested = 0u64;
    if let Some(o) = observer.as_mut() {
        o.start(allocator, streams)?;
    }
    let started = Instant::now();
    let result = (|| {
        for step in &steps {
            let mut replayed = Replayed::Nothing;
            let allocated = match *step {
                Step::Alloc { slot, size, stream } => Some((
                    slot,
                    size,
                    match stream {
                        0 => allocator.alloc(size),
                        i => match streams.streams.get(i as usize - 1) {
                            Some((_, s)) => allocator.alloc_on_stream(size, s),
                            None => unreachable_stream(i),
                        },
                    },
                )),
                Step::Reserve { slot, size } => Some((slot, size, allocator.reserve(size))),
                Step::Free { slot } => {
                    let (addr, size) = std::mem::replace(&mut table[slot as usize], EMPTY);
                    if size != u64::MAX {
                        allocator.free(addr)?;
                        requested = requested.saturating_sub(size);
                        replayed = Replayed::Free { slot, addr };
                    }
                    None
                }
                Step::Nothing => None,
            };
            if let Some((slot, size, got)) = allocated {
                if observer.is_some() {
                    replayed = allocated_as_replayed(step, streams, &got);
                }
                match got {
                    Ok(addr) => {
                        table[slot as usize] = (addr.unwrap_or(0), size);
                        // Live sizes are each held by the allocator, so their sum fits;
                        // saturating keeps a misbehaving allocator from wrapping it.
                        requested = requested.saturating_add(size);
                        report.peak_requested = report.peak_requested.max(requested);
                        if track_peaks {
                            report.peak_held =
                                report.peak_held.max(allocator.stats().total_allocated);
                        }
                    }
                    Err(ArenaError::OutOfMemory { .. }) => report.failed_allocs += 1,
                    Err(e) => return Err(e),
                }
            }
            if let Some(o) = observer.as_mut() {
                o.replayed(report.ops, replayed, allocator)?;
            }
            report.ops += 1;
            if sample_every > 0
                && (report.ops % sample_every as u64 == 0 || report.ops == steps.len() as u64)
            {
                let st = allocator.stats();
                let sample = Sample {
                    op: report.ops,
                    held: st.total_allocated,
                    in_use: st.in_use,
                    requested,
                };
                if let Some(f) = on_sample.as_mut() {
                    f(&sample);
                }
                samples.push(sample);
            }
        }
        Ok(())
    })();
    report.elapsed_ns = started.elapsed().as_nanos() as u64;
    for (addr, size) in table {
        if size != u64::MAX {
            report.live_at_end += 1;
            allocator.free(addr)?;
        }
    }
    result.map(|()| (report, samples))
}

/// What an allocating `step` that got `got` did, for an observer.
#[cold]
fn allocated_as_replayed(
    step: &Step,
    streams: &TraceStreams,
    got: &Result<Option<u64>>,
) -> Replayed {
    let addr = match got {
        Ok(addr) => Some(addr.unwrap_or(0)),
        Err(_) => None,
    };
    match *step {
        Step::Alloc { slot, size, stream } => Replayed::Alloc {
            slot,
            size,
            stream: match stream {
                0 => 0,
                i => streams.streams.get(i as usize - 1).map_or(0, |&(n, _)| n),
            },
            reserve: false,
            addr,
        },
        Step::Reserve { slot, size } => Replayed::Alloc {
            slot,
            size,
            stream: 0,
            reserve: true,
            addr,
        },
        _ => Replayed::Nothing,
    }
}

/// A compiled stream index outside the table: `compile` never makes one.
#[cold]
fn unreachable_stream(index: u32) -> Result<Option<u64>> {
    Err(ArenaError::invalid_argument(format!(
        "internal: compiled stream index {index} has no stream"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_replays_as_a_reserve_and_counts_in_the_peak_requested() {
        let arena = crate::Arena::new(
            crate::AddressSpaceAllocator::default(),
            crate::ArenaConfig::default(),
        )
        .expect("arena");
        let trace = [
            TraceOp::Reserve { id: 1, size: 1000 },
            TraceOp::Alloc {
                id: 2,
                size: 500,
                stream: 0,
            },
            TraceOp::Free { id: 1 },
            TraceOp::Free { id: 2 },
        ];
        let report = replay(&arena, &trace, &[], false).expect("replays");
        assert_eq!(report.peak_requested, 1500);
        let stats = arena.stats();
        assert_eq!((stats.num_reserves, stats.num_allocs), (1, 2));
        assert_eq!((stats.in_use, stats.reserved_bytes), (0, 0));
    }
}
