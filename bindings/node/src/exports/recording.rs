//! Trace recording from JS: `startRecording(path)` / `stopRecording()` on an allocator handle.
//! The recording belongs to the shared allocator (arena-core's `RecordingAllocator`), so it
//! sees every user's calls: other handles, workers, C, ONNX Runtime.

use crate::allocator::NativeAllocator;
use crate::error::{js, Result};
use cuda_arena_core::RecordingSummary;
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;

/// What a recording did (`stopRecording()`).
#[napi(object)]
pub struct JsRecordingSummary {
    pub path: String,
    pub ops: BigInt,
    pub bytes: BigInt,
    pub failed_allocs: BigInt,
    pub untracked_frees: BigInt,
    pub live_at_stop: BigInt,
    pub peak_requested: BigInt,
    pub error: Option<String>,
}

impl From<RecordingSummary> for JsRecordingSummary {
    fn from(s: RecordingSummary) -> Self {
        JsRecordingSummary {
            path: s.path,
            ops: BigInt::from(s.ops),
            bytes: BigInt::from(s.bytes),
            failed_allocs: BigInt::from(s.failed_allocs),
            untracked_frees: BigInt::from(s.untracked_frees),
            live_at_stop: BigInt::from(s.live_at_stop),
            peak_requested: BigInt::from(s.peak_requested),
            error: s.error,
        }
    }
}

/// Starts recording the allocator's traffic to a new trace file at `path`.
#[napi(catch_unwind)]
pub fn start_recording(allocator: &NativeAllocator, path: String) -> Result<()> {
    // The allocator is taken out of the handle table first: no table lock is held while the
    // file is created.
    allocator.shared()?.start_recording(&path).map_err(js)
}

/// Stops the recording once everything recorded is written.
#[napi(catch_unwind)]
pub fn stop_recording(allocator: &NativeAllocator) -> Result<JsRecordingSummary> {
    allocator
        .shared()?
        .stop_recording()
        .map(JsRecordingSummary::from)
        .map_err(js)
}
