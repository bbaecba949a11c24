//! The report of `replay_trace_file` as JS sees it: `cuda_arena_core::trace::replay_file`'s
//! results with every number a JS number (exact below 2^53).

use super::traces::JsReplayReport;
use cuda_arena_core::trace::picture::Picture;
use cuda_arena_core::trace::replay_file::{FileReplayRun, FileReplays};
use cuda_arena_core::trace::torch_snapshot::SnapshotReport;
use napi::bindgen_prelude::Float64Array;
use napi_derive::napi;

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

impl From<FileReplays> for JsFileReplays {
    fn from(f: FileReplays) -> Self {
        JsFileReplays {
            lines_skipped: f.lines_skipped,
            lines_skipped_count: f.lines_skipped_count as f64,
            parse_ns: f.parse_ns,
            runs: f.runs.into_iter().map(JsFileReplay::from).collect(),
            snapshot: f.snapshot.as_ref().map(JsSnapshotReport::from),
        }
    }
}

impl From<FileReplayRun> for JsFileReplay {
    fn from(run: FileReplayRun) -> Self {
        let r = JsReplayReport::from(run.report);
        JsFileReplay {
            config: run
                .config
                .to_pairs()
                .into_iter()
                .map(|(k, v)| vec![k.to_string(), v])
                .collect(),
            allocator: run.allocator.to_string(),
            warnings: run.warnings,
            ops: r.ops,
            peak_requested: r.peak_requested,
            peak_held: r.peak_held,
            failed_allocs: r.failed_allocs,
            live_at_end: r.live_at_end,
            elapsed_ns: r.elapsed_ns,
            stats: run.stats.into(),
            samples: run
                .samples
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
            memory_log: run.memory_log.into(),
            memory_logs_at: run
                .memory_logs_at
                .into_iter()
                .map(|(op, log)| JsMemoryLogAt {
                    op: op as f64,
                    memory_log: log.into(),
                })
                .collect(),
            picture: run.picture.map(JsPicture::from),
        }
    }
}
