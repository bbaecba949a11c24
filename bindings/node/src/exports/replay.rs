//! `cuda-arena replay`'s entry: the arguments checked, then
//! `cuda_arena_core::trace::replay_file` with a progress bar on stderr.

use super::replay_report::JsFileReplays;
use super::traces::whole;
use crate::error::{js, Result};
use cuda_arena_core::devices::replay_target::replay_target;
use cuda_arena_core::trace::replay_file::{replay_file, FileReplayOptions, Progress};
use cuda_arena_core::trace::trace_format::MAX_TRACE_LINES;
use cuda_arena_core::{ArenaConfig, Backend};
use cuda_sys_bridge::{backend_named, unknown_backend};
use napi_derive::napi;
use std::io::Write;
use std::sync::Arc;

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
    let options = FileReplayOptions {
        lenient,
        samples,
        max_lines,
        device,
        picture: picture.unwrap_or(false),
        memory_log_at,
    };
    let mut bar = StderrBar::new(progress_after_ms);
    let done = replay_file(
        &path,
        &|config| replay_target(&*backend_named(&backend, &[])?, config),
        &configs,
        &options,
        &mut bar,
    )
    .map_err(js)?;
    Ok(JsFileReplays::from(done))
}

/// A progress bar on stderr, drawn only when asked (`after_ms > 0`: the caller checks that
/// stderr is a terminal) and only once a stage has run that long; none for a stage of
/// unknown length (a pipe).
struct StderrBar {
    after: Option<std::time::Duration>,
    label: String,
    total: u64,
    started: std::time::Instant,
    drawn: bool,
}

impl StderrBar {
    fn new(after_ms: u32) -> Self {
        StderrBar {
            after: (after_ms > 0).then(|| std::time::Duration::from_millis(u64::from(after_ms))),
            label: String::new(),
            total: 0,
            started: std::time::Instant::now(),
            drawn: false,
        }
    }
}

impl Progress for StderrBar {
    fn begin(&mut self, label: &str, total: u64) {
        self.label = label.to_string();
        self.total = total;
        self.started = std::time::Instant::now();
        self.drawn = false;
    }

    fn update(&mut self, done: u64) {
        match self.after {
            Some(after) if self.total > 0 && self.started.elapsed() >= after => {}
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

    fn end(&mut self) {
        if std::mem::take(&mut self.drawn) {
            let _ = writeln!(std::io::stderr());
        }
    }
}
