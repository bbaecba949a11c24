//! Replaying allocation traces through an allocator.

mod common;
use common::*;
use cuda_arena_core::devices::factory::selected_allocator;
use cuda_arena_core::trace::synthetic::mixed_trace;
use cuda_arena_core::trace::{replay, replay_observed, TraceOp, TraceStreams, MAX_TRACE_STREAMS};
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, ArenaConfig, MemoryKind, PlainAllocator, RawAllocator,
    SharedKind, SimBackend, SimKind, Stream,
};

#[test]
fn a_replay_frees_everything_and_reports_peaks() {
    let a = virtual_arena(&[]);
    let trace = mixed_trace(20_000, 256, 16 << 20, 300, 3);
    let report = replay(&a, &trace, &[], true).expect("replay");
    assert_eq!(report.ops, 20_000);
    assert_eq!(report.failed_allocs, 0);
    assert!(report.peak_requested > 0);
    assert!(
        report.peak_held >= report.peak_requested,
        "the arena holds at least what is asked"
    );
    assert!(
        a.stats().total_allocated <= report.peak_held,
        "what is held at the end was held at the peak"
    );
    assert_eq!(a.stats().in_use, 0);
    a.check_invariants().expect("consistent");
}

#[test]
fn peak_requested_is_the_largest_sum_of_live_sizes() {
    let a = virtual_arena(&[]);
    let trace = [
        TraceOp::Alloc {
            id: 1,
            size: 100,
            stream: 0,
        },
        TraceOp::Alloc {
            id: 2,
            size: 200,
            stream: 0,
        },
        TraceOp::Free { id: 1 },
        TraceOp::Alloc {
            id: 3,
            size: 50,
            stream: 0,
        },
        TraceOp::Free { id: 2 },
        TraceOp::Free { id: 3 },
    ];
    let report = replay(&a, &trace, &[], true).expect("replay");
    assert_eq!(report.peak_requested, 300);
    assert_eq!(report.peak_held, MIB);
}

#[test]
fn allocations_the_device_cannot_hold_are_counted_not_fatal() {
    let a = limited_arena(
        cuda_arena_core::DeviceLimits::with_total(4 * MIB),
        &[("arena.extend_strategy", "1")],
    );
    let trace = [
        TraceOp::Alloc {
            id: 1,
            size: 3 * MIB,
            stream: 0,
        },
        TraceOp::Alloc {
            id: 2,
            size: 3 * MIB,
            stream: 0,
        },
        TraceOp::Free { id: 2 },
        TraceOp::Free { id: 1 },
    ];
    let report = replay(&a, &trace, &[], false).expect("replay");
    assert_eq!((report.ops, report.failed_allocs), (4, 1));
    assert_eq!(a.raw().raw_stats().raw_bytes_outstanding, 3 * MIB);
}

#[test]
fn stream_numbers_pick_the_given_streams() {
    let a = virtual_arena(&[]);
    let streams = [Stream::new(), Stream::new()];
    let trace = [
        TraceOp::Alloc {
            id: 1,
            size: 256,
            stream: 2,
        },
        TraceOp::Free { id: 1 },
    ];
    replay(&a, &trace, &streams, false).expect("replay");
    let chunk_stream = a.memory_log().regions[0].chunks[0].stream;
    assert_eq!(chunk_stream, Some(streams[1].id()));
}

#[test]
fn a_stream_number_without_a_stream_is_an_invalid_argument_and_nothing_leaks() {
    let a = virtual_arena(&[]);
    let trace = [
        TraceOp::Alloc {
            id: 1,
            size: 256,
            stream: 0,
        },
        TraceOp::Alloc {
            id: 2,
            size: 256,
            stream: 5,
        },
    ];
    let e = replay(&a, &trace, &[], false).expect_err("stream 5 was not given");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    assert!(e.to_string().contains("trace op 1"), "names the op: {e}");
    assert_eq!(a.stats().num_allocs, 0, "found before anything is replayed");
}

// Issue 11: the JS fuzzer found a replay on an allocator without streams that stopped at the
// first stream op, after allocating, so the failed call had changed the stats.
#[test]
fn a_stream_op_on_an_allocator_without_streams_is_refused_before_anything_is_replayed() {
    let a = virtual_arena(&[]).without_streams();
    let trace = [alloc_on(1, 1000, 0), alloc_on(2, 1000, 1)];
    let e = replay(&a, &trace, &[Stream::new()], false).expect_err("no streams here");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    assert!(e.to_string().contains("trace op 1"), "names the op: {e}");
    assert_eq!(a.stats().num_allocs, 0, "nothing was replayed");
}

#[test]
fn an_id_allocated_twice_is_an_invalid_argument() {
    let a = virtual_arena(&[]);
    let trace = [
        TraceOp::Alloc {
            id: 7,
            size: 256,
            stream: 0,
        },
        TraceOp::Alloc {
            id: 7,
            size: 256,
            stream: 0,
        },
    ];
    assert_eq!(
        code(replay(&a, &trace, &[], false)),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
    assert_eq!(a.stats().in_use, 0);
}

#[test]
fn traces_replay_through_any_allocator() {
    let plain = PlainAllocator::new(AddressSpaceAllocator::default());
    let report = replay(&plain, &mixed_trace(2_000, 256, MIB, 50, 9), &[], true).expect("replay");
    assert_eq!(report.ops, 2_000);
    assert_eq!(plain.stats().in_use, 0);
}

#[test]
fn sampled_replays_record_memory_over_time_up_to_the_last_op() {
    let a = virtual_arena(&[]);
    let trace = mixed_trace(1_050, 256, MIB, 50, 5);
    let (report, samples) =
        cuda_arena_core::trace::replay_sampled(&a, &trace, &[], false, 100).expect("replay");
    assert_eq!(samples.len(), 11);
    assert_eq!(samples.last().map(|s| s.op), Some(report.ops));
    for s in &samples {
        assert!(s.held >= s.in_use && s.in_use >= s.requested, "{s:?}");
    }
    assert!(samples.iter().map(|s| s.requested).max() <= Some(report.peak_requested));
}

fn alloc_on(id: u64, size: u64, stream: u32) -> TraceOp {
    TraceOp::Alloc { id, size, stream }
}

// Issue 11, item 16: a trace line with `"stream": 7` failed deep in the replay.
#[test]
fn streams_for_a_trace_give_each_distinct_stream_number_its_own_stream() {
    let trace = [
        alloc_on(1, MIB, 7),
        TraceOp::Free { id: 1 },
        alloc_on(2, MIB, 9),
        TraceOp::Free { id: 2 },
        alloc_on(3, MIB, 7),
        TraceOp::Free { id: 3 },
    ];
    let streams = TraceStreams::for_trace(&trace).expect("two streams");
    assert_eq!(streams.len(), 2);
    let (s7, s9) = (
        streams.get(7).expect("7").id(),
        streams.get(9).expect("9").id(),
    );
    assert_ne!(s7, s9);
    assert!(streams.get(0).is_none() && streams.get(8).is_none());
    // Stream 9 may not take the chunk stream 7 freed (it never waited on 7), so the arena
    // grows; stream 7 takes its own chunk back.
    let a = virtual_arena(&[]);
    let (r, _) = replay_observed(&a, &trace, &streams, true, 0, &mut |_| {}).expect("replay");
    assert_eq!(r.peak_held, 3 * MIB);
    let b = virtual_arena(&[]);
    let no_streams: Vec<TraceOp> = trace
        .iter()
        .map(|op| match *op {
            TraceOp::Alloc { id, size, .. } => alloc_on(id, size, 0),
            free => free,
        })
        .collect();
    assert_eq!(
        replay(&b, &no_streams, &[], true)
            .expect("replay")
            .peak_held,
        MIB
    );
}

#[test]
fn more_distinct_stream_numbers_than_a_replay_takes_is_an_invalid_argument_naming_the_op() {
    let trace: Vec<TraceOp> = (1..=MAX_TRACE_STREAMS as u32 + 1)
        .map(|i| alloc_on(u64::from(i), 256, i * 3))
        .collect();
    let e = TraceStreams::for_trace(&trace).expect_err("too many");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    assert!(
        e.to_string()
            .contains(&format!("trace op {MAX_TRACE_STREAMS}")),
        "{e}"
    );
    assert!(TraceStreams::for_trace(&trace[..MAX_TRACE_STREAMS]).is_ok());
}

#[test]
fn a_trace_that_ends_with_allocations_live_is_replayed_and_they_are_counted_and_freed() {
    let a = virtual_arena(&[]);
    let trace = [
        alloc_on(1, 256, 0),
        alloc_on(2, 512, 0),
        TraceOp::Free { id: 1 },
    ];
    let r = replay(&a, &trace, &[], false).expect("replay");
    assert_eq!((r.ops, r.live_at_end), (3, 1));
    assert_eq!(a.stats().in_use, 0);
}

// Issue 11, item 16: `--compare arena.use_cuda_mempool=1` replayed through the arena.
#[test]
fn the_allocator_a_config_selects_is_the_pool_with_use_cuda_mempool_and_the_arena_without() {
    let backend = SimBackend::new(SimKind::Virtual, &[]);
    let pool_config =
        ArenaConfig::from_pairs([("arena.use_cuda_mempool", "1")]).expect("valid config");
    let pool = selected_allocator(&backend, MemoryKind::Cuda, 0, &pool_config).expect("pool");
    assert_eq!(pool.kind, SharedKind::Mempool);
    assert!(pool.warnings.is_empty());
    let arena =
        selected_allocator(&backend, MemoryKind::Cuda, 0, &ArenaConfig::default()).expect("arena");
    assert_eq!(arena.kind, SharedKind::DeviceArena);
    // The two hold different amounts for the same trace: the pool caches exact sizes.
    let trace = mixed_trace(2_000, 256, MIB, 50, 9);
    let held = |a: &dyn Allocator| replay(a, &trace, &[], true).expect("replay").peak_held;
    assert_ne!(held(&*pool.allocator), held(&*arena.allocator));
    assert!(pool.allocator.memory_log().regions.is_empty());
    assert!(!arena.allocator.memory_log().regions.is_empty());
}

#[test]
fn an_invalid_config_selects_no_allocator() {
    let backend = SimBackend::new(SimKind::Virtual, &[]);
    let config = ArenaConfig {
        initial_chunk_size_bytes: 0,
        ..ArenaConfig::default()
    };
    let e = selected_allocator(&backend, MemoryKind::Cuda, 0, &config).expect_err("invalid");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_CONFIG");
}
