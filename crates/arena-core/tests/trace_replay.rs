//! Replaying allocation traces through an allocator.

mod common;
use common::*;
use cuda_arena_core::trace::{mixed_trace, replay, TraceOp};
use cuda_arena_core::{Allocator, PlainAllocator, RawAllocator, Stream, VirtualAllocator};

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
    assert_eq!(
        code(replay(&a, &trace, &[], false)),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
    assert_eq!(a.stats().in_use, 0);
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
    let plain = PlainAllocator::new(VirtualAllocator::default());
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
