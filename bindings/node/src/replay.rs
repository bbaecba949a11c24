//! Trace generation and replay in Rust, for benchmarks and the `cuda-arena` command: the
//! loop runs natively, so the binding's per-call cost is not in its figures.

use crate::allocator::NativeAllocator;
use crate::error::{invalid, js, Result};
use cuda_arena_core::trace::{mixed_trace, replay, TraceOp};
use cuda_arena_core::Stream;
use napi_derive::napi;

/// One trace operation: `op` is `alloc` or `free`.
#[napi(object)]
pub struct JsTraceOp {
    pub op: String,
    pub id: u32,
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
    pub elapsed_ns: f64,
}

/// The benchmark trace shape: sizes log-uniform in `[minSize, maxSize]`, random lifetimes,
/// at most `maxLive` live, everything freed at the end.
#[napi(catch_unwind)]
pub fn mixed_trace_ops(
    ops: u32,
    min_size: f64,
    max_size: f64,
    max_live: u32,
    seed: f64,
) -> Result<Vec<JsTraceOp>> {
    if !(min_size >= 1.0 && max_size >= min_size && max_size <= 9.0e15) {
        return Err(invalid(
            "sizes must satisfy 1 <= minSize <= maxSize <= 2^53",
        ));
    }
    let trace = mixed_trace(
        ops as usize,
        min_size as u64,
        max_size as u64,
        max_live as usize,
        seed as u64,
    );
    Ok(trace
        .into_iter()
        .map(|op| match op {
            TraceOp::Alloc { id, size, stream } => JsTraceOp {
                op: "alloc".into(),
                id: id as u32,
                size: Some(size as f64),
                stream: Some(stream),
            },
            TraceOp::Free { id } => JsTraceOp {
                op: "free".into(),
                id: id as u32,
                size: None,
                stream: None,
            },
        })
        .collect())
}

fn to_ops(trace: &[JsTraceOp]) -> Result<Vec<TraceOp>> {
    trace
        .iter()
        .enumerate()
        .map(|(i, t)| match t.op.as_str() {
            "alloc" => {
                let size = t
                    .size
                    .ok_or_else(|| invalid(format!("trace op {i}: alloc without a size")))?;
                if !(size >= 0.0 && size.fract() == 0.0 && size <= 9.007_199_254_740_992e15) {
                    return Err(invalid(format!(
                        "trace op {i}: size {size} is not a whole number of bytes"
                    )));
                }
                Ok(TraceOp::Alloc {
                    id: u64::from(t.id),
                    size: size as u64,
                    stream: t.stream.unwrap_or(0),
                })
            }
            "free" => Ok(TraceOp::Free {
                id: u64::from(t.id),
            }),
            other => Err(invalid(format!("trace op {i}: unknown op {other:?}"))),
        })
        .collect()
}

/// Replays `trace` through the allocator natively; `streams` trace streams are created.
#[napi(catch_unwind)]
pub fn replay_trace(
    allocator: &NativeAllocator,
    trace: Vec<JsTraceOp>,
    streams: u32,
    track_peaks: bool,
) -> Result<JsReplayReport> {
    let ops = to_ops(&trace)?;
    let streams: Vec<Stream> = (0..streams).map(|_| Stream::new()).collect();
    let r = replay(&*allocator.shared()?, &ops, &streams, track_peaks).map_err(js)?;
    Ok(JsReplayReport {
        ops: r.ops as f64,
        peak_requested: r.peak_requested as f64,
        peak_held: r.peak_held as f64,
        failed_allocs: r.failed_allocs as f64,
        elapsed_ns: r.elapsed_ns as f64,
    })
}

/// `iterations` alloc+free pairs of `size` bytes in a native loop; nanoseconds per pair.
/// The Rust-only baseline of the JS benchmark.
#[napi(catch_unwind)]
pub fn native_pair_ns(allocator: &NativeAllocator, size: f64, iterations: u32) -> Result<f64> {
    let a = allocator.shared()?;
    let start = std::time::Instant::now();
    for _ in 0..iterations {
        if let Some(p) = a.alloc(size as u64).map_err(js)? {
            a.free(p).map_err(js)?;
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / f64::from(iterations.max(1)))
}

/// One config's replay of a trace file, for `cuda-arena replay`.
#[napi(object)]
pub struct JsFileReplay {
    /// The config as full `arena.*` pairs, `[key, value]`.
    pub config: Vec<Vec<String>>,
    pub ops: f64,
    pub peak_requested: f64,
    pub peak_held: f64,
    pub failed_allocs: f64,
    pub elapsed_ns: f64,
    pub stats: crate::convert::JsStats,
    /// `[op, held, inUse, requested]` every so many ops.
    pub samples: Vec<Vec<f64>>,
    /// Regions and chunks after the replay.
    pub memory_log: crate::convert::JsMemoryLog,
}

/// A trace file replayed under one or more configs.
#[napi(object)]
pub struct JsFileReplays {
    pub lines_skipped: Vec<String>,
    pub parse_ns: f64,
    pub runs: Vec<JsFileReplay>,
}

/// Reads and parses the trace at `path` (JSON lines), then replays it through a fresh
/// allocator per config on `backend` (`virtual` or `cuda`), reading the stats `samples` times,
/// and drawing a progress bar on stderr for replays longer than `progress_after_ms` (0: never).
#[napi(catch_unwind)]
pub fn replay_trace_file(
    path: String,
    backend: String,
    configs: Vec<std::collections::HashMap<String, String>>,
    lenient: bool,
    samples: u32,
    progress_after_ms: u32,
) -> Result<JsFileReplays> {
    use cuda_arena_core::trace::{replay_observed, replay_sampled};
    use cuda_arena_core::trace_format::parse_trace;
    use cuda_arena_core::{
        Allocator, Arena, ArenaConfig, Backend, MemoryKind, SimBackend, SimKind,
    };
    let started = std::time::Instant::now();
    let text =
        std::fs::read_to_string(&path).map_err(|e| invalid(format!("cannot read {path}: {e}")))?;
    let parsed = parse_trace(&text, lenient).map_err(|e| invalid(format!("{path}:{e}")))?;
    let parse_ns = started.elapsed().as_nanos() as f64;
    let mut runs = Vec::new();
    let total = configs.len();
    for pairs in configs {
        let mut sorted: Vec<_> = pairs.into_iter().collect();
        sorted.sort();
        let config = ArenaConfig::from_pairs(sorted).map_err(js)?;
        let backend_impl: std::sync::Arc<dyn Backend> = match backend.as_str() {
            "virtual" => std::sync::Arc::new(SimBackend::new(SimKind::Virtual, &[])),
            "cuda" => std::sync::Arc::new(cuda_sys_bridge::CudaBackend::new().map_err(js)?),
            other => {
                return Err(invalid(format!(
                    "backend must be 'cuda' or 'virtual', got {other:?}"
                )))
            }
        };
        let every = (parsed.ops.len() / samples.max(1) as usize).max(1);
        // A pass that reads the stats after every allocation finds the exact peak held; the
        // timed pass, on a fresh arena, reads them only for the samples.
        let peak = {
            let raw = backend_impl.raw(MemoryKind::Cuda, 0).map_err(js)?;
            let arena = Arena::new(raw, config.clone()).map_err(js)?;
            replay_sampled(&arena, &parsed.ops, &[], true, 0)
                .map_err(js)?
                .0
        };
        let raw = backend_impl.raw(MemoryKind::Cuda, 0).map_err(js)?;
        let arena = Arena::new(raw, config.clone()).map_err(js)?;
        let label = format!("config {}/{}", runs.len() + 1, total);
        let mut bar = Progress::new(progress_after_ms, label, parsed.ops.len() as u64);
        let (mut r, s) = replay_observed(&arena, &parsed.ops, &[], false, every, &mut |x| {
            bar.update(x.op)
        })
        .map_err(js)?;
        bar.finish();
        r.peak_held = peak.peak_held;
        runs.push(JsFileReplay {
            config: config
                .to_pairs()
                .into_iter()
                .map(|(k, v)| vec![k.to_string(), v])
                .collect(),
            ops: r.ops as f64,
            peak_requested: r.peak_requested as f64,
            peak_held: r.peak_held as f64,
            failed_allocs: r.failed_allocs as f64,
            elapsed_ns: r.elapsed_ns as f64,
            stats: arena.stats().into(),
            samples: s
                .iter()
                .map(|x| {
                    vec![
                        x.op as f64,
                        x.held as f64,
                        x.in_use as f64,
                        x.requested as f64,
                    ]
                })
                .collect(),
            memory_log: arena.memory_log().into(),
        });
    }
    Ok(JsFileReplays {
        lines_skipped: parsed
            .skipped
            .iter()
            .map(|e| format!("{path}:{e}"))
            .collect(),
        parse_ns,
        runs,
    })
}

/// A progress bar on stderr, drawn only when asked (`after_ms > 0`: the caller checks that
/// stderr is a terminal) and only once a replay has run that long.
struct Progress {
    after: Option<std::time::Duration>,
    label: String,
    total: u64,
    started: std::time::Instant,
    drawn: bool,
}

impl Progress {
    fn new(after_ms: u32, label: String, total: u64) -> Self {
        let after = (after_ms > 0).then(|| std::time::Duration::from_millis(u64::from(after_ms)));
        Progress {
            after,
            label,
            total: total.max(1),
            started: std::time::Instant::now(),
            drawn: false,
        }
    }

    fn update(&mut self, done: u64) {
        match self.after {
            Some(after) if self.started.elapsed() >= after => {}
            _ => return,
        }
        use std::io::Write;
        let filled = (30 * done / self.total) as usize;
        let _ = write!(
            std::io::stderr(),
            "\r{} [{}{}] {:>3}%",
            self.label,
            "#".repeat(filled),
            " ".repeat(30 - filled),
            100 * done / self.total
        );
        self.drawn = true;
    }

    fn finish(&mut self) {
        if self.drawn {
            use std::io::Write;
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Writes a generated trace of `kind` (`inference`, `mixed`, `small`, `growing`) to `path`.
#[napi(catch_unwind)]
pub fn write_trace_file(path: String, kind: String, ops: u32, seed: f64) -> Result<f64> {
    let trace =
        cuda_arena_core::trace::named_trace(&kind, ops as usize, seed as u64).ok_or_else(|| {
            invalid(format!(
                "trace kind must be inference, mixed, small or growing, got {kind:?}"
            ))
        })?;
    std::fs::write(&path, cuda_arena_core::trace_format::format_trace(&trace))
        .map_err(|e| invalid(format!("cannot write {path}: {e}")))?;
    Ok(trace.len() as f64)
}
