//! Trace generation and replay in Rust, for benchmarks and the `cuda-arena` command: the
//! loop runs natively, so the binding's per-call cost is not in its figures. Counts, sizes
//! and ids come in as JS numbers (`f64`) and are checked here, so none is wrapped or
//! truncated on the way in (napi's `u32` conversion takes 2^32+3 as 3 and -1 as 2^32-1),
//! and nothing is allocated in proportion to a value before it is checked.

use crate::allocator::NativeAllocator;
use crate::error::{invalid, js, Result};
use cuda_arena_core::devices::factory::{selected_allocator, Selected};
use cuda_arena_core::trace::picture::{Picture, PictureOptions, PictureRecorder};
use cuda_arena_core::trace::torch_snapshot::{
    looks_like_pickle, read_snapshot_from, SnapshotError, SnapshotReport, MAX_SNAPSHOT_BYTES,
};
use cuda_arena_core::trace::trace_format::{
    parse_trace_reader, write_trace, ParsedTrace, MAX_TRACE_LINES,
};
use cuda_arena_core::trace::{
    mixed_trace, named_trace, replay_observed, replay_with, ReplayOptions, ReplayReport, TraceOp,
    TraceStreams, MAX_TRACE_STREAMS,
};
use cuda_arena_core::{ArenaConfig, Backend, MemoryKind, SharedKind};
use cuda_sys_bridge::{backend_named, unknown_backend};
use napi::bindgen_prelude::{BigUint64Array, Float64Array};
use napi_derive::napi;
use std::io::Write;
use std::sync::Arc;

/// The most operations of a trace generated for JS or replayed from a JS array: a generated
/// op takes about 150 bytes of JS heap (`mixedTrace(1e6)` measured 144 MB), so ten million
/// fit in Node's default heap with room to spare.
pub const MAX_JS_TRACE_OPS: u32 = 10_000_000;

/// 2^53 − 1: JS numbers are exact integers up to here.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// `v` as a whole number in `min ..= max` (`max` at most 2^53 − 1), else an invalid argument
/// naming `name`.
fn whole(name: &str, v: f64, min: f64, max: f64) -> Result<u64> {
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

/// One config's replay of a trace file, for `cuda-arena replay`.
#[napi(object)]
pub struct JsFileReplay {
    /// The config as full `arena.*` pairs, `[key, value]`.
    pub config: Vec<Vec<String>>,
    /// What the config selected: `arena` or `memory pool`.
    pub allocator: String,
    /// Warnings from selecting it (the pool falling back to the arena).
    pub warnings: Vec<String>,
    pub ops: f64,
    pub peak_requested: f64,
    pub peak_held: f64,
    pub failed_allocs: f64,
    /// Allocations the trace left live (freed after the replay).
    pub live_at_end: f64,
    pub elapsed_ns: f64,
    pub stats: crate::convert::JsStats,
    /// `[op, held, inUse, requested]` every so many ops.
    pub samples: Vec<Vec<f64>>,
    /// Regions and chunks after the replay (none for a memory pool).
    pub memory_log: crate::convert::JsMemoryLog,
    /// The allocator's own memory log at each op asked for (`options.memoryLogAt`), streams
    /// given as trace stream numbers.
    pub memory_logs_at: Vec<JsMemoryLogAt>,
    /// The memory at every op (`options.picture`).
    pub picture: Option<JsPicture>,
}

/// The allocator's memory log after the trace's first `op` operations.
#[napi(object)]
pub struct JsMemoryLogAt {
    pub op: f64,
    pub memory_log: crate::convert::JsMemoryLog,
}

/// What the memory looked like after each op of a replay
/// (`cuda_arena_core::trace::picture`), flat: op `k` means the allocator after the trace's
/// first `k` operations; a `died` of -1 means still there at the end. Numbers are exact
/// (bytes and addresses below 2^53).
#[napi(object)]
pub struct JsPicture {
    /// Operations replayed.
    pub ops: f64,
    /// Eight numbers per alloc or reserve, in trace order: born (the first op it is live
    /// at), died, address, size handed out (its chunk), size requested, trace stream
    /// number (0: none), reserve (1 or 0), failed (1 when refused for lack of memory).
    pub allocs: Float64Array,
    /// Five numbers per region (or mapped extent): born, died, id, base, size.
    pub regions: Float64Array,
    /// Five numbers per free chunk that a stream owns: born, died, address, size, stream.
    /// Every other byte of a region that no allocation holds is a free chunk no stream owns.
    pub stream_free: Float64Array,
    /// Two numbers per change of the bytes held from the device: op, bytes.
    pub held: Float64Array,
    /// The first op at which the most bytes were held.
    pub peak_held_at: f64,
    /// How many times the followed free chunks were checked against the memory log.
    pub checks: f64,
    /// How many times they differed from it (each time they were read again from the
    /// allocator), and the first ops where they did.
    pub mismatches: f64,
    pub mismatched_at: Vec<f64>,
}

/// `None` as -1, for a `died` that never came.
fn died(d: Option<u64>) -> f64 {
    d.map_or(-1.0, |d| d as f64)
}

impl From<Picture> for JsPicture {
    fn from(p: Picture) -> Self {
        let allocs = p
            .allocs
            .iter()
            .flat_map(|a| {
                [
                    a.born as f64,
                    died(a.died),
                    a.addr as f64,
                    a.size as f64,
                    a.requested as f64,
                    f64::from(a.stream),
                    f64::from(u8::from(a.reserve)),
                    f64::from(u8::from(a.failed)),
                ]
            })
            .collect();
        let regions = p
            .regions
            .iter()
            .flat_map(|r| {
                [
                    r.born as f64,
                    died(r.died),
                    r.id as f64,
                    r.base as f64,
                    r.size as f64,
                ]
            })
            .collect();
        let stream_free = p
            .stream_free
            .iter()
            .flat_map(|f| {
                [
                    f.born as f64,
                    died(f.died),
                    f.addr as f64,
                    f.size as f64,
                    f64::from(f.stream),
                ]
            })
            .collect();
        let held = p
            .held
            .iter()
            .flat_map(|&(op, bytes)| [op as f64, bytes as f64])
            .collect();
        JsPicture {
            ops: p.ops as f64,
            allocs: Float64Array::new(allocs),
            regions: Float64Array::new(regions),
            stream_free: Float64Array::new(stream_free),
            held: Float64Array::new(held),
            peak_held_at: p.peak_held_at as f64,
            checks: p.checks as f64,
            mismatches: p.mismatches as f64,
            mismatched_at: p.mismatched_at.iter().map(|&m| m as f64).collect(),
        }
    }
}

/// A trace file replayed under one or more configs.
#[napi(object)]
pub struct JsFileReplays {
    /// The first skipped lines' errors (`--lenient`), as `file:line N: why`.
    pub lines_skipped: Vec<String>,
    /// How many lines were skipped in all.
    pub lines_skipped_count: f64,
    pub parse_ns: f64,
    pub runs: Vec<JsFileReplay>,
    /// For a PyTorch memory snapshot: what its reader replayed, skipped and counted; absent
    /// for a trace file.
    pub snapshot: Option<JsSnapshotReport>,
}

/// What reading a PyTorch memory snapshot did (`cuda_arena_core::trace::torch_snapshot`).
#[napi(object)]
pub struct JsSnapshotReport {
    /// The device replayed.
    pub device: u32,
    /// Events per device, for every device in the snapshot.
    pub device_events: Vec<f64>,
    /// `alloc` events replayed.
    pub allocs: f64,
    /// `free_requested` events replayed.
    pub frees: f64,
    /// `free_requested` events of blocks allocated before the history starts: skipped.
    pub unknown_frees: f64,
    /// `alloc` events at an address still live: the live block was freed first.
    pub live_address_allocs: f64,
    /// `alloc` events of size 0: skipped.
    pub zero_size_allocs: f64,
    /// Blocks live after the last event: freed at the end of the trace.
    pub freed_at_end: f64,
    /// `free_completed` events: not replayed.
    pub free_completed: f64,
    /// `segment_*` events: not replayed.
    pub segment_events: f64,
    /// `snapshot`, `oom` and unknown events: not replayed.
    pub other_events: f64,
    /// Torch's stream (a `cudaStream_t` as a number) of each trace stream, from 1.
    pub streams: Vec<f64>,
}

impl From<&SnapshotReport> for JsSnapshotReport {
    fn from(r: &SnapshotReport) -> Self {
        JsSnapshotReport {
            // Devices are counted by the snapshot's list, far below 2^32.
            device: u32::try_from(r.device).unwrap_or(u32::MAX),
            device_events: r.device_events.iter().map(|&n| n as f64).collect(),
            allocs: r.allocs as f64,
            frees: r.frees as f64,
            unknown_frees: r.unknown_frees as f64,
            live_address_allocs: r.live_address_allocs as f64,
            zero_size_allocs: r.zero_size_allocs as f64,
            freed_at_end: r.freed_at_end as f64,
            free_completed: r.free_completed as f64,
            segment_events: r.segment_events as f64,
            other_events: r.other_events as f64,
            // Handles are pointers, exact as JS numbers.
            streams: r.streams.iter().map(|&s| s as f64).collect(),
        }
    }
}

/// `arena` or `memory pool`: what the command calls the allocator a config selected.
fn allocator_name(kind: SharedKind) -> &'static str {
    match kind {
        SharedKind::Mempool => "memory pool",
        _ => "arena",
    }
}

/// The backends a replay runs on: `host` is left out, as a trace's sizes would be real memory.
const REPLAY_BACKENDS: [&str; 2] = ["cuda", "virtual"];

fn backend_for(name: &str) -> Result<Arc<dyn Backend>> {
    if !REPLAY_BACKENDS.contains(&name) {
        return Err(js(unknown_backend(name, &REPLAY_BACKENDS)));
    }
    backend_named(name, &[]).map_err(js)
}

/// How `replay_trace_file` reads and replays.
#[napi(object)]
pub struct JsReplayFileOptions {
    /// Skip malformed lines of a trace file and count them.
    pub lenient: bool,
    /// How many times to read the stats over a replay.
    pub samples: u32,
    /// Draw a progress bar on stderr for replays longer than this (0: never).
    pub progress_after_ms: u32,
    /// The most lines a trace file may have.
    pub max_lines: f64,
    /// A snapshot's device to replay (default: the one with the most events).
    pub device: Option<u32>,
    /// Also record what the memory looked like after every op (`JsFileReplay.picture`),
    /// for the `--html` page: an extra, untimed pass per config. At most
    /// `MAX_PICTURE_OPS` operations.
    pub picture: Option<bool>,
    /// Ops (0 … the trace's length) to take each config's memory log at
    /// (`JsFileReplay.memoryLogsAt`): op `k` is the allocator after the first `k` operations.
    pub memory_log_at: Option<Vec<f64>>,
}

/// The most operations a replay records a picture of (`options.picture`): what the `--html`
/// page of a trace this long weighs is in docs/replay-report.md.
pub const MAX_PICTURE_OPS: u32 = 10_000_000;

/// Reads the trace at `path`: a PyTorch memory snapshot when its first byte is a pickle's
/// (decoded as it is read, at most `MAX_SNAPSHOT_BYTES`; `options.device` picks the device, default the
/// one with the most events), else JSON lines (streamed: a line over 4 KiB or more than
/// `options.max_lines` lines stop it; `options.device` must be absent). An empty file is
/// neither. Then replays it through a fresh allocator per config on `backend` (`virtual` or
/// `cuda`): the one the config selects, the arena or the memory pool. Each distinct trace
/// stream number gets its own stream. Reads the stats `options.samples` times and draws a
/// progress bar on stderr for replays longer than `options.progress_after_ms` (0: never).
/// The backend and every config are checked before the file is read.
#[napi(catch_unwind)]
pub fn replay_trace_file(
    path: String,
    backend: String,
    configs: Vec<std::collections::HashMap<String, String>>,
    options: JsReplayFileOptions,
) -> Result<JsFileReplays> {
    let JsReplayFileOptions {
        lenient,
        samples,
        progress_after_ms,
        max_lines,
        device,
        picture,
        memory_log_at,
    } = options;
    let max_lines = whole("maxLines", max_lines, 0.0, MAX_TRACE_LINES as f64)? as usize;
    let picture = picture.unwrap_or(false);
    let memory_log_at = memory_log_at
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, &op)| {
            whole(
                &format!("memoryLogAt[{i}]"),
                op,
                0.0,
                MAX_TRACE_LINES as f64,
            )
        })
        .collect::<Result<Vec<u64>>>()?;
    backend_for(&backend)?;
    let configs = configs
        .into_iter()
        .map(|pairs| {
            let mut sorted: Vec<_> = pairs.into_iter().collect();
            sorted.sort();
            let config = ArenaConfig::from_pairs(sorted).map_err(js)?;
            config.validate().map_err(js)?;
            Ok(config)
        })
        .collect::<Result<Vec<_>>>()?;
    let started = std::time::Instant::now();
    let cannot_read = |e: &dyn std::fmt::Display| invalid(format!("cannot read {path}: {e}"));
    let file = std::fs::File::open(&path).map_err(|e| cannot_read(&e))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(cannot_read(&"it is a directory"));
    }
    // A bar for reading a big file; a pipe has no size, and no bar.
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.len());
    let mut bar = Progress::new(
        if size > 0 { progress_after_ms } else { 0 },
        "reading".into(),
        size,
    );
    let reader = std::io::BufReader::with_capacity(
        1 << 16,
        Counted {
            inner: file,
            read: 0,
            bar: &mut bar,
        },
    );
    let read = read_trace(&path, reader, size, lenient, max_lines, device);
    bar.finish();
    let (parsed, snapshot) = read?;
    let parse_ns = started.elapsed().as_nanos() as f64;
    let ops = parsed.ops.len() as u64;
    if let Some(op) = memory_log_at.iter().find(|&&op| op > ops) {
        return Err(invalid(format!(
            "a memory log was asked for after op {op}, and the trace has {ops} operations"
        )));
    }
    if picture && ops > u64::from(MAX_PICTURE_OPS) {
        return Err(invalid(format!(
            "a picture (--html) is recorded for traces of up to {MAX_PICTURE_OPS} operations, \
             and this one has {ops}: replay a part of it"
        )));
    }
    let pictured = picture || !memory_log_at.is_empty();
    let mut runs = Vec::new();
    let total = configs.len();
    for config in configs {
        let backend_impl = backend_for(&backend)?;
        let select = || selected_allocator(&*backend_impl, MemoryKind::Cuda, 0, &config);
        let every = (parsed.ops.len() / samples.max(1) as usize).max(1);
        // A pass that reads the stats after every allocation finds the exact peak held; the
        // timed pass, on a fresh allocator, reads them only for the samples.
        // With a picture, the same pass records it (it reads the stats after every op).
        let (peak, pictured) = {
            let Selected {
                allocator,
                kind,
                warnings: _,
            } = select().map_err(js)?;
            let streams = TraceStreams::for_trace(&parsed.ops).map_err(js)?;
            let label = format!("config {}/{} (peaks)", runs.len() + 1, total);
            let mut bar = Progress::new(progress_after_ms, label, parsed.ops.len() as u64);
            let mut recorder = pictured.then(|| {
                PictureRecorder::new(PictureOptions {
                    layout: kind != SharedKind::Mempool,
                    memory_logs_at: memory_log_at.clone(),
                    check_every: (ops / 16).max(1),
                })
            });
            let replayed = replay_with(
                &*allocator,
                &parsed.ops,
                &streams,
                ReplayOptions {
                    track_peaks: true,
                    sample_every: every,
                    on_sample: Some(&mut |x| bar.update(x.op)),
                    observer: recorder
                        .as_mut()
                        .map(|r| r as &mut dyn cuda_arena_core::trace::ReplayObserver),
                },
            );
            bar.finish();
            (
                replayed.map_err(js)?.0,
                recorder.map(PictureRecorder::finish),
            )
        };
        let Selected {
            allocator,
            kind,
            warnings,
        } = select().map_err(js)?;
        let streams = TraceStreams::for_trace(&parsed.ops).map_err(js)?;
        let label = format!("config {}/{}", runs.len() + 1, total);
        let mut bar = Progress::new(progress_after_ms, label, parsed.ops.len() as u64);
        let replayed =
            replay_observed(&*allocator, &parsed.ops, &streams, false, every, &mut |x| {
                bar.update(x.op)
            });
        bar.finish();
        let (mut r, s) = replayed.map_err(js)?;
        r.peak_held = peak.peak_held;
        let r = JsReplayReport::from(r);
        runs.push(JsFileReplay {
            config: config
                .to_pairs()
                .into_iter()
                .map(|(k, v)| vec![k.to_string(), v])
                .collect(),
            allocator: allocator_name(kind).to_string(),
            warnings,
            ops: r.ops,
            peak_requested: r.peak_requested,
            peak_held: r.peak_held,
            failed_allocs: r.failed_allocs,
            live_at_end: r.live_at_end,
            elapsed_ns: r.elapsed_ns,
            stats: allocator.stats().into(),
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
            memory_log: allocator.memory_log().into(),
            memory_logs_at: pictured
                .as_ref()
                .map(|p| {
                    p.memory_logs
                        .iter()
                        .map(|(op, log)| JsMemoryLogAt {
                            op: *op as f64,
                            memory_log: log.clone().into(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            picture: pictured.filter(|_| picture).map(JsPicture::from),
        });
    }
    Ok(JsFileReplays {
        lines_skipped: parsed
            .skipped
            .iter()
            .map(|e| format!("{path}:{e}"))
            .collect(),
        lines_skipped_count: parsed.skipped_lines as f64,
        parse_ns,
        runs,
        snapshot: snapshot.as_ref().map(JsSnapshotReport::from),
    })
}

/// The trace in `reader` (the file `path`, of `size` bytes when it is a regular file, else 0),
/// told by its first byte: a PyTorch memory snapshot (a pickle starts with 0x80, which no
/// UTF-8 text does), or JSON lines.
fn read_trace(
    path: &str,
    mut reader: impl std::io::BufRead,
    size: u64,
    lenient: bool,
    max_lines: usize,
    device: Option<u32>,
) -> Result<(ParsedTrace, Option<SnapshotReport>)> {
    let cannot_read = |e: &dyn std::fmt::Display| invalid(format!("cannot read {path}: {e}"));
    let first = loop {
        match reader.fill_buf() {
            Ok(bytes) => break bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(cannot_read(&e)),
        }
    };
    if first.is_empty() {
        return Err(invalid(format!(
            "{path} is empty: neither a trace (JSON lines) nor a PyTorch memory snapshot"
        )));
    }
    if !looks_like_pickle(first) {
        if let Some(d) = device {
            return Err(invalid(format!(
                "--device {d} is for PyTorch memory snapshots, and {path} is a trace (JSON lines)"
            )));
        }
        let parsed = parse_trace_reader(reader, lenient, max_lines)
            .map_err(|e| invalid(format!("{path}:{e}")))?;
        return Ok((parsed, None));
    }
    let too_big = |what: String| {
        invalid(format!(
            "{path}: {what}, more than the {MAX_SNAPSHOT_BYTES} bytes a PyTorch memory snapshot \
             is read up to (record a shorter history: a smaller max_entries, or context=None)"
        ))
    };
    if size > MAX_SNAPSHOT_BYTES {
        return Err(too_big(format!("{size} bytes")));
    }
    // Decoded as it is read: the reader keeps only the events, whatever else the file holds.
    // A pipe that gives more than the maximum is stopped there.
    let trace = read_snapshot_from(reader, device.map(|d| d as usize)).map_err(|e| match e {
        SnapshotError::TooLarge { .. } => too_big("more bytes".into()),
        other => invalid(format!("{path}: {other}")),
    })?;
    Ok((
        ParsedTrace {
            ops: trace.ops,
            ..ParsedTrace::default()
        },
        Some(trace.report),
    ))
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
        // A file that grows while it is read must not overfill the bar.
        let done = done.min(self.total);
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
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// A reader that moves a progress bar by the bytes read through it.
struct Counted<'a, R> {
    inner: R,
    read: u64,
    bar: &'a mut Progress,
}

impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        self.bar.update(self.read);
        Ok(n)
    }
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
    if named_trace(&kind, 0, seed).is_none() {
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
    let trace = named_trace(&kind, ops, seed).unwrap_or_default();
    match write_trace(&trace, std::io::BufWriter::with_capacity(1 << 16, out)) {
        Ok(()) => Ok(trace.len() as f64),
        Err(e) if path.is_none() && e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(trace.len() as f64)
        }
        Err(e) => Err(cannot_write(
            path.as_deref().unwrap_or("standard output"),
            e,
        )),
    }
}
