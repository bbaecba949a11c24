//! Trace recording (issue 12, item 4): what a [`RecordingAllocator`] writes, and that the
//! file replays to what the live allocator saw.

mod common;

use common::{alloc, code, config, virtual_arena, KIB, MIB};
use cuda_arena_core::trace::trace_format::parse_trace_bytes;
use cuda_arena_core::trace::{replay, replay_observed, TraceStreams};
use cuda_arena_core::{
    Allocator, AllocatorType, Factory, MemoryInfo, MemoryKind, Recorder, RecordingAllocator,
    RecordingSummary, SimBackend, SimKind, Stream,
};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A fresh path in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        TempFile(std::env::temp_dir().join(format!(
            "cuda-arena-recording-{}-{name}.jsonl",
            std::process::id()
        )))
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("temporary paths are UTF-8 here")
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).expect("the recording exists")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A sink the test can read back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().expect("not poisoned").clone())
            .expect("ASCII")
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// A stream-aware arena over a virtual device, recordable.
fn recordable(pairs: &[(&str, &str)]) -> RecordingAllocator {
    RecordingAllocator::new(Arc::new(virtual_arena(pairs)))
}

/// Starts recording `a` into a sink the test reads.
fn record_to_memory(a: &RecordingAllocator) -> Shared {
    let sink = Shared::default();
    let s = sink.clone();
    a.start_recording_with(|| Recorder::with_sink("memory", Box::new(s), 4096))
        .expect("starts");
    sink
}

/// A mixed sequence on `a`: allocations on no stream and on two streams, reserves, frees in
/// another order than the allocations. Returns the largest sum of requested bytes live at
/// once, counted by the test itself.
fn mixed_session(a: &dyn Allocator) -> u64 {
    let streams = [Stream::new(), Stream::new()];
    let (mut live, mut requested, mut peak) = (Vec::new(), 0u64, 0u64);
    for i in 0..600u64 {
        let size = 1 + (i * 7919) % (3 * MIB);
        let addr = match i % 5 {
            0 => a.reserve(size),
            1 | 2 => a.alloc_on_stream(size, &streams[(i % 2) as usize]),
            _ => a.alloc(size),
        }
        .expect("fits")
        .expect("non-zero");
        live.push((addr, size));
        requested += size;
        peak = peak.max(requested);
        if i % 3 == 2 {
            let (addr, size) = live.remove((i as usize * 31) % live.len());
            a.free(addr).expect("live");
            requested -= size;
        }
    }
    for (addr, _) in live {
        a.free(addr).expect("live");
    }
    peak
}

#[test]
fn a_recorded_session_replays_to_the_same_peak_requested_and_the_same_stats() {
    let file = TempFile::new("replay");
    let live = recordable(&[]);
    live.start_recording(file.path()).expect("starts");
    let peak = mixed_session(&live);
    let summary = live.stop_recording().expect("stops");
    assert_eq!(summary.error, None);
    assert_eq!(summary.peak_requested, peak);

    let trace = parse_trace_bytes(file.text().as_bytes(), false).expect("a valid trace");
    assert_eq!(trace.ops.len() as u64, summary.ops);
    let replayed = virtual_arena(&[]);
    let streams = TraceStreams::for_trace(&trace.ops).expect("two streams");
    assert_eq!(streams.len(), 2);
    let (report, _) =
        replay_observed(&replayed, &trace.ops, &streams, false, 0, &mut |_| {}).expect("replays");
    assert_eq!(report.peak_requested, peak);
    assert_eq!(report.live_at_end, 0);
    assert_eq!(replayed.stats(), live.stats());
}

#[test]
fn recording_off_changes_no_address_and_no_stat() {
    let bare = virtual_arena(&[]);
    let wrapped = recordable(&[]);
    // Each virtual device has its own base address: compare offsets from the first one.
    let (base_a, base_b) = (alloc(&bare, 256), alloc(&wrapped, 256));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 1..200u64 {
        a.push(alloc(&bare, i * KIB) - base_a);
        b.push(alloc(&wrapped, i * KIB) - base_b);
        if i % 3 == 0 {
            bare.free(a.swap_remove(0) + base_a).expect("live");
            wrapped.free(b.swap_remove(0) + base_b).expect("live");
        }
    }
    assert_eq!(a, b);
    assert_eq!(bare.stats(), wrapped.stats());
}

#[test]
fn ids_count_up_from_one_and_a_free_names_the_id_of_its_address() {
    let a = recordable(&[]);
    let sink = record_to_memory(&a);
    let p = alloc(&a, 100);
    let r = a.reserve(5000).expect("fits").expect("non-zero");
    a.free(p).expect("live");
    let q = alloc(&a, 100);
    assert_eq!(p, q, "the arena hands the same address out again");
    a.free(r).expect("live");
    a.free(q).expect("live");
    a.stop_recording().expect("stops");
    assert_eq!(
        sink.lines(),
        [
            r#"{"op":"alloc","id":1,"size":100,"stream":0}"#,
            r#"{"op":"reserve","id":2,"size":5000}"#,
            r#"{"op":"free","id":1}"#,
            r#"{"op":"alloc","id":3,"size":100,"stream":0}"#,
            r#"{"op":"free","id":2}"#,
            r#"{"op":"free","id":3}"#,
        ]
    );
}

#[test]
fn streams_are_numbered_from_one_and_a_released_streams_number_is_reused() {
    let a = recordable(&[]);
    let sink = record_to_memory(&a);
    let (s, t) = (Stream::new(), Stream::new());
    a.free(a.alloc_on_stream(256, &s).expect("fits").expect("addr"))
        .expect("live");
    a.free(a.alloc_on_stream(256, &t).expect("fits").expect("addr"))
        .expect("live");
    a.free(a.alloc_on_stream(256, &s).expect("fits").expect("addr"))
        .expect("live");
    drop(s);
    let u = Stream::new();
    a.free(a.alloc_on_stream(256, &u).expect("fits").expect("addr"))
        .expect("live");
    a.stop_recording().expect("stops");
    let streams: Vec<u32> = parse_trace_bytes(sink.lines().join("\n").as_bytes(), false)
        .expect("valid")
        .ops
        .iter()
        .filter_map(|op| match op {
            cuda_arena_core::trace::TraceOp::Alloc { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(streams, [1, 2, 1, 1]);
}

#[test]
fn more_streams_in_use_at_once_than_a_trace_replays_stops_the_recording_with_a_reason() {
    let a = recordable(&[]);
    let sink = record_to_memory(&a);
    let max = cuda_arena_core::trace::MAX_TRACE_STREAMS;
    let streams: Vec<Stream> = (0..=max).map(|_| Stream::new()).collect();
    let mut addrs = Vec::new();
    for s in &streams {
        // Every allocation succeeds, recorded or not.
        addrs.push(a.alloc_on_stream(256, s).expect("fits").expect("addr"));
    }
    assert!(!a.is_recording());
    let summary = a.stop_recording().expect("the stopped recording's summary");
    let error = summary.error.expect("a reason");
    assert!(error.contains("streams"), "{error}");
    assert_eq!(summary.ops, max as u64);
    let trace = parse_trace_bytes(sink.lines().join("\n").as_bytes(), false).expect("valid");
    assert_eq!(trace.ops.len(), max);
    for p in addrs {
        a.free(p).expect("live");
    }
}

#[test]
fn failed_allocations_are_counted_and_not_in_the_trace() {
    let a = recordable(&[("arena.max_mem", "1048576")]);
    let sink = record_to_memory(&a);
    assert_eq!(code(a.alloc(2 * MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(code(a.reserve(2 * MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(code(a.free(12345)), "ERR_ARENA_UNKNOWN_POINTER");
    assert_eq!(a.alloc(0).expect("size 0"), None);
    let p = alloc(&a, 1000);
    let summary = a.stop_recording().expect("stops");
    assert_eq!((summary.failed_allocs, summary.ops), (2, 1));
    assert_eq!(
        sink.lines(),
        [r#"{"op":"alloc","id":1,"size":1000,"stream":0}"#]
    );
    a.free(p).expect("live");
}

#[test]
fn a_free_of_an_allocation_made_before_the_recording_is_counted_and_not_in_the_trace() {
    let a = recordable(&[]);
    let before = alloc(&a, 1000);
    let sink = record_to_memory(&a);
    let during = alloc(&a, 2000);
    a.free(before).expect("live");
    let summary = a.stop_recording().expect("stops");
    assert_eq!((summary.untracked_frees, summary.live_at_stop), (1, 1));
    assert_eq!(summary.peak_requested, 2000);
    assert_eq!(
        sink.lines(),
        [r#"{"op":"alloc","id":1,"size":2000,"stream":0}"#]
    );
    a.free(during).expect("live");
}

#[test]
fn nothing_is_written_after_the_recording_stops() {
    let file = TempFile::new("after-stop");
    let a = recordable(&[]);
    a.start_recording(file.path()).expect("starts");
    a.free(alloc(&a, 1000)).expect("live");
    let summary = a.stop_recording().expect("stops");
    let text = file.text();
    assert_eq!((summary.ops, summary.bytes), (2, text.len() as u64));
    a.free(alloc(&a, 1000)).expect("live");
    assert_eq!(file.text(), text);
    assert_eq!(summary.path, file.path());
}

/// A sink that fails once `room` bytes are written.
struct Failing {
    room: usize,
}

impl Write for Failing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::other("the disk is on fire"));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failing_writer_stops_the_recording_with_its_reason_and_allocations_go_on() {
    let a = recordable(&[]);
    a.start_recording_with(|| {
        Recorder::with_sink("the failing sink", Box::new(Failing { room: 10_000 }), 1024)
    })
    .expect("starts");
    for _ in 0..10_000 {
        a.free(alloc(&a, 4096)).expect("allocations go on");
    }
    assert!(!a.is_recording(), "the recording stopped itself");
    let summary = a.stop_recording().expect("the stopped recording's summary");
    let error = summary.error.clone().expect("a reason");
    assert!(
        error.contains("the failing sink") && error.contains("on fire"),
        "{error}"
    );
    assert!(summary.bytes <= 10_000 && summary.ops > 0, "{summary:?}");
    assert_eq!(a.stats().in_use, 0);
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_stops_the_recording_with_its_reason() {
    let a = recordable(&[]);
    a.start_recording("/dev/full").expect("/dev/full opens");
    for _ in 0..100_000 {
        a.free(alloc(&a, 4096)).expect("allocations go on");
    }
    let summary = a.stop_recording().expect("stops");
    let error = summary.error.expect("a reason");
    assert!(error.contains("/dev/full"), "{error}");
    assert_eq!(summary.ops, 0);
}

#[test]
fn starting_a_second_recording_is_an_invalid_argument_and_leaves_the_first_one_writing() {
    let file = TempFile::new("double-start");
    let a = recordable(&[]);
    a.start_recording(file.path()).expect("starts");
    let p = alloc(&a, 1000);
    assert_eq!(
        code(a.start_recording(file.path())),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
    a.free(p).expect("live");
    let summary = a.stop_recording().expect("stops");
    assert_eq!(summary.ops, 2);
    assert_eq!(
        parse_trace_bytes(file.text().as_bytes(), false)
            .expect("valid")
            .ops
            .len(),
        2
    );
}

#[test]
fn a_path_that_cannot_be_created_is_an_invalid_argument_naming_it() {
    let a = recordable(&[]);
    let dir = std::env::temp_dir().join(format!("cuda-arena-no-such-dir-{}", std::process::id()));
    let path = dir.join("trace.jsonl");
    let path = path.to_str().expect("UTF-8");
    let e = a.start_recording(path).expect_err("no such directory");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    assert!(e.to_string().contains(path), "{e}");
    assert!(!a.is_recording());
}

// Issue 11's promise of bounded messages: a 100,000-character path made a 100,069-character one.
#[test]
fn a_huge_or_unprintable_path_makes_a_short_message() {
    let a = recordable(&[]);
    for path in ["/x".repeat(50_000), "/no/such/\u{1b}[31m\0".to_string()] {
        let e = a.start_recording(&path).expect_err("cannot be created");
        let message = e.to_string();
        assert!(message.len() < 400, "{} characters", message.len());
        assert!(!message.contains(['\u{1b}', '\0']), "escaped: {message}");
    }
}

#[test]
fn stopping_when_no_recording_is_on_is_an_invalid_argument() {
    let a = recordable(&[]);
    assert_eq!(code(a.stop_recording()), "ERR_ARENA_INVALID_ARGUMENT");
}

#[test]
fn an_allocator_that_is_not_wrapped_cannot_record() {
    let a = virtual_arena(&[]);
    assert_eq!(
        code(a.start_recording("/tmp/x")),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
}

#[test]
fn retiring_the_allocator_writes_what_was_recorded_and_then_recording_is_released() {
    let file = TempFile::new("retire");
    let a = recordable(&[]);
    a.start_recording(file.path()).expect("starts");
    let _live = alloc(&a, 1000);
    a.retire();
    assert_eq!(
        file.text(),
        "{\"op\":\"alloc\",\"id\":1,\"size\":1000,\"stream\":0}\n"
    );
    assert_eq!(code(a.stop_recording()), "ERR_ARENA_RELEASED");
    assert_eq!(code(a.start_recording(file.path())), "ERR_ARENA_RELEASED");
}

#[test]
fn every_allocator_a_factory_hands_out_records_the_calls_of_all_its_users() {
    let factory = Factory::new(
        "recording-test",
        Arc::new(SimBackend::new(SimKind::Virtual, &[])),
    );
    let mempool = config(&[("arena.use_cuda_mempool", "1")]);
    let read_only = MemoryInfo {
        allocator_type: AllocatorType::ReadOnly,
        ..MemoryInfo::new(MemoryKind::Cuda, 0)
    };
    let infos = [
        (MemoryInfo::new(MemoryKind::Cuda, 0), None),
        (MemoryInfo::new(MemoryKind::Cuda, 0), Some(&mempool)),
        (MemoryInfo::new(MemoryKind::CudaPinned, 0), None),
        (MemoryInfo::new(MemoryKind::Cpu, 0), None),
        (read_only, None),
    ];
    for (i, (info, options)) in infos.into_iter().enumerate() {
        let file = TempFile::new(&format!("factory-{i}"));
        let first = factory.create_allocator(info, options).expect("created");
        // A second user: the same shared allocator (a read-only one is its own).
        let second = factory.create_allocator(info, options).expect("created");
        let shared = second.kind.is_some();
        let other = if shared { &second } else { &first };
        first
            .allocator
            .start_recording(file.path())
            .expect("a factory's allocator records");
        let p = alloc(&*other.allocator, 1000);
        other.allocator.free(p).expect("live");
        let summary = first.allocator.stop_recording().expect("stops");
        assert_eq!(summary.ops, 2, "{info} {:?}", second.kind);
        for c in [first, second] {
            factory.release_allocator(&c.allocator);
        }
    }
}

#[test]
fn concurrent_calls_are_recorded_in_an_order_that_replays_to_the_same_peak() {
    let file = TempFile::new("threads");
    let a = Arc::new(recordable(&[]));
    a.start_recording(file.path()).expect("starts");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..5_000u64 {
                    live.push(alloc(&*a, 256 + (i * 37 + t * 1000) % (64 * KIB)));
                    if live.len() > 8 {
                        a.free(live.swap_remove((i % 8) as usize)).expect("live");
                    }
                }
                for p in live {
                    a.free(p).expect("live");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no panic");
    }
    let summary = a.stop_recording().expect("stops");
    assert_eq!((summary.ops, summary.live_at_stop), (40_000, 0));
    let trace = parse_trace_bytes(file.text().as_bytes(), false).expect("strictly valid");
    let report = replay(&virtual_arena(&[]), &trace.ops, &[], false).expect("replays");
    assert_eq!(report.peak_requested, summary.peak_requested);
}

#[test]
fn a_summary_says_nothing_before_anything_is_recorded() {
    let a = recordable(&[]);
    let sink = record_to_memory(&a);
    let summary = a.stop_recording().expect("stops");
    assert_eq!(
        summary,
        RecordingSummary {
            path: "memory".into(),
            ..RecordingSummary::default()
        }
    );
    assert!(sink.lines().is_empty());
}

#[test]
fn two_allocators_recording_to_one_file_is_refused_and_the_first_recording_stays_whole() {
    // Issue 26, item 2: a Cuda and a Cpu allocator of one factory both recorded to one path,
    // both reported success, and the file held a torn mix that replay refused.
    let file = TempFile::new("two-allocators");
    let (first, second) = (recordable(&[]), recordable(&[]));
    first.start_recording(file.path()).expect("starts");
    let spelled = format!(
        "{}/./{}",
        std::env::temp_dir().display(),
        file.0.file_name().expect("name").to_string_lossy()
    );
    let e = second
        .start_recording(&spelled)
        .expect_err("the file is taken");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    assert!(e.to_string().contains("records to that file now"), "{e}");
    assert!(!second.is_recording());
    let ps: Vec<u64> = (0..1000).map(|i| alloc(&first, 256 + i)).collect();
    for p in ps {
        first.free(p).expect("live");
    }
    let summary = first.stop_recording().expect("stops");
    assert_eq!(summary.ops, 2000);
    let trace = parse_trace_bytes(file.text().as_bytes(), false).expect("whole, parses");
    assert_eq!(trace.ops.len(), 2000);
    // Once the first has stopped, the file is free to record to again.
    second.start_recording(&spelled).expect("starts now");
    second.stop_recording().expect("stops");
}
