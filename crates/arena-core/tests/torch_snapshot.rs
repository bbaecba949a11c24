//! Issue 13: `cuda-arena replay` reads PyTorch memory snapshots. These tests write snapshots
//! the way torch does (a dict with `segments`, `device_traces` and `allocator_settings`,
//! pickled) with `serde-pickle`, read them back as traces, and check the exact operations and
//! what was skipped and counted. `__test__/fixtures/torch-snapshot.pickle` is the same kind of
//! snapshot written by CPython's own pickler (`scripts/gpu/make_snapshot.py --synthetic`); a
//! real one can be checked with `CUDA_ARENA_TORCH_SNAPSHOT=path cargo test --test torch_snapshot`.

use cuda_arena_core::trace::torch_snapshot::{
    decode_snapshot, looks_like_pickle, read_snapshot, read_snapshot_from, SnapshotError,
    SnapshotReport, MAX_OPEN_MARKS, MAX_PENDING_VALUES, MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_DEVICES,
};
use cuda_arena_core::trace::{replay_observed, TraceOp, TraceStreams, MAX_TRACE_STREAMS};
use cuda_arena_core::{AddressSpaceAllocator, Arena, ArenaConfig};
use serde_pickle::{HashableValue, SerOptions, Value};
use std::collections::BTreeMap;

// ---- building snapshots as torch does ------------------------------------------------------

fn s(v: &str) -> Value {
    Value::String(v.into())
}

fn dict<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.into()), v))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn frame(file: &str, line: i64, name: &str) -> Value {
    dict([
        ("filename", s(file)),
        ("line", Value::I64(line)),
        ("name", s(name)),
    ])
}

/// An event as torch 2.11 writes it: `{action, addr, size, stream, time_us, frames,
/// compile_context, user_metadata}`.
fn event(action: &str, addr: u64, size: u64, stream: i64) -> Value {
    dict([
        ("action", s(action)),
        ("addr", Value::I64(addr as i64)),
        ("size", Value::I64(size as i64)),
        ("stream", Value::I64(stream)),
        ("time_us", Value::I64(1_700_000_000_000_000)),
        (
            "frames",
            Value::List(vec![
                frame("train.py", 12, "step"),
                frame("model.py", 40, "forward"),
            ]),
        ),
        ("compile_context", s("N/A")),
        ("user_metadata", s("")),
    ])
}

/// An `oom` event: torch writes `device_free` where the others have `addr`.
fn oom(size: u64) -> Value {
    dict([
        ("action", s("oom")),
        ("device_free", Value::I64(123)),
        ("size", Value::I64(size as i64)),
        ("stream", Value::I64(0)),
        ("time_us", Value::I64(0)),
    ])
}

/// A snapshot of `devices` (one list of events each), with the other keys torch writes.
fn snapshot(devices: Vec<Vec<Value>>) -> Value {
    let block = dict([
        ("address", Value::I64(0x7f10_0020_0000)),
        ("size", Value::I64(1024)),
        ("requested_size", Value::I64(800)),
        ("state", s("active_allocated")),
        ("frames", Value::List(vec![frame("train.py", 12, "step")])),
    ]);
    let segment = dict([
        ("device", Value::I64(0)),
        ("address", Value::I64(0x7f10_0020_0000)),
        ("total_size", Value::I64(2 << 20)),
        ("stream", Value::I64(0)),
        ("segment_type", s("large")),
        (
            "segment_pool_id",
            Value::Tuple(vec![Value::I64(0), Value::I64(0)]),
        ),
        ("is_expandable", Value::Bool(false)),
        ("blocks", Value::List(vec![block])),
    ]);
    let mut roundup = BTreeMap::new();
    roundup.insert(HashableValue::I64(1), Value::I64(0));
    dict([
        ("segments", Value::List(vec![segment])),
        (
            "device_traces",
            Value::List(devices.into_iter().map(Value::List).collect()),
        ),
        ("external_annotations", Value::List(vec![])),
        (
            "allocator_settings",
            dict([
                ("PYTORCH_CUDA_ALLOC_CONF", s("")),
                ("max_split_size", Value::I64(-1)),
                ("garbage_collection_threshold", Value::F64(0.0)),
                ("expandable_segments", Value::Bool(false)),
                ("roundup_power2_divisions", Value::Dict(roundup)),
            ]),
        ),
    ])
}

fn pickle(v: &Value) -> Vec<u8> {
    serde_pickle::value_to_vec(v, SerOptions::new()).expect("serializable")
}

fn alloc(id: u64, size: u64, stream: u32) -> TraceOp {
    TraceOp::Alloc { id, size, stream }
}

fn free(id: u64) -> TraceOp {
    TraceOp::Free { id }
}

const SIDE: i64 = 0x55d0_c0ff_ee00;
const BASE: u64 = 0x7f10_0020_0000;

/// The snapshot `make_snapshot.py --synthetic` writes, built here with `serde-pickle`.
fn synthetic() -> Value {
    let device1 = vec![
        event("free_requested", 0x7f10_0000_0000, 1024, 0),
        event("free_completed", 0x7f10_0000_0000, 1024, 0),
        event("segment_alloc", BASE, 2 << 20, 0),
        event("alloc", BASE, 1000, 0),
        event("alloc", BASE + 0x400, 3000, SIDE),
        event("alloc", BASE + 0x1000, 40000, 0),
        event("free_requested", BASE, 1000, 0),
        event("free_completed", BASE, 1000, 0),
        event("alloc", BASE, 800, 0),
        event("free_requested", BASE + 0x400, 3000, SIDE),
        dict([
            ("action", s("snapshot")),
            ("addr", Value::I64(0)),
            ("size", Value::I64(0)),
            ("stream", Value::I64(0)),
        ]),
        oom(1 << 40),
        event("segment_free", 0x7f10_0040_0000, 2 << 20, 0),
    ];
    let device0 = vec![
        event("alloc", 0x7f00_0000_0000, 512, 0),
        event("free_requested", 0x7f00_0000_0000, 512, 0),
        event("free_completed", 0x7f00_0000_0000, 512, 0),
    ];
    snapshot(vec![device0, device1])
}

/// What the synthetic snapshot's default device (1) reads as.
fn synthetic_trace() -> (Vec<TraceOp>, SnapshotReport) {
    (
        vec![
            alloc(1, 1000, 1),
            alloc(2, 3000, 2),
            alloc(3, 40000, 1),
            free(1),
            alloc(4, 800, 1),
            free(2),
            // Live after the last event: freed at the end, in allocation order.
            free(3),
            free(4),
        ],
        SnapshotReport {
            device: 1,
            device_events: vec![3, 13],
            allocs: 4,
            frees: 2,
            unknown_frees: 1,
            live_address_allocs: 0,
            zero_size_allocs: 0,
            freed_at_end: 2,
            free_completed: 2,
            segment_events: 2,
            other_events: 2,
            streams: vec![0, SIDE],
        },
    )
}

fn read(v: &Value) -> Result<(Vec<TraceOp>, SnapshotReport), SnapshotError> {
    read_snapshot(&pickle(v), None).map(|t| (t.ops, t.report))
}

fn not_a_snapshot(bytes: &[u8]) -> String {
    match read_snapshot(bytes, None) {
        Err(SnapshotError::NotASnapshot(why)) => why,
        other => panic!("expected NotASnapshot, got {other:?}"),
    }
}

// ---- request-level events become the trace --------------------------------------------------

#[test]
fn request_level_events_become_the_trace_and_the_rest_is_counted() {
    assert_eq!(read(&synthetic()).expect("a snapshot"), synthetic_trace());
}

#[test]
fn a_snapshot_written_by_cpython_reads_as_the_same_one_written_by_serde_pickle() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../__test__/fixtures/torch-snapshot.pickle"
    );
    let bytes = std::fs::read(path).expect("the fixture (scripts/gpu/make_snapshot.py)");
    let t = read_snapshot(&bytes, None).expect("a snapshot");
    assert_eq!((t.ops, t.report), synthetic_trace());
}

#[test]
fn free_requested_is_the_free_and_free_completed_is_not_replayed() {
    let (ops, r) = read(&snapshot(vec![vec![
        event("alloc", 0x1000, 64, 0),
        event("free_requested", 0x1000, 64, 0),
        event("alloc", 0x2000, 64, 0),
        // The first block's free completes only now (record_stream): the replay freed it above.
        event("free_completed", 0x1000, 64, 0),
        event("free_requested", 0x2000, 64, 0),
        event("free_completed", 0x2000, 64, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(
        ops,
        vec![alloc(1, 64, 1), free(1), alloc(2, 64, 1), free(2)]
    );
    assert_eq!((r.frees, r.free_completed, r.freed_at_end), (2, 2, 0));
}

#[test]
fn frees_of_blocks_allocated_before_the_history_starts_are_skipped_and_counted() {
    let (ops, r) = read(&snapshot(vec![vec![
        event("free_requested", 0x9000, 4096, 0),
        event("alloc", 0x1000, 64, 0),
        event("free_requested", 0x8000, 4096, 0),
        event("free_requested", 0x1000, 64, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(ops, vec![alloc(1, 64, 1), free(1)]);
    assert_eq!((r.unknown_frees, r.frees), (2, 1));
}

#[test]
fn blocks_live_after_the_last_event_are_freed_at_the_end_and_counted() {
    let (ops, r) = read(&snapshot(vec![vec![
        event("alloc", 0x3000, 300, 0),
        event("alloc", 0x1000, 100, 0),
        event("alloc", 0x2000, 200, 0),
        event("free_requested", 0x1000, 100, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(
        ops,
        vec![
            alloc(1, 300, 1),
            alloc(2, 100, 1),
            alloc(3, 200, 1),
            free(2),
            free(1),
            free(3)
        ]
    );
    assert_eq!(r.freed_at_end, 2);
}

#[test]
fn an_alloc_at_a_live_address_frees_the_live_block_first_and_counts_it() {
    // Torch frees a block before handing its address out again; here that free is missing.
    let (ops, r) = read(&snapshot(vec![vec![
        event("alloc", 0x1000, 64, 0),
        event("alloc", 0x1000, 128, 0),
        event("free_requested", 0x1000, 128, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(
        ops,
        vec![alloc(1, 64, 1), free(1), alloc(2, 128, 1), free(2)]
    );
    assert_eq!((r.live_address_allocs, r.allocs, r.frees), (1, 2, 1));
}

#[test]
fn an_alloc_of_size_zero_is_skipped_and_counted() {
    let (ops, r) = read(&snapshot(vec![vec![
        event("alloc", 0x1000, 0, 0),
        event("alloc", 0x2000, 8, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(ops, vec![alloc(1, 8, 1), free(1)]);
    assert_eq!((r.zero_size_allocs, r.allocs), (1, 1));
}

#[test]
fn segment_snapshot_oom_and_unknown_events_are_counted_and_not_replayed() {
    let (ops, r) = read(&snapshot(vec![vec![
        event("segment_alloc", 0x1000, 2 << 20, 0),
        event("segment_map", 0x1000, 2 << 20, 0),
        event("alloc", 0x1000, 64, 0),
        event("segment_unmap", 0x1000, 2 << 20, 0),
        event("segment_free", 0x1000, 2 << 20, 0),
        event("snapshot", 0, 0, 0),
        oom(1 << 40),
        event("a_later_action", 0x1000, 64, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(ops, vec![alloc(1, 64, 1), free(1)]);
    assert_eq!((r.segment_events, r.other_events), (4, 3));
}

#[test]
fn each_torch_stream_is_a_trace_stream_numbered_by_first_allocation() {
    let (ops, r) = read(&snapshot(vec![vec![
        event("alloc", 0x1000, 1, SIDE),
        event("alloc", 0x2000, 2, 0),
        event("alloc", 0x3000, 3, SIDE),
        event("free_requested", 0x4000, 4, 77), // a free on a stream that never allocates
        event("alloc", 0x5000, 5, 42),
    ]]))
    .expect("a snapshot");
    let streams: Vec<u32> = ops
        .iter()
        .filter_map(|op| match *op {
            TraceOp::Alloc { stream, .. } => Some(stream),
            _ => None,
        })
        .collect();
    assert_eq!(streams, vec![1, 2, 1, 3]);
    assert_eq!(r.streams, vec![SIDE, 0, 42]);
}

#[test]
fn more_distinct_streams_than_a_replay_takes_is_an_error_naming_the_limit() {
    let events = (0..=MAX_TRACE_STREAMS as u64)
        .map(|i| event("alloc", 0x1000 + i * 0x100, 8, 1000 + i as i64))
        .collect();
    match read(&snapshot(vec![events])) {
        Err(SnapshotError::Unusable(why)) => assert!(why.contains("1024"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn addresses_written_as_negative_int64_are_read_as_the_same_64_bits() {
    // Torch's C++ pickler writes size_t as int64.
    let (ops, r) = read(&snapshot(vec![vec![
        event("alloc", u64::MAX - 0xff, 8, 0),
        event("free_requested", u64::MAX - 0xff, 8, 0),
    ]]))
    .expect("a snapshot");
    assert_eq!(ops, vec![alloc(1, 8, 1), free(1)]);
    assert_eq!(r.unknown_frees, 0);
}

// ---- devices ---------------------------------------------------------------------------------

#[test]
fn the_default_device_is_the_one_with_the_most_events_and_device_picks_another() {
    let bytes = pickle(&synthetic());
    assert_eq!(read_snapshot(&bytes, None).expect("ok").report.device, 1);
    let t = read_snapshot(&bytes, Some(0)).expect("device 0");
    assert_eq!(t.ops, vec![alloc(1, 512, 1), free(1)]);
    assert_eq!((t.report.device, t.report.free_completed), (0, 1));
}

#[test]
fn a_device_the_snapshot_lacks_is_an_error_naming_how_many_it_has() {
    match read_snapshot(&pickle(&synthetic()), Some(2)) {
        Err(SnapshotError::Unusable(why)) => assert!(why.contains("has 2 devices"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_snapshot_without_a_recorded_history_is_an_error_saying_how_to_record_one() {
    for v in [
        snapshot(vec![]),
        snapshot(vec![vec![]]),
        snapshot(vec![vec![event("segment_alloc", 0x1000, 2 << 20, 0)]]),
    ] {
        match read(&v) {
            Err(SnapshotError::Unusable(why)) => {
                assert!(why.contains("_record_memory_history"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}

// ---- the replay ------------------------------------------------------------------------------

#[test]
fn a_snapshot_trace_replays_balanced_through_the_arena_on_its_streams() {
    let t = read_snapshot(&pickle(&synthetic()), None).expect("a snapshot");
    let arena =
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena");
    let streams = TraceStreams::for_trace(&t.ops).expect("streams");
    assert_eq!(streams.len(), 2);
    let (r, _) = replay_observed(&arena, &t.ops, &streams, true, 0, &mut |_| {}).expect("replay");
    assert_eq!(r.ops, 8);
    assert_eq!(r.live_at_end, 0);
    // Live at most: 1000 + 3000 + 40000 bytes, before the first free.
    assert_eq!(r.peak_requested, 44_000);
    assert_eq!(cuda_arena_core::Allocator::stats(&arena).in_use, 0);
}

// ---- files that are not snapshots -------------------------------------------------------------

#[test]
fn the_format_is_told_by_the_first_byte() {
    assert!(looks_like_pickle(&pickle(&synthetic())));
    assert!(!looks_like_pickle(
        b"{\"op\":\"alloc\",\"id\":1,\"size\":1}\n"
    ));
    assert!(!looks_like_pickle(b""));
    assert!(!looks_like_pickle(&[0u8; 16]));
}

#[test]
fn every_truncation_of_a_snapshot_is_not_a_snapshot() {
    let bytes = pickle(&synthetic());
    for n in 0..bytes.len() {
        let why = not_a_snapshot(&bytes[..n]);
        assert!(why.contains("cut short"), "{n} bytes: {why}");
    }
}

#[test]
fn bytes_after_the_pickle_are_not_a_snapshot() {
    let mut bytes = pickle(&synthetic());
    bytes.extend_from_slice(b"\n{}");
    assert!(not_a_snapshot(&bytes).contains("3 more bytes after the end"));
}

#[test]
fn a_pickle_of_a_list_is_not_a_snapshot() {
    let why = not_a_snapshot(&pickle(&Value::List(vec![Value::I64(1)])));
    assert!(why.contains("holds a list"), "{why}");
}

#[test]
fn a_dict_without_device_traces_is_not_a_snapshot() {
    let why = not_a_snapshot(&pickle(&dict([("segments", Value::List(vec![]))])));
    assert!(why.contains("no \"device_traces\""), "{why}");
}

#[test]
fn a_malformed_event_is_named_by_its_place() {
    let cases: Vec<(Value, &str)> = vec![
        (
            snapshot(vec![vec![event("alloc", 1, 1, 0), Value::I64(5)]]),
            "device_traces[0][1] is an integer, not an event dict",
        ),
        (
            snapshot(vec![vec![dict([
                ("action", s("alloc")),
                ("size", Value::I64(1)),
            ])]]),
            "device_traces[0][0]: alloc event without \"addr\"",
        ),
        (
            snapshot(vec![vec![dict([
                ("action", s("alloc")),
                ("addr", s("0x1000")),
                ("size", Value::I64(1)),
            ])]]),
            "device_traces[0][0][\"addr\"] is a string, not an integer",
        ),
        (
            snapshot(vec![vec![dict([("action", Value::I64(3))])]]),
            "device_traces[0][0][\"action\"] is an integer, not a string",
        ),
        (
            snapshot(vec![vec![dict([
                ("action", s("alloc")),
                ("addr", Value::I64(1)),
                ("size", Value::I64(-8)),
            ])]]),
            "device_traces[0][0][\"size\"] is -8, a negative size",
        ),
        (
            dict([("device_traces", Value::List(vec![Value::None]))]),
            "device_traces[0] is None, not a list of events",
        ),
    ];
    for (v, want) in cases {
        let why = not_a_snapshot(&pickle(&v));
        assert!(why.contains(want), "{why}\n  wanted: {want}");
    }
}

#[test]
fn a_pickle_of_an_object_is_not_a_snapshot() {
    // serde-pickle writes a set as a call of builtins.set: GLOBAL and REDUCE, which a snapshot
    // (plain data) never holds.
    let mut set = std::collections::BTreeSet::new();
    set.insert(HashableValue::I64(1));
    let why = not_a_snapshot(&pickle(&dict([("device_traces", Value::Set(set))])));
    assert!(why.contains("opcode 0x63 ('c')"), "{why}");
}

#[test]
fn integers_wider_than_64_bits_are_not_a_snapshot() {
    let big = num_bigint_value();
    let why = not_a_snapshot(&pickle(&dict([("device_traces", big)])));
    assert!(why.contains("fit in 64 bits"), "{why}");
}

/// 2^70, as a pickle integer.
fn num_bigint_value() -> Value {
    // `serde-pickle` writes a `Value::Int` as LONG1 with its two's-complement bytes.
    let bytes = pickle(&Value::I64(1));
    let mut p = bytes[..2].to_vec(); // PROTO 3
    p.extend_from_slice(&[0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, b'.']);
    serde_pickle::value_from_slice(&p, Default::default()).expect("a big integer")
}

#[test]
fn only_protocols_2_to_5_are_read() {
    let mut bytes = pickle(&synthetic());
    for (proto, ok) in [
        (1u8, false),
        (2, true),
        (3, true),
        (4, true),
        (5, true),
        (6, false),
    ] {
        bytes[1] = proto;
        match read_snapshot(&bytes, None) {
            Ok(_) => assert!(ok, "protocol {proto}"),
            Err(SnapshotError::NotASnapshot(why)) => {
                assert!(!ok && why.contains(&format!("protocol {proto}")), "{why}")
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn values_nested_a_million_deep_read_without_overflowing_the_stack() {
    // A million nested lists: decoded and dropped recursively, this would abort.
    let depth = 1_000_000;
    let mut p = vec![0x80, 4];
    p.extend(std::iter::repeat_n(b']', depth));
    p.extend(std::iter::repeat_n(b'a', depth - 1));
    p.push(b'.');
    let why = not_a_snapshot(&p);
    assert!(why.contains("holds a list or tuple"), "{why}");
}

#[test]
fn device_traces_past_the_most_devices_are_not_a_snapshot() {
    // 140 million empty lists made Node abort on the per-device array; each was kept too.
    let devices = MAX_SNAPSHOT_DEVICES as usize;
    let why = match read(&snapshot(vec![Vec::new(); devices + 1])) {
        Err(SnapshotError::NotASnapshot(why)) => why,
        other => panic!("expected NotASnapshot, got {other:?}"),
    };
    assert!(
        why.contains(&format!("more than {devices} devices")),
        "{why}"
    );
    let mut at_the_bound = vec![Vec::new(); devices];
    at_the_bound[devices - 1] = vec![event("alloc", 4096, 512, 0)];
    let (ops, _) = read(&snapshot(at_the_bound)).expect("as many devices as the bound");
    assert_eq!(ops.len(), 2);
}

#[test]
fn more_values_pending_than_the_cap_are_not_a_snapshot() {
    let mut p = vec![0x80, 4, b']', b'('];
    p.extend(std::iter::repeat_n(b'N', MAX_PENDING_VALUES + 1));
    p.extend_from_slice(b"e.");
    let why = not_a_snapshot(&p);
    assert!(
        why.contains(&format!("more than {MAX_PENDING_VALUES} values pending")),
        "{why}"
    );
}

#[test]
fn more_marks_open_than_the_cap_are_not_a_snapshot() {
    let mut p = vec![0x80, 4];
    p.extend(std::iter::repeat_n(b'(', MAX_OPEN_MARKS + 1));
    let why = not_a_snapshot(&p);
    assert!(
        why.contains(&format!("more than {MAX_OPEN_MARKS} MARKs open")),
        "{why}"
    );
}

/// A short string, as CPython pickles one.
fn raw_str(v: &str) -> Vec<u8> {
    let mut p = vec![0x8c, v.len() as u8];
    p.extend_from_slice(v.as_bytes());
    p
}

/// An event dict `{action, addr, size}`, as CPython pickles one.
fn raw_event(action: &str, addr: u64, size: u32) -> Vec<u8> {
    let mut p = vec![b'}', b'('];
    p.extend(raw_str("action"));
    p.extend(raw_str(action));
    p.extend(raw_str("addr"));
    p.extend_from_slice(&[0x8a, 8]);
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend(raw_str("size"));
    p.push(b'J');
    p.extend_from_slice(&size.to_le_bytes());
    p.push(b'u');
    p
}

/// `"device_traces": [[alloc, free_requested]]` of one 512-byte block, as a key and value.
fn raw_device_traces() -> Vec<u8> {
    let mut p = raw_str("device_traces");
    p.extend_from_slice(b"]](");
    p.extend(raw_event("alloc", BASE, 512));
    p.extend(raw_event("free_requested", BASE, 512));
    p.extend_from_slice(b"ea");
    p
}

/// `{"segments": [v, v, ...], "device_traces": [[alloc, free]]}` where `v` is memo 1, stored
/// by `stored` and referred to `refs` times.
fn shared_segments(stored: &[u8], refs: usize) -> Vec<u8> {
    let mut p = vec![0x80, 4, b'}', b'('];
    p.extend(raw_str("segments"));
    p.extend_from_slice(&[b']', 0x94, b'(']); // memo 0: the list
    p.extend_from_slice(stored);
    p.push(0x94); // memo 1
    for _ in 0..refs {
        p.extend_from_slice(&[b'h', 1]);
    }
    p.push(b'e');
    p.extend(raw_device_traces());
    p.extend_from_slice(b"u.");
    p
}

#[test]
fn a_value_referred_to_over_and_over_is_read_once() {
    // One 1 MiB string referred to 200,000 times: read in full (serde-pickle hands out a
    // copy per reference), 200 GiB of copies from a 1.4 MiB pickle.
    let mut big = vec![b'X'];
    big.extend_from_slice(&(1u32 << 20).to_le_bytes());
    big.extend(std::iter::repeat_n(b'x', 1 << 20));
    let t = read_snapshot(&shared_segments(&big, 200_000), None).expect("a snapshot");
    assert_eq!(t.ops, vec![alloc(1, 512, 1), free(1)]);
}

#[test]
fn an_event_referred_to_a_second_time_is_not_a_snapshot() {
    // device_traces = [[e, e]]: one event dict stored once and referred to again.
    let mut p = vec![0x80, 4, b'}', b'(', 0x8c, 13];
    p.extend_from_slice(b"device_traces");
    p.extend_from_slice(&[b']', b']', b'(', b'}', 0x94, 0x8c, 6]); // memo 0: the event
    p.extend_from_slice(b"action");
    p.extend_from_slice(&[0x8c, 6]);
    p.extend_from_slice(b"oom___");
    p.extend_from_slice(&[b's', b'h', 0, b'e', b'a', b'u', b'.']);
    let why = not_a_snapshot(&p);
    assert!(
        why.contains("device_traces[0][1] is a value the pickle refers to a second time"),
        "{why}"
    );
}

#[test]
fn a_memo_stored_out_of_order_is_not_a_snapshot() {
    let p = [0x80, 4, b'N', b'q', 5, b'.'];
    let why = not_a_snapshot(&p);
    assert!(why.contains("stores memo 5 before memo 0"), "{why}");
}

#[test]
fn a_reference_to_a_memo_never_stored_is_not_a_snapshot() {
    let p = [0x80, 4, b'N', 0x94, b'h', 1, b'.'];
    let why = not_a_snapshot(&p);
    assert!(why.contains("memo 1, which was never stored"), "{why}");
}

#[test]
fn a_snapshot_read_from_a_stream_is_the_one_read_from_memory() {
    let bytes = pickle(&synthetic());
    // A reader that hands out 3 bytes at a time: every argument crosses a refill.
    let reader = std::io::BufReader::with_capacity(3, &bytes[..]);
    let t = read_snapshot_from(reader, None).expect("a snapshot");
    assert_eq!((t.ops, t.report), synthetic_trace());
}

#[test]
fn a_long_string_cut_inside_a_character_at_a_piece_boundary_still_reads() {
    // A 3-byte character across the reader's 8 KiB pieces, in a key the replay passes over.
    let mut long = "a".repeat(8191);
    long.push('€');
    long.push_str(&"b".repeat(100));
    let v = dict([
        (
            "device_traces",
            Value::List(vec![Value::List(vec![event("alloc", 1, 8, 0)])]),
        ),
        ("note", s(&long)),
    ]);
    let (ops, _) = read(&v).expect("a snapshot");
    assert_eq!(ops, vec![alloc(1, 8, 1), free(1)]);
    // And a string that is not UTF-8 is refused.
    let mut p = pickle(&v);
    let at = p
        .windows(3)
        .position(|w| w == "€".as_bytes())
        .expect("the euro");
    p[at + 1] = b'x';
    assert!(not_a_snapshot(&p).contains("not UTF-8"));
}

#[test]
fn a_file_larger_than_the_maximum_is_refused_before_it_is_decoded() {
    // Only the length is looked at: a zeroed buffer one byte over the maximum.
    let bytes = vec![0u8; MAX_SNAPSHOT_BYTES as usize + 1];
    let e = read_snapshot(&bytes, None).expect_err("too large");
    assert_eq!(
        e,
        SnapshotError::TooLarge {
            limit: MAX_SNAPSHOT_BYTES
        }
    );
    assert!(e.to_string().contains("more than the 1073741824"), "{e}");
}

#[test]
fn every_byte_flip_of_a_snapshot_reads_or_is_refused_without_panicking() {
    let bytes = pickle(&synthetic());
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            let _ = decode_snapshot(&b);
        }
    }
}

// ---- a real snapshot ---------------------------------------------------------------------------

/// With `CUDA_ARENA_TORCH_SNAPSHOT=path` (a snapshot from `scripts/gpu/make_snapshot.py` on a
/// GPU), checks it reads, replays balanced, and that every event is counted once.
#[test]
fn a_real_snapshot_when_given_reads_and_replays_balanced() {
    let Ok(path) = std::env::var("CUDA_ARENA_TORCH_SNAPSHOT") else {
        return;
    };
    let bytes = std::fs::read(&path).expect("the snapshot");
    let t = read_snapshot(&bytes, None).expect("a snapshot");
    let r = &t.report;
    let counted = r.allocs
        + r.zero_size_allocs
        + r.frees
        + r.unknown_frees
        + r.free_completed
        + r.segment_events
        + r.other_events;
    assert_eq!(counted, r.device_events[r.device]);
    let arena =
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena");
    let streams = TraceStreams::for_trace(&t.ops).expect("streams");
    let (replayed, _) =
        replay_observed(&arena, &t.ops, &streams, false, 0, &mut |_| {}).expect("replay");
    assert_eq!(replayed.live_at_end, 0);
    eprintln!("{path}: {r:?}, {} ops", t.ops.len());
}
