//! Synthetic traces: the four shapes of the benchmarks and `cuda-arena gen-trace`
//! ([`named_trace`]), each of exactly the asked length, from a seedable generator, so a trace
//! is the same anywhere.

use crate::trace::TraceOp;

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

/// Generated traces collected in memory reserve room for at most this many operations up
/// front; longer ones grow as they are generated, so a huge `ops` fails as the memory runs out
/// rather than in one allocation of its whole size. (`cuda-arena gen-trace` holds none: it
/// writes each operation as it is made, [`generate_named`].)
const PREALLOCATED_OPS: usize = 1 << 20;

/// Where a generator puts each operation it makes; `false` stops it (a write failed).
pub type OpSink<'a> = dyn FnMut(TraceOp) -> bool + 'a;

/// Builds a generated trace of exactly `ops` operations. A generator allocates only while
/// [`Builder::has_room`] (an allocation and its later free both fit), so the operations so
/// far plus one free per live allocation never pass `ops`; [`Builder::finish`] then frees
/// what is live and, when one operation is still missing, adds an allocation left live.
/// Once the sink refuses an operation, nothing more is made.
struct Builder<'s, 'a> {
    sink: &'s mut OpSink<'a>,
    /// Operations made so far.
    len: usize,
    ops: usize,
    live: usize,
    next_id: u64,
    stopped: bool,
}

impl<'s, 'a> Builder<'s, 'a> {
    fn new(ops: usize, sink: &'s mut OpSink<'a>) -> Self {
        Builder {
            sink,
            len: 0,
            ops,
            live: 0,
            next_id: 1,
            stopped: false,
        }
    }

    fn push(&mut self, op: TraceOp) {
        if !self.stopped {
            self.stopped = !(self.sink)(op);
            self.len += 1;
        }
    }

    /// Whether an allocation and its free both fit in the trace (and the sink takes more).
    fn has_room(&self) -> bool {
        !self.stopped && self.ops - self.len >= self.live + 2
    }

    /// Allocation `size` as a new id; the caller checked [`Builder::has_room`].
    fn alloc(&mut self, size: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.live += 1;
        self.push(TraceOp::Alloc {
            id,
            size,
            stream: 0,
        });
        id
    }

    /// [`Builder::alloc`] when there is room.
    fn try_alloc(&mut self, size: u64) -> Option<u64> {
        self.has_room().then(|| self.alloc(size))
    }

    /// Frees `id`, which is live.
    fn free(&mut self, id: u64) {
        self.live -= 1;
        self.push(TraceOp::Free { id });
    }

    /// Frees `live` (every live id, in the order to free them), then pads the trace to
    /// exactly `ops` with allocations of `pad_size` left live (one at most, unless the
    /// generator stopped with room left). Returns how many operations the sink took.
    fn finish(mut self, live: impl IntoIterator<Item = u64>, pad_size: u64) -> usize {
        for id in live {
            if self.len == self.ops || self.stopped {
                break;
            }
            self.free(id);
        }
        while self.len < self.ops && !self.stopped {
            self.alloc(pad_size);
        }
        // The operation the sink refused is not counted.
        self.len - usize::from(self.stopped)
    }
}

/// Runs `generate` into a vector.
fn collect(ops: usize, generate: impl FnOnce(&mut OpSink<'_>) -> usize) -> Vec<TraceOp> {
    let mut out = Vec::with_capacity(ops.min(PREALLOCATED_OPS));
    generate(&mut |op| {
        out.push(op);
        true
    });
    out
}

/// The benchmark trace: exactly `ops` operations, sizes log-uniform in `[min_size,
/// max_size]`, lifetimes random (each free picks a random live allocation), at most
/// `max_live` live at once (at least 1). Everything is freed by the end when `ops` is even;
/// an odd `ops` ends with one allocation live.
pub fn mixed_trace(
    ops: usize,
    min_size: u64,
    max_size: u64,
    max_live: usize,
    seed: u64,
) -> Vec<TraceOp> {
    collect(ops, |sink| {
        mixed_into(sink, ops, min_size, max_size, max_live, seed)
    })
}

fn mixed_into(
    sink: &mut OpSink<'_>,
    ops: usize,
    min_size: u64,
    max_size: u64,
    max_live: usize,
    seed: u64,
) -> usize {
    let mut rng = TraceRng::new(seed);
    let mut b = Builder::new(ops, sink);
    let max_live = max_live.max(1);
    let mut live: Vec<u64> = Vec::new();
    while !b.stopped {
        let must_free = live.len() >= max_live || !b.has_room();
        if !must_free && (live.is_empty() || rng.below(2) == 0) {
            live.push(b.alloc(rng.log_uniform(min_size, max_size)));
        } else if !live.is_empty() {
            let i = rng.below(live.len() as u64) as usize;
            b.free(live.swap_remove(i));
        } else {
            break;
        }
    }
    let pad = rng.log_uniform(min_size, max_size);
    b.finish(live, pad)
}

/// Transformer inference: per request, weights-sized buffers stay, while each of 24 layers
/// allocates activations (a few MiB), attention scratch and small temporaries that die
/// within the layer; requests come one after another. Sizes vary a little between requests.
/// Exactly `ops` operations; the weights are freed at the end when there is room.
pub fn inference_trace(ops: usize, seed: u64) -> Vec<TraceOp> {
    collect(ops, |sink| inference_into(sink, ops, seed))
}

fn inference_into(sink: &mut OpSink<'_>, ops: usize, seed: u64) -> usize {
    const WEIGHT: u64 = 16 << 20;
    let mut rng = TraceRng::new(seed);
    let mut b = Builder::new(ops, sink);
    let mut weights = Vec::new();
    // Live allocations other than weights, oldest first.
    let mut live: Vec<u64> = Vec::new();
    let alloc = |b: &mut Builder, live: &mut Vec<u64>, size: u64| {
        let id = b.try_alloc(size)?;
        live.push(id);
        Some(id)
    };
    let free = |b: &mut Builder, live: &mut Vec<u64>, id: u64| {
        live.retain(|&x| x != id);
        b.free(id);
    };
    let _stopped: Option<()> = (|| {
        // Weights: live for the whole trace.
        for _ in 0..24 {
            weights.push(b.try_alloc(WEIGHT)?);
        }
        loop {
            let tokens = 64 + rng.below(448);
            let mut carried = alloc(&mut b, &mut live, tokens * 4096 * 2)?;
            for _ in 0..24 {
                let scratch = alloc(&mut b, &mut live, tokens * tokens * 2 * 16)?;
                let qkv = alloc(&mut b, &mut live, tokens * 4096 * 6)?;
                let mut small = [0u64; 4];
                for s in &mut small {
                    *s = alloc(&mut b, &mut live, 256 + rng.below(8192))?;
                }
                let next = alloc(&mut b, &mut live, tokens * 4096 * 2)?;
                for id in small.into_iter().chain([scratch, qkv, carried]) {
                    free(&mut b, &mut live, id);
                }
                carried = next;
            }
            free(&mut b, &mut live, carried);
        }
    })();
    b.finish(live.into_iter().chain(weights), WEIGHT)
}

/// Small sizes, 8 B to 64 KiB log-uniform, random lifetimes, at most 4,000 live.
pub fn small_trace(ops: usize, seed: u64) -> Vec<TraceOp> {
    collect(ops, |sink| small_into(sink, ops, seed))
}

fn small_into(sink: &mut OpSink<'_>, ops: usize, seed: u64) -> usize {
    mixed_into(sink, ops, 8, 64 << 10, 4000, seed)
}

/// Growing buffers (a KV cache): a few sequences each hold one buffer that is reallocated
/// larger by one block at a time (allocate the new size, free the old), and a finished
/// sequence frees its buffer and a new one starts small. Exactly `ops` operations.
pub fn growing_trace(ops: usize, seed: u64) -> Vec<TraceOp> {
    collect(ops, |sink| growing_into(sink, ops, seed))
}

fn growing_into(sink: &mut OpSink<'_>, ops: usize, seed: u64) -> usize {
    const SEQS: usize = 16;
    const BLOCK: u64 = 256 << 10;
    let mut rng = TraceRng::new(seed);
    let mut b = Builder::new(ops, sink);
    let mut seqs: Vec<(u64, u64)> = Vec::new();
    for _ in 0..SEQS {
        match b.try_alloc(BLOCK) {
            Some(id) => seqs.push((id, BLOCK)),
            None => break,
        }
    }
    while seqs.len() == SEQS {
        let i = rng.below(SEQS as u64) as usize;
        let (id, size) = seqs[i];
        let new_size = if size >= (64 << 20) || rng.below(64) == 0 {
            BLOCK
        } else {
            size + BLOCK
        };
        let Some(new_id) = b.try_alloc(new_size) else {
            break;
        };
        b.free(id);
        seqs[i] = (new_id, new_size);
    }
    b.finish(seqs.into_iter().map(|(id, _)| id), BLOCK)
}

/// The named trace shapes of the benchmarks and `cuda-arena gen-trace`.
pub fn named_trace(kind: &str, ops: usize, seed: u64) -> Option<Vec<TraceOp>> {
    is_named(kind).then(|| {
        collect(ops, |sink| {
            generate_named(kind, ops, seed, sink).unwrap_or(0)
        })
    })
}

/// Whether `kind` names a trace shape of [`named_trace`].
pub fn is_named(kind: &str) -> bool {
    matches!(kind, "inference" | "mixed" | "small" | "growing")
}

/// [`named_trace`] handed to `sink` one operation at a time as it is made, holding only the
/// live allocations (`cuda-arena gen-trace` writes 10^8 operations in a few MiB). Returns how
/// many operations the sink took (all `ops` unless it refused one), or `None` for an unknown
/// kind.
pub fn generate_named(kind: &str, ops: usize, seed: u64, sink: &mut OpSink<'_>) -> Option<usize> {
    Some(match kind {
        "inference" => inference_into(sink, ops, seed),
        "mixed" => mixed_into(sink, ops, 256, 64 << 20, 2000, seed),
        "small" => small_into(sink, ops, seed),
        "growing" => growing_into(sink, ops, seed),
        _ => return None,
    })
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
                TraceOp::Reserve { .. } => panic!("generated traces have no reserves"),
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
                TraceOp::Alloc { id, .. } | TraceOp::Reserve { id, .. } => {
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
    fn every_named_trace_of_an_even_length_frees_what_it_allocates() {
        for kind in ["inference", "mixed", "small", "growing"] {
            let t = named_trace(kind, 50_000, 1).expect("known kind");
            assert_eq!(t.len(), 50_000, "{kind}");
            assert!(balanced(&t), "{kind}");
        }
        assert!(named_trace("other", 10, 1).is_none());
    }

    /// Ids allocated once while not live, frees only of live ids; returns how many are live
    /// at the end.
    fn live_at_end(t: &[TraceOp]) -> Option<usize> {
        let mut live = std::collections::HashSet::new();
        for op in t {
            let ok = match op {
                TraceOp::Alloc { id, .. } | TraceOp::Reserve { id, .. } => live.insert(*id),
                TraceOp::Free { id } => live.remove(id),
            };
            if !ok {
                return None;
            }
        }
        Some(live.len())
    }

    // Issue 11, item 16: `gen-trace --ops 1` wrote 64 operations.
    #[test]
    fn every_named_trace_has_exactly_the_asked_length_and_is_well_formed() {
        for kind in ["inference", "mixed", "small", "growing"] {
            for ops in (0..300).chain([1001, 4096, 10_001]) {
                let t = named_trace(kind, ops, 3).expect("known kind");
                assert_eq!(t.len(), ops, "{kind} {ops}");
                let live = live_at_end(&t);
                assert!(live.is_some(), "{kind} {ops}: an id misused");
                assert!(live <= Some(1) || ops < 200, "{kind} {ops}: {live:?} live");
            }
        }
    }

    #[test]
    fn a_huge_operation_count_does_not_allocate_its_whole_size_up_front() {
        // Capacity for 2^60 operations would abort; a collected trace reserves a bounded
        // amount (and this sink stops the generator at once).
        let t = collect(1 << 60, |sink| {
            let mut first = true;
            mixed_into(
                &mut |op| std::mem::replace(&mut first, false) && sink(op),
                1 << 60,
                256,
                4096,
                10,
                1,
            )
        });
        assert_eq!(t.len(), 1);
        assert!(t.capacity() <= PREALLOCATED_OPS);
    }

    // Streaming the generators (gen-trace in bounded memory) changed no trace: FNV-1a of
    // each kind's text at 100,001 operations, seed 3, as f877ca3's collected generators made it.
    #[test]
    fn the_named_traces_are_byte_for_byte_those_of_before_streaming() {
        let expected = [
            ("inference", 0x79ab_e24a_7e04_f2b1_u64, 3_739_034),
            ("mixed", 0x7a09_a583_6aeb_53dd, 3_758_356),
            ("small", 0xf4a2_37da_9d04_8bdc, 3_646_363),
            ("growing", 0xf095_fe0b_9b12_0c9a, 3_852_516),
        ];
        for (kind, fnv, len) in expected {
            let mut text = Vec::new();
            let n = generate_named(kind, 100_001, 3, &mut |op| {
                crate::trace::trace_format::write_op(&op, &mut text).is_ok()
            });
            assert_eq!(n, Some(100_001), "{kind}");
            let h = text.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            assert_eq!((h, text.len()), (fnv, len), "{kind}");
            let collected = named_trace(kind, 100_001, 3).expect("known kind");
            assert_eq!(
                crate::trace::trace_format::format_trace(&collected).as_bytes(),
                text,
                "{kind}"
            );
        }
        assert_eq!(generate_named("huge", 10, 1, &mut |_| true), None);
    }

    #[test]
    fn a_sink_that_refuses_stops_the_generator_at_once() {
        for kind in ["inference", "mixed", "small", "growing"] {
            let mut calls = 0usize;
            let n = generate_named(kind, 100_000_000, 1, &mut |_| {
                calls += 1;
                calls < 1000
            });
            assert_eq!(n, Some(999), "{kind}: what the sink took");
            assert_eq!(calls, 1000, "{kind}: nothing offered after the refusal");
        }
    }

    #[test]
    fn a_max_live_of_zero_still_allows_one_live_allocation() {
        let t = mixed_trace(10, 256, 4096, 0, 1);
        assert_eq!(t.len(), 10);
        assert_eq!(live_at_end(&t), Some(0));
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
