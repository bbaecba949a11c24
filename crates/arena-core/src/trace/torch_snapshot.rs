//! PyTorch memory snapshots as traces (issue 13): what `cuda-arena replay` reads from
//! `torch.cuda.memory._dump_snapshot()` pickles.
//!
//! With `torch.cuda.memory._record_memory_history(max_entries=N)` on, PyTorch's caching
//! allocator records its last `N` events per device; the snapshot's `device_traces` holds them,
//! one list per device, each event a dict `{action, addr, size, stream, ...}`. The request-level
//! events become the trace, so a replay sees what the program asked for, not what torch's own
//! cache did with it:
//!
//! - `alloc` → an [`TraceOp::Alloc`] of the requested `size`. Torch's streams become trace
//!   streams 1, 2, … in the order they first allocate (torch's default stream, `0`, included:
//!   torch allocates every block on a stream and reuses it on that stream, as a stream-aware
//!   arena does); more than [`MAX_TRACE_STREAMS`] is an error. An `alloc` of size 0 (torch
//!   records none) is skipped and counted.
//! - `free_requested` (the program freed the block) → a [`TraceOp::Free`].
//!   `free_completed` (torch's cache may reuse it, once the streams that used it are done) is
//!   torch's own bookkeeping: counted, not replayed.
//! - `segment_alloc`, `segment_free`, `segment_map`, `segment_unmap` (torch's cache asking the
//!   driver), `snapshot`, `oom` and any action a later torch adds: counted, not replayed.
//!
//! The history is a ring buffer, so two artefacts occur, and are counted: a `free_requested` of
//! an address no `alloc` in the history made (the block was allocated before the oldest event
//! kept) is skipped; blocks still live after the last event are freed at the end, so the replay
//! ends balanced. An `alloc` at an address that is still live cannot come from torch (it
//! freed that block first, and the free was lost): the live block is freed first, and counted.
//!
//! Reading is bounded: a snapshot is read as a stream, at most [`MAX_SNAPSHOT_BYTES`], by a
//! pickle machine of its own (`machine.rs`) that keeps of each value only what the replay
//! reads (`values.rs`): memory is the events (32 bytes each, at most [`MAX_SNAPSHOT_EVENTS`]),
//! two bytes per memoized value and at most [`MAX_PENDING_VALUES`] values pending, whatever
//! else the file holds, and time is linear in the file. (A general unpickler, `serde-pickle`
//! as before, builds the whole file first: 65 bytes of memory per byte of a snapshot padded
//! with what the replay never reads.) A file that is not a snapshot is
//! [`SnapshotError::NotASnapshot`], with what is wrong and where.

mod machine;
mod source;
mod values;

use crate::trace::{TraceOp, MAX_TRACE_STREAMS};
use std::collections::HashMap;
use std::fmt;

pub use machine::{MAX_OPEN_MARKS, MAX_PENDING_VALUES};
pub use values::MAX_SNAPSHOT_DEVICES;

/// The largest snapshot read, in bytes: what PyTorch writes for a long history with stack
/// traces is well below it.
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// The most events a snapshot may hold, all devices together: the most operations a trace
/// file may have.
pub const MAX_SNAPSHOT_EVENTS: u64 = crate::trace::trace_format::MAX_TRACE_LINES as u64;

/// Whether a file starting with `first` bytes is read as a pickle: its first byte is the
/// PROTO opcode (0x80), which no UTF-8 text starts with.
pub fn looks_like_pickle(first: &[u8]) -> bool {
    first.first() == Some(&0x80)
}

/// An event's `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// `alloc`: the program allocated `size` bytes at `addr`.
    Alloc,
    /// `free_requested`: the program freed the block at `addr`.
    FreeRequested,
    /// `free_completed`: torch's cache may reuse the block.
    FreeCompleted,
    /// `segment_alloc`: torch's cache took memory from the driver.
    SegmentAlloc,
    /// `segment_free`: torch's cache gave memory back.
    SegmentFree,
    /// `segment_map` (expandable segments).
    SegmentMap,
    /// `segment_unmap` (expandable segments).
    SegmentUnmap,
    /// `snapshot`: a snapshot was taken.
    Snapshot,
    /// `oom`: an allocation failed.
    Oom,
    /// Any other action.
    Other,
}

impl Action {
    /// The action named `name` in a snapshot.
    pub fn from_name(name: &str) -> Self {
        match name {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            _ => Action::Other,
        }
    }

    /// The name a snapshot gives the action (`other` for unknown ones).
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Other => "other",
        }
    }
}

/// What a replay needs of one event (0 for a field the event lacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotEvent {
    /// What happened.
    pub action: Action,
    /// The block's address.
    pub addr: u64,
    /// Bytes requested.
    pub size: u64,
    /// Torch's stream (a `cudaStream_t` as an integer; 0 for the default stream).
    pub stream: i64,
}

/// Why a snapshot cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotError {
    /// The file is not a PyTorch memory snapshot (or not one this reader takes).
    NotASnapshot(String),
    /// A snapshot, but not one that can be replayed as asked (no events, no such device, too
    /// many streams).
    Unusable(String),
    /// More than `limit` bytes: [`MAX_SNAPSHOT_BYTES`].
    TooLarge {
        /// The most bytes read.
        limit: u64,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::NotASnapshot(why) => write!(f, "not a PyTorch memory snapshot: {why}"),
            SnapshotError::Unusable(why) => f.write_str(why),
            SnapshotError::TooLarge { limit } => {
                write!(f, "more than the {limit} bytes a snapshot may have")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

/// What reading a snapshot did: the device chosen, and what was replayed, skipped and
/// counted. Every event of the device is in exactly one of the counts from `allocs` on, except
/// that `live_address_allocs` counts allocs also counted in `allocs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// The device replayed.
    pub device: usize,
    /// Events per device, for every device in the snapshot.
    pub device_events: Vec<u64>,
    /// `alloc` events replayed.
    pub allocs: u64,
    /// `free_requested` events replayed.
    pub frees: u64,
    /// `free_requested` events of blocks allocated before the history starts: skipped.
    pub unknown_frees: u64,
    /// `alloc` events at an address still live: the live block was freed first.
    pub live_address_allocs: u64,
    /// `alloc` events of size 0: skipped.
    pub zero_size_allocs: u64,
    /// Blocks still live after the last event: freed at the end of the trace.
    pub freed_at_end: u64,
    /// `free_completed` events: not replayed.
    pub free_completed: u64,
    /// `segment_*` events: not replayed.
    pub segment_events: u64,
    /// `snapshot`, `oom` and unknown events: not replayed.
    pub other_events: u64,
    /// Torch's stream of each trace stream: `streams[k - 1]` is trace stream `k`.
    pub streams: Vec<i64>,
}

/// A snapshot read as a trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotTrace {
    /// The trace.
    pub ops: Vec<TraceOp>,
    /// What was replayed, skipped and counted.
    pub report: SnapshotReport,
}

/// Decodes the snapshot pickle `bytes` into its events, one list per device (the index is
/// the device's ordinal).
pub fn decode_snapshot(bytes: &[u8]) -> Result<Vec<Vec<SnapshotEvent>>, SnapshotError> {
    if bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Err(SnapshotError::TooLarge {
            limit: MAX_SNAPSHOT_BYTES,
        });
    }
    decode_snapshot_from(bytes)
}

/// [`decode_snapshot`] from a stream (a file, a pipe), read as it is decoded: at most
/// [`MAX_SNAPSHOT_BYTES`] are read, and one more is an error.
pub fn decode_snapshot_from<R: std::io::BufRead>(
    reader: R,
) -> Result<Vec<Vec<SnapshotEvent>>, SnapshotError> {
    machine::decode(reader, MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_EVENTS)
}

/// The trace of one device's `events`, by the rules of the module's documentation. The
/// report's `device` and `device_events` are left for the caller.
pub fn events_to_trace(events: &[SnapshotEvent]) -> Result<SnapshotTrace, SnapshotError> {
    let mut r = SnapshotReport::default();
    let mut ops = Vec::with_capacity(events.len());
    // Live blocks: address → trace id. Ids count allocations from 1.
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut stream_number: HashMap<i64, u32> = HashMap::new();
    let mut next_id = 1u64;
    for (i, e) in events.iter().enumerate() {
        match e.action {
            Action::Alloc if e.size == 0 => r.zero_size_allocs += 1,
            Action::Alloc => {
                let stream = match stream_number.get(&e.stream) {
                    Some(&n) => n,
                    None if r.streams.len() >= MAX_TRACE_STREAMS => {
                        return Err(SnapshotError::Unusable(format!(
                            "event {i}: stream {} is one more than the {MAX_TRACE_STREAMS} \
                             distinct streams a replay takes",
                            e.stream
                        )))
                    }
                    None => {
                        r.streams.push(e.stream);
                        // At most MAX_TRACE_STREAMS (1024) numbers.
                        let n = r.streams.len() as u32;
                        stream_number.insert(e.stream, n);
                        n
                    }
                };
                if let Some(old) = live.remove(&e.addr) {
                    ops.push(TraceOp::Free { id: old });
                    r.live_address_allocs += 1;
                }
                let id = next_id;
                next_id += 1;
                live.insert(e.addr, id);
                ops.push(TraceOp::Alloc {
                    id,
                    size: e.size,
                    stream,
                });
                r.allocs += 1;
            }
            Action::FreeRequested => match live.remove(&e.addr) {
                Some(id) => {
                    ops.push(TraceOp::Free { id });
                    r.frees += 1;
                }
                None => r.unknown_frees += 1,
            },
            Action::FreeCompleted => r.free_completed += 1,
            Action::SegmentAlloc
            | Action::SegmentFree
            | Action::SegmentMap
            | Action::SegmentUnmap => r.segment_events += 1,
            Action::Snapshot | Action::Oom | Action::Other => r.other_events += 1,
        }
    }
    let mut left: Vec<u64> = live.into_values().collect();
    left.sort_unstable();
    r.freed_at_end = left.len() as u64;
    ops.extend(left.into_iter().map(|id| TraceOp::Free { id }));
    Ok(SnapshotTrace { ops, report: r })
}

/// The device replayed when none is asked for: the one with the most events (the first of
/// those), as PyTorch's snapshot viewer picks.
pub fn default_device(devices: &[Vec<SnapshotEvent>]) -> Option<usize> {
    (0..devices.len()).rev().max_by_key(|&d| devices[d].len())
}

/// Reads the snapshot pickle `bytes` as the trace of `device` (default: [`default_device`]).
/// A device without `alloc` events (history not recorded) is [`SnapshotError::Unusable`], with
/// how to record one.
pub fn read_snapshot(bytes: &[u8], device: Option<usize>) -> Result<SnapshotTrace, SnapshotError> {
    snapshot_trace(decode_snapshot(bytes)?, device)
}

/// [`read_snapshot`] from a stream, read as it is decoded (see [`decode_snapshot_from`]).
pub fn read_snapshot_from<R: std::io::BufRead>(
    reader: R,
    device: Option<usize>,
) -> Result<SnapshotTrace, SnapshotError> {
    snapshot_trace(decode_snapshot_from(reader)?, device)
}

/// The trace of `device` of the decoded `devices`.
fn snapshot_trace(
    devices: Vec<Vec<SnapshotEvent>>,
    device: Option<usize>,
) -> Result<SnapshotTrace, SnapshotError> {
    let counts: Vec<u64> = devices.iter().map(|d| d.len() as u64).collect();
    let chosen = match device {
        Some(d) if d < devices.len() => d,
        Some(d) => {
            return Err(SnapshotError::Unusable(format!(
                "--device {d}: the snapshot has {} device{} (0 to {})",
                devices.len(),
                if devices.len() == 1 { "" } else { "s" },
                devices.len().saturating_sub(1)
            )))
        }
        None => default_device(&devices).ok_or_else(|| {
            SnapshotError::Unusable(format!("the snapshot has no device traces; {RECORD_HINT}"))
        })?,
    };
    let mut trace = events_to_trace(&devices[chosen])?;
    if trace.report.allocs == 0 {
        return Err(SnapshotError::Unusable(format!(
            "device {chosen}'s history has no allocations ({} events); {RECORD_HINT}",
            counts[chosen]
        )));
    }
    trace.report.device = chosen;
    trace.report.device_events = counts;
    Ok(trace)
}

/// How to record a history, for messages.
const RECORD_HINT: &str =
    "record one with torch.cuda.memory._record_memory_history(max_entries=...) \
    before the work runs, then torch.cuda.memory._dump_snapshot(path)";

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(action: Action, addr: u64, size: u64, stream: i64) -> SnapshotEvent {
        SnapshotEvent {
            action,
            addr,
            size,
            stream,
        }
    }

    #[test]
    fn the_default_device_is_the_first_with_the_most_events() {
        let e = ev(Action::Alloc, 1, 1, 0);
        assert_eq!(default_device(&[]), None);
        assert_eq!(default_device(&[vec![], vec![e], vec![e]]), Some(1));
        assert_eq!(default_device(&[vec![e, e], vec![e]]), Some(0));
    }

    #[test]
    fn a_block_freed_at_end_is_freed_in_allocation_order() {
        let t = events_to_trace(&[
            ev(Action::Alloc, 0x300, 8, 0),
            ev(Action::Alloc, 0x100, 8, 0),
            ev(Action::Alloc, 0x200, 8, 0),
        ])
        .expect("trace");
        let frees: Vec<_> = t.ops[3..].to_vec();
        assert_eq!(
            frees,
            [1, 2, 3].map(|id| TraceOp::Free { id }).to_vec(),
            "ids 1, 2, 3 in order"
        );
    }
}
