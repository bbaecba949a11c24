//! What a recording did: the answer of `Allocator::stop_recording` (the recorder in
//! `trace/recorder.rs` fills it in; here so that the `Allocator` trait needs nothing of `trace`).

/// What a recording did, for `stopRecording()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordingSummary {
    /// Where the trace went (the path, or the name given with a sink).
    pub path: String,
    /// Operations written (whole lines in the file).
    pub ops: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Allocations and reserves that failed: the allocator changed nothing, and they are not
    /// in the trace.
    pub failed_allocs: u64,
    /// Frees of allocations made before the recording started: not in the trace.
    pub untracked_frees: u64,
    /// Allocations of the recording still live when it stopped (a replay frees them at the
    /// end, as its `liveAtEnd`).
    pub live_at_stop: u64,
    /// The largest sum of requested bytes (allocations and reserves of the recording) live at
    /// once: what a replay of the trace reports as its peak requested.
    pub peak_requested: u64,
    /// Why the recording stopped early (a write error, too many streams), if it did.
    pub error: Option<String>,
}
