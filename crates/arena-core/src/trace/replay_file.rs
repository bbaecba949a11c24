//! Replaying a trace file under one or more configs: what `cuda-arena replay` does, as a
//! library function every entry point calls (Node, C, Rust). The file is told by its first
//! byte (a PyTorch memory snapshot, decoded as it is read, or JSON lines, streamed); each
//! config gets a fresh allocator for a pass that finds the exact peak held (and records the
//! picture, when asked) and another, on a fresh allocator, that is timed.

use crate::allocators::allocator::Allocator;
use crate::trace::picture::{Picture, PictureOptions, PictureRecorder};
use crate::trace::torch_snapshot::{
    looks_like_pickle, read_snapshot_from, SnapshotError, SnapshotReport, MAX_SNAPSHOT_BYTES,
};
use crate::trace::trace_format::{parse_trace_reader, ParsedTrace, MAX_TRACE_LINES};
use crate::trace::{
    replay_observed, replay_with, ReplayObserver, ReplayOptions, ReplayReport, Sample, TraceStreams,
};
use crate::types::config::ArenaConfig;
use crate::types::error::escaped;
use crate::types::error::{ArenaError, Result};
use crate::types::memory_log::MemoryLog;
use crate::types::stats::AllocatorStats;
use std::io::{BufRead, Read};
use std::sync::Arc;

/// The most operations a replay records a picture of ([`FileReplayOptions::picture`]): what
/// the `--html` page of a trace this long weighs is in docs/replay-report.md.
pub const MAX_PICTURE_OPS: u64 = 10_000_000;

/// How [`replay_file`] reads and replays.
#[derive(Debug, Clone, Default)]
pub struct FileReplayOptions {
    /// Skip malformed lines of a JSON-lines trace and count them.
    pub lenient: bool,
    /// How many times to read the stats over a replay.
    pub samples: u32,
    /// The most lines a JSON-lines trace may have (at most [`MAX_TRACE_LINES`]).
    pub max_lines: usize,
    /// A snapshot's device to replay (default: the one with the most events); refused for a
    /// JSON-lines trace.
    pub device: Option<u32>,
    /// Also record what the memory looked like after every op ([`FileReplayRun::picture`]):
    /// done in the peak pass, at most [`MAX_PICTURE_OPS`] operations.
    pub picture: bool,
    /// Ops (0 … the trace's length) to take each config's memory log at
    /// ([`FileReplayRun::memory_logs_at`]): op `k` is the allocator after the first `k`.
    pub memory_log_at: Vec<u64>,
}

/// Where a long replay reports how far it got: reading the file (in bytes), then each pass
/// of each config (in operations).
pub trait Progress {
    /// A stage begins: `label` ("reading", "config 1/2 (peaks)", …) of `total` units (0:
    /// unknown, as for a pipe).
    fn begin(&mut self, label: &str, total: u64);
    /// `done` units of the stage are done.
    fn update(&mut self, done: u64);
    /// The stage is over.
    fn end(&mut self);
}

/// No progress reported.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&mut self, _: &str, _: u64) {}
    fn update(&mut self, _: u64) {}
    fn end(&mut self) {}
}

/// One config's replay of the file.
#[derive(Debug, Clone)]
pub struct FileReplayRun {
    /// The config, as given.
    pub config: ArenaConfig,
    /// `arena` or `memory pool`: the allocator the config selected.
    pub allocator: &'static str,
    /// What the factory warned of (a fallback, a key with no effect).
    pub warnings: Vec<String>,
    /// The timed pass, with the peak pass's exact peak held.
    pub report: ReplayReport,
    /// The allocator's stats at the end of the timed pass.
    pub stats: AllocatorStats,
    /// The samples of the timed pass.
    pub samples: Vec<Sample>,
    /// The memory log at the end of the timed pass.
    pub memory_log: MemoryLog,
    /// The memory logs asked for with [`FileReplayOptions::memory_log_at`].
    pub memory_logs_at: Vec<(u64, MemoryLog)>,
    /// The picture, when asked for.
    pub picture: Option<Picture>,
}

/// A trace file replayed under each config.
#[derive(Debug, Clone)]
pub struct FileReplays {
    /// The malformed lines skipped (lenient), each `path:line: reason`, the first few.
    pub lines_skipped: Vec<String>,
    /// How many lines were skipped.
    pub lines_skipped_count: u64,
    /// Nanoseconds taken to read and parse the file.
    pub parse_ns: f64,
    /// One per config, in order.
    pub runs: Vec<FileReplayRun>,
    /// What reading a PyTorch memory snapshot did; `None` for JSON lines.
    pub snapshot: Option<SnapshotReport>,
}

/// A fresh allocator a config selected, to replay the trace on (see
/// `devices::replay_target` for the one `cuda-arena replay` uses).
pub struct ReplayTarget {
    /// The allocator, new and not shared.
    pub allocator: Arc<dyn Allocator>,
    /// Whether it is the memory pool (no regions to draw: the picture has no layout).
    pub is_pool: bool,
    /// What selecting it warned of.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for ReplayTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayTarget")
            .field("is_pool", &self.is_pool)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// `arena` or `memory pool`: what the command calls the allocator a config selected.
pub fn allocator_name(is_pool: bool) -> &'static str {
    if is_pool {
        "memory pool"
    } else {
        "arena"
    }
}

/// Replays the trace file at `path` through fresh allocators `select` makes for each config
/// (two per config: the peak pass and the timed pass). Each distinct trace stream number gets
/// its own stream. Every config is checked before the file is read.
pub fn replay_file(
    path: &str,
    select: &dyn Fn(&ArenaConfig) -> Result<ReplayTarget>,
    configs: &[ArenaConfig],
    options: &FileReplayOptions,
    progress: &mut dyn Progress,
) -> Result<FileReplays> {
    for config in configs {
        config.validate()?;
    }
    if options.max_lines > MAX_TRACE_LINES {
        return Err(ArenaError::invalid_argument(format!(
            "at most {MAX_TRACE_LINES} lines may be read, asked for {}",
            options.max_lines
        )));
    }
    let started = std::time::Instant::now();
    let (parsed, snapshot) = read_trace_file(path, options, progress)?;
    let parse_ns = started.elapsed().as_nanos() as f64;
    let ops = parsed.ops.len() as u64;
    if let Some(op) = options.memory_log_at.iter().find(|&&op| op > ops) {
        return Err(ArenaError::invalid_argument(format!(
            "a memory log was asked for after op {op}, and the trace has {ops} operations"
        )));
    }
    if options.picture && ops > MAX_PICTURE_OPS {
        return Err(ArenaError::invalid_argument(format!(
            "a picture (--html) is recorded for traces of up to {MAX_PICTURE_OPS} operations, \
             and this one has {ops}: replay a part of it"
        )));
    }
    let mut runs = Vec::with_capacity(configs.len());
    for (i, config) in configs.iter().enumerate() {
        let label = format!("config {}/{}", i + 1, configs.len());
        runs.push(replay_one(
            &parsed, select, config, options, &label, progress,
        )?);
    }
    Ok(FileReplays {
        lines_skipped: parsed
            .skipped
            .iter()
            .map(|e| format!("{}:{e}", escaped(path)))
            .collect(),
        lines_skipped_count: parsed.skipped_lines as u64,
        parse_ns,
        runs,
        snapshot,
    })
}

/// One config: a pass that reads the stats after every allocation for the exact peak held
/// (and records the picture, which reads them after every op), then the timed pass on a
/// fresh allocator, reading them only for the samples.
fn replay_one(
    parsed: &ParsedTrace,
    select: &dyn Fn(&ArenaConfig) -> Result<ReplayTarget>,
    config: &ArenaConfig,
    options: &FileReplayOptions,
    label: &str,
    progress: &mut dyn Progress,
) -> Result<FileReplayRun> {
    let ops = parsed.ops.len() as u64;
    let every = (parsed.ops.len() / options.samples.max(1) as usize).max(1);
    let wants_picture = options.picture || !options.memory_log_at.is_empty();
    let (peak, picture) = {
        let ReplayTarget {
            allocator, is_pool, ..
        } = select(config)?;
        let streams = TraceStreams::for_trace(&parsed.ops)?;
        let mut recorder = wants_picture.then(|| {
            PictureRecorder::new(PictureOptions {
                layout: !is_pool,
                memory_logs_at: options.memory_log_at.clone(),
                check_every: (ops / 16).max(1),
            })
        });
        progress.begin(&format!("{label} (peaks)"), ops);
        let replayed = replay_with(
            &*allocator,
            &parsed.ops,
            &streams,
            ReplayOptions {
                track_peaks: true,
                sample_every: every,
                on_sample: Some(&mut |x| progress.update(x.op)),
                observer: recorder.as_mut().map(|r| r as &mut dyn ReplayObserver),
            },
        );
        progress.end();
        (replayed?.0, recorder.map(PictureRecorder::finish))
    };
    let ReplayTarget {
        allocator,
        is_pool,
        warnings,
    } = select(config)?;
    let streams = TraceStreams::for_trace(&parsed.ops)?;
    progress.begin(label, ops);
    let replayed = replay_observed(&*allocator, &parsed.ops, &streams, false, every, &mut |x| {
        progress.update(x.op)
    });
    progress.end();
    let (mut report, samples) = replayed?;
    report.peak_held = peak.peak_held;
    let memory_logs_at = picture
        .as_ref()
        .map(|p| p.memory_logs.clone())
        .unwrap_or_default();
    Ok(FileReplayRun {
        config: config.clone(),
        allocator: allocator_name(is_pool),
        warnings,
        report,
        stats: allocator.stats(),
        samples,
        memory_log: allocator.memory_log(),
        memory_logs_at,
        picture: picture.filter(|_| options.picture),
    })
}

/// Opens and reads the trace at `path` (see [`read_trace`]), reporting the bytes read.
fn read_trace_file(
    path: &str,
    options: &FileReplayOptions,
    progress: &mut dyn Progress,
) -> Result<(ParsedTrace, Option<SnapshotReport>)> {
    let cannot_read = |e: &dyn std::fmt::Display| {
        ArenaError::invalid_argument(format!("cannot read {}: {e}", escaped(path)))
    };
    let file = std::fs::File::open(path).map_err(|e| cannot_read(&e))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(cannot_read(&"it is a directory"));
    }
    // A pipe has no size.
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.len());
    progress.begin("reading", size);
    let reader = std::io::BufReader::with_capacity(
        1 << 16,
        Counted {
            inner: file,
            read: 0,
            progress: &mut *progress,
        },
    );
    let read = read_trace(
        path,
        reader,
        size,
        options.lenient,
        options.max_lines,
        options.device,
    );
    progress.end();
    read
}

/// The trace in `reader` (the file `path`, of `size` bytes when it is a regular file, else 0),
/// told by its first byte: a PyTorch memory snapshot (a pickle starts with 0x80, which no
/// UTF-8 text does), or JSON lines. An empty file is neither.
pub fn read_trace(
    path: &str,
    mut reader: impl BufRead,
    size: u64,
    lenient: bool,
    max_lines: usize,
    device: Option<u32>,
) -> Result<(ParsedTrace, Option<SnapshotReport>)> {
    let invalid = ArenaError::invalid_argument;
    // Named in messages only, escaped and cut: any path makes a short message.
    let path = escaped(path);
    let first = loop {
        match reader.fill_buf() {
            Ok(bytes) => break bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(invalid(format!("cannot read {path}: {e}"))),
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

/// A reader that reports the bytes read through it.
struct Counted<'a, R> {
    inner: R,
    read: u64,
    progress: &'a mut dyn Progress,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        self.progress.update(self.read);
        Ok(n)
    }
}
