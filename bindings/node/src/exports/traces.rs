//! Trace generation and in-memory replay in Rust, for benchmarks and `cuda-arena trace`: the
//! loop runs natively, so the binding's per-call cost is not in its figures. Counts, sizes
//! and ids come in as JS numbers (`f64`) and are checked here, so none is wrapped or
//! truncated on the way in (napi's `u32` conversion takes 2^32+3 as 3 and -1 as 2^32-1),
//! and nothing is allocated in proportion to a value before it is checked.

use crate::allocator::NativeAllocator;
use crate::error::{invalid, js, Result};
use cuda_arena_core::trace::synthetic::{generate_named, is_named, mixed_trace};
use cuda_arena_core::trace::trace_format::{write_op, MAX_TRACE_LINES};
use cuda_arena_core::trace::{
    replay_observed, ReplayReport, TraceOp, TraceStreams, MAX_TRACE_STREAMS,
};
use napi::bindgen_prelude::BigUint64Array;
use napi_derive::napi;
use std::io::Write;

/// fit in Node's default heap with room to spare.
pub const MAX_JS_TRACE_OPS: u32 = 10_000_000;

/// 2^53 − 1: JS numbers are exact integers up to here.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// `v` as a whole number in `min ..= max` (`max` at most 2^53 − 1), else an invalid argument
/// naming `name`.
pub(crate) fn whole(name: &str, v: f64, min: f64, max: f64) -> Result<u64> {
    if v.is_finite() && v.fract() == 0.0 && v >= min && v <= max {
        Ok(v as u64)
    } else {
        Err(invalid(format!(
            "{name} must be an integer {min} … {max}, got {v}"
        )))
    }
}

/// One generated trace operation: `op` is `alloc`, `reserve` or `free`.
#[napi(object)]
pub struct JsTraceOp {
    pub op: String,
    /// Exact: generated ids stay below 2^53.
    pub id: f64,
    /// Bytes (alloc only); sizes up to 2^53 are exact.
    pub size: Option<f64>,
    /// Trace stream number, 0 for none (alloc only).
    pub stream: Option<u32>,
}

/// What a replay measured.
#[napi(object)]
pub struct JsReplayReport {
    pub ops: f64,
    pub peak_requested: f64,
    pub peak_held: f64,
    pub failed_allocs: f64,
    /// Allocations the trace left live (freed after the replay).
    pub live_at_end: f64,
    pub elapsed_ns: f64,
}

impl From<ReplayReport> for JsReplayReport {
    fn from(r: ReplayReport) -> Self {
        JsReplayReport {
            ops: r.ops as f64,
            peak_requested: r.peak_requested as f64,
            peak_held: r.peak_held as f64,
            failed_allocs: r.failed_allocs as f64,
            live_at_end: r.live_at_end as f64,
            elapsed_ns: r.elapsed_ns as f64,
        }
    }
}

/// The benchmark trace shape: exactly `ops` operations (at most [`MAX_JS_TRACE_OPS`]), sizes
/// log-uniform in `[minSize, maxSize]`, random lifetimes, at most `maxLive` live.
#[napi(catch_unwind)]
pub fn mixed_trace_ops(
    ops: f64,
    min_size: f64,
    max_size: f64,
    max_live: f64,
    seed: f64,
) -> Result<Vec<JsTraceOp>> {
    let ops = whole("ops", ops, 0.0, f64::from(MAX_JS_TRACE_OPS))?;
    let min_size = whole("options.minSize", min_size, 1.0, MAX_SAFE)?;
    let max_size = whole("options.maxSize", max_size, min_size as f64, MAX_SAFE)?;
    let max_live = whole("options.maxLive", max_live, 1.0, f64::from(u32::MAX))?;
    let seed = whole("options.seed", seed, 0.0, MAX_SAFE)?;
    let trace = mixed_trace(ops as usize, min_size, max_size, max_live as usize, seed);
    Ok(trace
        .into_iter()
        .map(|op| match op {
            TraceOp::Alloc { id, size, stream } => JsTraceOp {
                op: "alloc".into(),
                id: id as f64,
                size: Some(size as f64),
                stream: Some(stream),
            },
            TraceOp::Reserve { id, size } => JsTraceOp {
                op: "reserve".into(),
                id: id as f64,
                size: Some(size as f64),
                stream: None,
            },
            TraceOp::Free { id } => JsTraceOp {
                op: "free".into(),
                id: id as f64,
                size: None,
                stream: None,
            },
        })
        .collect())
}

/// A trace from JS, four `u64`s per operation: `[op (0 alloc, 1 free, 2 reserve), id, size,
/// stream]`.
fn to_ops(trace: &[u64]) -> Result<Vec<TraceOp>> {
    if !trace.len().is_multiple_of(4) {
        return Err(invalid(format!(
            "a packed trace has four numbers per op, got {}",
            trace.len()
        )));
    }
    let count = trace.len() / 4;
    if count > MAX_JS_TRACE_OPS as usize {
        return Err(invalid(format!(
            "trace must have at most {MAX_JS_TRACE_OPS} ops, got {count}"
        )));
    }
    trace
        .as_chunks::<4>()
        .0
        .iter()
        .enumerate()
        .map(|(i, op)| match *op {
            [0, id, size, stream] => Ok(TraceOp::Alloc {
                id,
                size,
                stream: u32::try_from(stream).map_err(|_| {
                    invalid(format!(
                        "trace[{i}].stream must be an integer 0 … {}, got {stream}",
                        u32::MAX
                    ))
                })?,
            }),
            [1, id, _, _] => Ok(TraceOp::Free { id }),
            [2, id, size, _] => Ok(TraceOp::Reserve { id, size }),
            [op, ..] => Err(invalid(format!(
                "trace[{i}].op must be 0 (alloc), 1 (free) or 2 (reserve), got {op}"
            ))),
        })
        .collect()
}

/// Replays `trace` (packed: see `to_ops`) through the allocator natively; trace stream
/// `k` (1 … `streams`) allocates on the k-th of `streams` new streams.
#[napi(catch_unwind)]
pub fn replay_trace(
    allocator: &NativeAllocator,
    trace: BigUint64Array,
    streams: f64,
    track_peaks: bool,
) -> Result<JsReplayReport> {
    let count = whole("options.streams", streams, 0.0, MAX_TRACE_STREAMS as f64)?;
    let ops = to_ops(&trace)?;
    let streams: Vec<cuda_arena_core::Stream> =
        (0..count).map(|_| cuda_arena_core::Stream::new()).collect();
    let a = allocator.shared()?;
    replay_observed(
        &*a,
        &ops,
        &TraceStreams::numbered(&streams),
        track_peaks,
        0,
        &mut |_| {},
    )
    .map(|(r, _)| r.into())
    .map_err(js)
}

/// `iterations` alloc+free pairs of `size` bytes in a native loop; nanoseconds per pair.
/// The Rust-only baseline of the JS benchmark.
#[napi(catch_unwind)]
pub fn native_pair_ns(allocator: &NativeAllocator, size: f64, iterations: f64) -> Result<f64> {
    let size = whole("size", size, 0.0, MAX_SAFE)?;
    let iterations = whole("iterations", iterations, 0.0, f64::from(u32::MAX))?;
    let a = allocator.shared()?;
    let start = std::time::Instant::now();
    for _ in 0..iterations {
        if let Some(p) = a.alloc(size).map_err(js)? {
            a.free(p).map_err(js)?;
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / iterations.max(1) as f64)
}

/// A writer that waits out `WouldBlock`: Node makes a pipe it has opened for
/// `process.stdout` non-blocking, and a slow reader must slow the writer, not fail it.
struct Patient<W: Write>(W);

impl<W: Write> Write for Patient<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            match self.0.write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        loop {
            match self.0.flush() {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                other => return other,
            }
        }
    }
}

/// Writes a generated trace of `kind` (`inference`, `mixed`, `small`, `growing`), exactly
/// `ops` operations (at most the replay's line limit), to `path`, or to standard output when
/// `path` is absent. A reader that closes standard output early (`| head`) ends the output
/// without an error.
#[napi(catch_unwind)]
pub fn write_trace_file(path: Option<String>, kind: String, ops: f64, seed: f64) -> Result<f64> {
    let ops = whole("ops", ops, 0.0, MAX_TRACE_LINES as f64)? as usize;
    let seed = whole("seed", seed, 0.0, MAX_SAFE)?;
    if !is_named(&kind) {
        return Err(invalid(format!(
            "trace kind must be inference, mixed, small or growing, got {:?}",
            kind.chars().take(40).collect::<String>()
        )));
    }
    let cannot_write = |to: &str, e: std::io::Error| invalid(format!("cannot write {to}: {e}"));
    // The file is opened before the trace is generated, so a bad path fails at once.
    let out: Box<dyn Write> = match &path {
        Some(p) => Box::new(std::fs::File::create(p).map_err(|e| cannot_write(p, e))?),
        None => Box::new(Patient(std::io::stdout().lock())),
    };
    // Each operation is written as it is made: the generator holds only what is live.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    let mut failed = None;
    let written = generate_named(&kind, ops, seed, &mut |op| match write_op(&op, &mut out) {
        Ok(()) => true,
        Err(e) => {
            failed = Some(e);
            false
        }
    })
    .unwrap_or(0);
    match failed.map_or_else(|| out.flush(), Err) {
        Ok(()) => Ok(written as f64),
        Err(e) if path.is_none() && e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(written as f64)
        }
        Err(e) => Err(cannot_write(
            path.as_deref().unwrap_or("standard output"),
            e,
        )),
    }
}
