//! ONNX Runtime's own arena tests (`bfc_arena_test.cc`), restated as specifications of
//! cuda-arena with the numbers ORT asserts.

mod common;
use common::*;
use cuda_arena_core::{Allocator, DeviceLimits, RawAllocator, Stream};

const LIMIT_1_GIB: &[(&str, &str)] = &[("arena.max_mem", "1073741824")];

fn check_stats(a: &impl Allocator, num_allocs: u64, in_use: u64, max_in_use: u64, max_alloc: u64) {
    let s = a.stats();
    assert_eq!(
        (s.num_allocs, s.in_use, s.max_in_use, s.max_alloc_size),
        (num_allocs, in_use, max_in_use, max_alloc),
        "NumAllocs, InUse, MaxInUse, MaxAllocSize"
    );
}

#[test]
fn no_dups_allocating_every_size_below_1024_gives_distinct_non_overlapping_chunks() {
    let a = host_arena(LIMIT_1_GIB);
    check_stats(&a, 0, 0, 0, 0);
    let mut ptrs: Vec<u64> = (1..1024).map(|s| alloc(&a, s)).collect();
    check_stats(&a, 1023, 654_336, 654_336, 1024);
    ptrs.sort_unstable();
    for w in ptrs.windows(2) {
        let req = a.requested_size(w[0]).expect("live");
        assert!(req > 0);
        assert!(
            w[1] - w[0] >= req,
            "chunks at {:#x} and {:#x} overlap",
            w[0],
            w[1]
        );
    }
    for p in ptrs {
        a.free(p).expect("live");
    }
    check_stats(&a, 1023, 0, 654_336, 1024);
}

#[test]
fn exercise_coalescing_repeated_mixed_rounds_do_not_fragment_or_grow() {
    let a = virtual_arena(LIMIT_1_GIB);
    let first = alloc(&a, 4096);
    a.free(first).expect("live");
    check_stats(&a, 1, 0, 4096, 4096);
    for _ in 0..1024 {
        let t1 = alloc(&a, 4096);
        let t2 = alloc(&a, 8 * MIB);
        let t3 = alloc(&a, 16384);
        let t4 = alloc(&a, 32 * MIB);
        for p in [t1, t2, t3, t4] {
            a.free(p).expect("live");
        }
    }
    check_stats(&a, 4097, 0, 41_963_520, 33_554_432);
    let s = a.stats();
    assert_eq!((s.num_arena_extensions, s.total_allocated), (3, 42_991_616));
    assert_eq!(
        alloc(&a, 4096),
        first,
        "everything coalesced back: the first address comes back"
    );
}

#[test]
fn allocating_zero_bytes_returns_none() {
    let a = virtual_arena(LIMIT_1_GIB);
    assert_eq!(a.alloc(0).expect("size 0 is not an error"), None);
    assert_eq!(a.stats().num_allocs, 0);
}

#[test]
fn allocated_vs_requested_a_4_byte_request_takes_a_256_byte_chunk() {
    let a = virtual_arena(LIMIT_1_GIB);
    let p = alloc(&a, 4);
    assert_eq!(a.requested_size(p).expect("live"), 4);
    assert_eq!(a.allocated_size(p).expect("live"), 256);
}

#[test]
fn an_out_of_memory_failure_does_not_prevent_later_allocations() {
    let a = host_arena(LIMIT_1_GIB);
    let kept: Vec<u64> = (1..64).map(|i| alloc(&a, i * 1000)).collect();
    assert_eq!(code(a.alloc(GIB + 1)), "ERR_ARENA_OUT_OF_MEMORY");
    let more: Vec<u64> = (1..64).map(|i| alloc(&a, i * 1500)).collect();
    let mut all: Vec<u64> = kept.iter().chain(&more).copied().collect();
    all.sort_unstable();
    for w in all.windows(2) {
        assert!(w[1] - w[0] >= a.requested_size(w[0]).expect("live"));
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn extend_strategy_default_doubles_regions_from_1_mib() {
    let a = virtual_arena(&[]);
    for _ in 0..256 {
        alloc(&a, MIB);
    }
    let sizes: Vec<u64> = a.memory_log().regions.iter().map(|r| r.size).collect();
    assert_eq!(sizes, (0..9).map(|i| MIB << i).collect::<Vec<_>>());
    let s = a.stats();
    assert_eq!(
        (s.num_arena_extensions, s.total_allocated),
        (9, 535_822_336)
    );
}

#[test]
fn extend_strategy_power_of_two_growth_stops_at_the_cap_but_larger_requests_still_fit() {
    let a = virtual_arena(&[("arena.max_power_of_two_extend_bytes", "33554432")]);
    for _ in 0..256 {
        alloc(&a, MIB);
    }
    let sizes: Vec<u64> = a.memory_log().regions.iter().map(|r| r.size).collect();
    let mut want: Vec<u64> = (0..5).map(|i| MIB << i).collect();
    want.extend([32 * MIB; 8]);
    assert_eq!(sizes, want);
    let s = a.stats();
    assert_eq!(
        (s.num_arena_extensions, s.total_allocated),
        (13, 300_941_312)
    );
    let big = alloc(&a, 64 * MIB);
    assert_eq!(a.allocated_size(big).expect("live"), 64 * MIB);
    assert_eq!(
        a.memory_log()
            .regions
            .iter()
            .filter(|r| r.size == 64 * MIB)
            .count(),
        1
    );
}

#[test]
fn a_reserve_may_take_the_bytes_under_max_mem_that_no_region_can() {
    // Regions come in multiples of 256, reserves in any size: the 177 bytes a region leaves
    // under this limit are a reserve's (as in ORT, whose Reserve checks max_mem exactly).
    let a = virtual_arena(&[("arena.max_mem", "131505")]);
    let x = alloc(&a, 38343);
    assert_eq!(a.stats().total_allocated, 131328);
    let r = a
        .reserve(177)
        .expect("177 bytes are left")
        .expect("non-null");
    assert_eq!(code(a.reserve(1)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(a.stats().total_allocated, 131505);
    a.free(r).expect("live");
    a.free(x).expect("live");
}

#[test]
fn custom_memory_limit_a_request_past_the_remaining_budget_fails() {
    let a = virtual_arena(&[("arena.max_mem", "1048576")]);
    let first = alloc(&a, 256);
    assert_eq!(
        a.stats().total_allocated,
        MIB,
        "the first region takes the whole budget"
    );
    let before = snapshot(&a);
    let raw_before = a.raw().raw_stats();
    assert_eq!(code(a.alloc(MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(code(a.alloc(4 * MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(snapshot(&a), before);
    assert_eq!(
        a.raw().raw_stats(),
        raw_before,
        "the budget check needs no raw call"
    );
    a.free(first).expect("live");
}

#[test]
fn custom_memory_limit_near_u64_max_fails_in_the_raw_allocator_without_backing_off() {
    let available = u64::MAX - 5 * MIB;
    let a = virtual_arena(&[
        ("arena.max_mem", &available.to_string()),
        ("arena.extend_strategy", "1"),
    ]);
    let first = alloc(&a, 256);
    let failures = a.raw().raw_stats().raw_failures;
    assert_eq!(
        code(a.alloc(available - 3 * MIB)),
        "ERR_ARENA_OUT_OF_MEMORY"
    );
    assert_eq!(
        a.raw().raw_stats().raw_failures,
        failures + 1,
        "90% of the size is below the request, so there is exactly one raw attempt"
    );
    a.free(first).expect("live");
}

#[test]
fn reserve_memory_is_returned_to_the_raw_allocator_when_freed() {
    let a = virtual_arena(LIMIT_1_GIB);
    let p = alloc(&a, 256);
    let r = a.reserve(4 * MIB).expect("fits").expect("non-zero");
    a.free(p).expect("live");
    a.free(r).expect("live");
    assert_eq!(a.stats().total_allocated, MIB);
}

#[test]
fn bytes_requested_in_use_tracks_requested_not_rounded_sizes() {
    let a = virtual_arena(&[("arena.extend_strategy", "1")]);
    let p1 = alloc(&a, 100);
    assert_eq!((a.stats().requested_in_use, a.stats().in_use), (100, 256));
    let p2 = alloc(&a, 200);
    assert_eq!((a.stats().requested_in_use, a.stats().in_use), (300, 512));
    a.free(p1).expect("live");
    assert_eq!(a.stats().requested_in_use, 200);
    a.free(p2).expect("live");
    assert_eq!((a.stats().requested_in_use, a.stats().in_use), (0, 0));
}

/// `kSameAsRequested` makes every allocation that fits no free chunk a region of its own, so
/// the regions grow with what a caller holds: finding, adding and dropping one must not cost
/// time in proportion to how many there are (each took a scan of them all before, 21 µs an
/// allocation at 200,000 regions, and a shrink took quadratic time).
#[test]
fn a_hundred_thousand_regions_of_their_own_are_tiled_freed_and_shrunk_away() {
    const N: u64 = 100_000;
    let a = virtual_arena(&[("arena.extend_strategy", "1")]);
    let ptrs: Vec<u64> = (0..N).map(|_| alloc(&a, 256)).collect();
    let s = a.stats();
    assert_eq!((s.num_arena_extensions, s.total_allocated), (N, N * 256));
    for &p in ptrs.iter().step_by(997) {
        assert_eq!(a.requested_size(p).expect("found"), 256, "{p:#x}");
    }
    for p in ptrs {
        a.free(p).expect("live");
    }
    a.shrink().expect("shrinks");
    let s = a.stats();
    assert_eq!(
        (
            s.num_arena_extensions,
            s.total_allocated,
            s.num_arena_shrinkages
        ),
        (0, 0, N)
    );
    let raw = a.raw().raw_stats();
    assert_eq!((raw.raw_frees, raw.raw_bytes_outstanding), (N, 0));
}

#[test]
fn bytes_requested_in_use_with_reserve_counts_reserves_in_full() {
    let a = virtual_arena(&[("arena.extend_strategy", "1")]);
    let r = a.reserve(4096).expect("fits").expect("non-zero");
    let s = a.stats();
    assert_eq!(
        (s.requested_in_use, s.in_use, s.reserved_bytes),
        (4096, 4096, 4096)
    );
    a.free(r).expect("live");
    let s = a.stats();
    assert_eq!((s.requested_in_use, s.in_use, s.reserved_bytes), (0, 0, 0));
}

#[test]
fn backoff_against_a_raw_allocator_that_always_fails_ends_after_48_attempts() {
    let a = limited_arena(
        DeviceLimits {
            total_memory: 80 * GIB,
            max_allocation: 0,
        },
        &[("arena.max_mem", "10485760")],
    );
    assert_eq!(code(a.alloc(1024)), "ERR_ARENA_OUT_OF_MEMORY");
    let raw = a.raw().raw_stats();
    assert_eq!((raw.raw_failures, raw.raw_allocs), (48, 0));
}

#[test]
fn backoff_settles_on_the_first_size_the_raw_allocator_accepts() {
    let a = limited_arena(
        DeviceLimits {
            total_memory: 80 * GIB,
            max_allocation: 600_000,
        },
        &[],
    );
    alloc(&a, 1024);
    let raw = a.raw().raw_stats();
    assert_eq!((raw.raw_failures, raw.raw_allocs), (6, 1));
    assert_eq!(a.stats().total_allocated, 557_824);
}

#[test]
fn shrink_releases_wholly_free_regions_and_counts_them() {
    let a = virtual_arena(&[("arena.extend_strategy", "1")]);
    let small = alloc(&a, 1024);
    let _big = alloc(&a, 10 * MIB);
    assert_eq!(a.stats().num_arena_extensions, 2);
    a.free(small).expect("live");
    a.shrink().expect("shrink");
    let s = a.stats();
    assert_eq!(
        (
            s.num_arena_extensions,
            s.num_arena_shrinkages,
            s.total_allocated
        ),
        (1, 1, 10_485_760)
    );
}

#[test]
fn two_stream_allocation_reuses_chunks_across_streams_only_after_a_wait_or_reset() {
    let a = virtual_arena(LIMIT_1_GIB);
    let (s1, s2) = (Stream::new(), Stream::new());
    let on = |s: &Stream, size| a.alloc_on_stream(size, s).expect("fits").expect("non-zero");

    let s1_a = on(&s1, 4096);
    let s2_a = on(&s2, 4096);
    a.free(s1_a).expect("live");
    let s2_b = on(&s2, 4096);
    assert_ne!(s2_b, s1_a, "stream 2 cannot reuse stream 1's chunk");
    a.free(s2_a).expect("live");
    let s1_c = on(&s1, 4096);
    assert_eq!(s1_c, s1_a, "stream 1 gets its own chunk back");
    let s1_d = on(&s1, 4096);
    assert_ne!(s1_d, s2_a, "stream 1 cannot take stream 2's chunk");
    a.free(s2_b).expect("live");

    a.reset_chunks_using_stream(&s2).expect("reset");
    let s1_e = on(&s1, 8192);
    assert_eq!(
        s1_e, s2_a,
        "after the reset stream 2's chunks are free for anyone"
    );
    a.free(s1_c).expect("live");
    a.free(s1_d).expect("live");

    s2.wait(&s1.record());
    let s2_c = on(&s2, 4096);
    assert_eq!(
        s2_c, s1_c,
        "after waiting on stream 1, stream 2 may take its older chunks"
    );
    let s2_d = on(&s2, 4096);
    assert_eq!(s2_d, s1_d);
    let s1_f = on(&s1, 4096);
    a.free(s1_f).expect("live");
    let s2_e = on(&s2, 4096);
    assert_ne!(
        s2_e, s1_f,
        "a chunk stream 1 used after the event is not safe for stream 2"
    );
    a.free(s1_e).expect("live");

    a.reset_chunks_using_stream(&s1).expect("reset");
    let s2_f = on(&s2, 8192);
    assert_eq!(s2_f, s1_e);
    for p in [s2_d, s2_e, s2_f, s2_c] {
        a.free(p).expect("live");
    }
    a.check_invariants().expect("consistent");
}
