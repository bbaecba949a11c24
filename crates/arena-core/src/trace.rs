//! Allocation traces: generating them and replaying them through any [`Allocator`].
//!
//! A trace is a list of `alloc` (id, size, stream) and `free` (id) operations, the JSON-lines
//! format of the `cuda-arena replay` command. Ids are the trace's own names for allocations.

use crate::allocator::Allocator;
use crate::error::{ArenaError, Result};
use crate::stream::Stream;
use std::time::Instant;

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
    /// Free allocation `id`.
    Free {
        /// The allocation's name in the trace.
        id: u64,
    },
}

/// A small, fast, seedable generator (xorshift64*), so traces are reproducible anywhere.
#[derive(Debug, Clone)]
pub struct TraceRng(u64);

impl TraceRng {
    /// A generator from `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        TraceRng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-uniform in `[lo, hi]`.
    pub fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
        ((l + (h - l) * self.unit()).exp() as u64).clamp(lo, hi)
    }

    /// Uniform in `[0, n)`; `n > 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The benchmark trace: `ops` operations, sizes log-uniform in `[min_size, max_size]`,
/// lifetimes random (each free picks a random live allocation), at most `max_live` live at
/// once, and everything freed by the end.
pub fn mixed_trace(
    ops: usize,
    min_size: u64,
    max_size: u64,
    max_live: usize,
    seed: u64,
) -> Vec<TraceOp> {
    let mut rng = TraceRng::new(seed);
    let mut out = Vec::with_capacity(ops);
    let mut live: Vec<u64> = Vec::new();
    let mut next_id = 1;
    while out.len() < ops {
        let left = ops - out.len();
        let must_free = live.len() >= max_live || live.len() >= left;
        if !must_free && (live.is_empty() || rng.below(2) == 0) {
            out.push(TraceOp::Alloc {
                id: next_id,
                size: rng.log_uniform(min_size, max_size),
                stream: 0,
            });
            live.push(next_id);
            next_id += 1;
        } else if !live.is_empty() {
            let i = rng.below(live.len() as u64) as usize;
            out.push(TraceOp::Free {
                id: live.swap_remove(i),
            });
        } else {
            break;
        }
    }
    out
}

/// Transformer inference: per request, weights-sized buffers stay, while each of `layers`
/// layers allocates activations (a few MiB), attention scratch and small temporaries that die
/// within the layer; requests come one after another. Sizes vary a little between requests.
pub fn inference_trace(ops: usize, seed: u64) -> Vec<TraceOp> {
    let mut rng = TraceRng::new(seed);
    let mut out = Vec::with_capacity(ops);
    let mut next_id = 1u64;
    let mut alloc = |out: &mut Vec<TraceOp>, size: u64| {
        let id = next_id;
        next_id += 1;
        out.push(TraceOp::Alloc {
            id,
            size,
            stream: 0,
        });
        id
    };
    // Weights: live for the whole trace.
    let weights: Vec<u64> = (0..24).map(|_| alloc(&mut out, 16 << 20)).collect();
    'requests: loop {
        let tokens = 64 + rng.below(448);
        let mut carried = alloc(&mut out, tokens * 4096 * 2);
        for _ in 0..24 {
            let scratch = alloc(&mut out, tokens * tokens * 2 * 16);
            let qkv = alloc(&mut out, tokens * 4096 * 6);
            let small: Vec<u64> = (0..4)
                .map(|_| alloc(&mut out, 256 + rng.below(8192)))
                .collect();
            let next = alloc(&mut out, tokens * 4096 * 2);
            for id in small.into_iter().chain([scratch, qkv, carried]) {
                out.push(TraceOp::Free { id });
            }
            carried = next;
            if out.len() + weights.len() + 16 >= ops {
                out.push(TraceOp::Free { id: carried });
                break 'requests;
            }
        }
        out.push(TraceOp::Free { id: carried });
    }
    for id in weights {
        out.push(TraceOp::Free { id });
    }
    out
}

/// Small sizes, 8 B to 64 KiB log-uniform, random lifetimes, at most 4,000 live.
pub fn small_trace(ops: usize, seed: u64) -> Vec<TraceOp> {
    mixed_trace(ops, 8, 64 << 10, 4000, seed)
}

/// Growing buffers (a KV cache): a few sequences each hold one buffer that is reallocated
/// larger by one block at a time (allocate the new size, free the old), and a finished
/// sequence frees its buffer and a new one starts small.
pub fn growing_trace(ops: usize, seed: u64) -> Vec<TraceOp> {
    let mut rng = TraceRng::new(seed);
    let mut out = Vec::with_capacity(ops);
    const SEQS: usize = 16;
    const BLOCK: u64 = 256 << 10;
    let mut next_id = 1u64;
    let mut seqs: Vec<(u64, u64)> = Vec::new();
    for _ in 0..SEQS {
        out.push(TraceOp::Alloc {
            id: next_id,
            size: BLOCK,
            stream: 0,
        });
        seqs.push((next_id, BLOCK));
        next_id += 1;
    }
    while out.len() + 2 + SEQS < ops {
        let i = rng.below(SEQS as u64) as usize;
        let (id, size) = seqs[i];
        let new_size = if size >= (64 << 20) || rng.below(64) == 0 {
            BLOCK
        } else {
            size + BLOCK
        };
        out.push(TraceOp::Alloc {
            id: next_id,
            size: new_size,
            stream: 0,
        });
        out.push(TraceOp::Free { id });
        seqs[i] = (next_id, new_size);
        next_id += 1;
    }
    for (id, _) in seqs {
        out.push(TraceOp::Free { id });
    }
    out
}

/// The named trace shapes of the benchmarks and `cuda-arena gen-trace`.
pub fn named_trace(kind: &str, ops: usize, seed: u64) -> Option<Vec<TraceOp>> {
    Some(match kind {
        "inference" => inference_trace(ops, seed),
        "mixed" => mixed_trace(ops, 256, 64 << 20, 2000, seed),
        "small" => small_trace(ops, seed),
        "growing" => growing_trace(ops, seed),
        _ => return None,
    })
}

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
    /// Wall time of the replay loop, in nanoseconds.
    pub elapsed_ns: u64,
}

impl ReplayReport {
    /// Mean nanoseconds per operation.
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed_ns as f64 / self.ops.max(1) as f64
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
        stream: u32,
    },
    Free {
        slot: u32,
    },
    /// A free of an id that was never allocated: ignored, as before.
    Nothing,
}

/// Compiles `trace` (untimed). An id allocated while live is an error.
fn compile(trace: &[TraceOp]) -> Result<(Vec<Step>, usize)> {
    let mut slot_of: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    let mut vacant: Vec<u32> = Vec::new();
    let mut slots = 0u32;
    let steps = trace
        .iter()
        .map(|op| match *op {
            TraceOp::Alloc { id, size, stream } => {
                let slot = vacant.pop().unwrap_or_else(|| {
                    slots += 1;
                    slots - 1
                });
                if slot_of.insert(id, slot).is_some() {
                    return Err(ArenaError::invalid_argument(format!(
                        "trace id {id} is allocated twice"
                    )));
                }
                Ok(Step::Alloc { slot, size, stream })
            }
            TraceOp::Free { id } => Ok(match slot_of.remove(&id) {
                Some(slot) => {
                    vacant.push(slot);
                    Step::Free { slot }
                }
                None => Step::Nothing,
            }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((steps, slots as usize))
}

/// Replays `trace` through `allocator`. With `track_peaks`, reads the stats after every
/// allocation to find the peak held (slower; leave it off to time the allocator alone).
/// An allocation the allocator refuses for lack of memory is counted and its frees
/// skipped; a free of an id never allocated is ignored; an id allocated twice, a stream
/// number without a stream, or any other error stops the replay with it. Every allocation
/// still live at the end is freed (not timed). The trace is compiled first (not timed).
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
        streams,
        track_peaks,
        sample_every,
        &mut |_| {},
    )
}

/// [`replay_sampled`], calling `on_sample` with each sample as it is taken (for progress).
pub fn replay_observed(
    allocator: &dyn Allocator,
    trace: &[TraceOp],
    streams: &[Stream],
    track_peaks: bool,
    sample_every: usize,
    on_sample: &mut dyn FnMut(&Sample),
) -> Result<(ReplayReport, Vec<Sample>)> {
    let mut samples = Vec::new();
    /// A slot with nothing live: `(address, size)` with an impossible size.
    const EMPTY: (u64, u64) = (0, u64::MAX);
    let (steps, slots) = compile(trace)?;
    let mut table: Vec<(u64, u64)> = vec![EMPTY; slots];
    let mut report = ReplayReport::default();
    let mut requested = 0u64;
    let started = Instant::now();
    let result = (|| {
        for step in &steps {
            match *step {
                Step::Alloc { slot, size, stream } => {
                    let got = if stream == 0 {
                        allocator.alloc(size)
                    } else {
                        let s = streams.get(stream as usize - 1).ok_or_else(|| {
                            ArenaError::invalid_argument(format!(
                                "trace stream {stream} was not given"
                            ))
                        })?;
                        allocator.alloc_on_stream(size, s)
                    };
                    match got {
                        Ok(addr) => {
                            table[slot as usize] = (addr.unwrap_or(0), size);
                            requested += size;
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
                Step::Free { slot } => {
                    let (addr, size) = std::mem::replace(&mut table[slot as usize], EMPTY);
                    if size != u64::MAX {
                        allocator.free(addr)?;
                        requested -= size;
                    }
                }
                Step::Nothing => {}
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
                on_sample(&sample);
                samples.push(sample);
            }
        }
        Ok(())
    })();
    report.elapsed_ns = started.elapsed().as_nanos() as u64;
    for (addr, size) in table {
        if size != u64::MAX {
            allocator.free(addr)?;
        }
    }
    result.map(|()| (report, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_traces_stay_within_limits_and_free_everything() {
        let t = mixed_trace(10_000, 256, 64 << 20, 100, 1);
        assert_eq!(t.len(), 10_000);
        let (mut live, mut peak) = (0i64, 0i64);
        for op in &t {
            match op {
                TraceOp::Alloc { size, .. } => {
                    assert!((256..=64 << 20).contains(size));
                    live += 1;
                }
                TraceOp::Free { .. } => live -= 1,
            }
            peak = peak.max(live);
        }
        assert_eq!(live, 0);
        assert!(peak <= 100 && peak > 10);
    }

    fn balanced(t: &[TraceOp]) -> bool {
        let mut live = std::collections::HashSet::new();
        for op in t {
            match op {
                TraceOp::Alloc { id, .. } => {
                    if !live.insert(*id) {
                        return false;
                    }
                }
                TraceOp::Free { id } => {
                    if !live.remove(id) {
                        return false;
                    }
                }
            }
        }
        live.is_empty()
    }

    #[test]
    fn every_named_trace_frees_what_it_allocates_and_has_about_the_asked_length() {
        for kind in ["inference", "mixed", "small", "growing"] {
            let t = named_trace(kind, 50_000, 1).expect("known kind");
            assert!(balanced(&t), "{kind}");
            assert!(
                t.len() >= 45_000 && t.len() <= 50_100,
                "{kind}: {}",
                t.len()
            );
        }
        assert!(named_trace("other", 10, 1).is_none());
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        assert_eq!(
            mixed_trace(1000, 256, 4096, 50, 7),
            mixed_trace(1000, 256, 4096, 50, 7)
        );
        assert_ne!(
            mixed_trace(1000, 256, 4096, 50, 7),
            mixed_trace(1000, 256, 4096, 50, 8)
        );
    }
}
