//! The DESIGN's "Decisions where ORT's implementations differ", one test (or a few) each.
//! Decisions 8 and 9 concern the CUDA memory-pool allocator and are tested with it.

mod common;
use common::*;
use cuda_arena_core::{Allocator, DeviceLimits, RawAllocator, Stream, STATS_KEYS};

// Decision 1: Limit is -1 when unlimited; every key is always present.

#[test]
fn d1_limit_is_minus_one_when_max_mem_is_unlimited_or_zero() {
    assert_eq!(virtual_arena(&[]).stats().limit, -1);
    assert_eq!(virtual_arena(&[("arena.max_mem", "0")]).stats().limit, -1);
    assert_eq!(
        virtual_arena(&[("arena.max_mem", "4096")]).stats().limit,
        4096
    );
}

#[test]
fn d1_every_stats_key_is_present_before_any_allocation() {
    let pairs = virtual_arena(&[]).stats().to_pairs();
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, STATS_KEYS.to_vec());
    assert!(keys.contains(&"RequestedInUse") && keys.contains(&"ReservedBytes"));
    assert!(pairs.iter().skip(1).all(|(_, v)| v == "0"));
}

// Decision 2 is covered by tests/config.rs; here only its effect on growth.

#[test]
fn d2_a_cap_that_is_not_a_multiple_of_256_still_gives_256_multiple_regions() {
    let a = virtual_arena(&[
        ("arena.max_power_of_two_extend_bytes", "1048577"),
        ("arena.initial_chunk_size_bytes", "1048576"),
    ]);
    for _ in 0..4 {
        alloc(&a, MIB);
    }
    assert!(a.memory_log().regions.iter().all(|r| r.size % 256 == 0));
    a.check_invariants().expect("consistent");
}

// Decision 3: freeing what the allocator does not own throws UnknownPointer, changes nothing.

fn assert_free_is_unknown_and_changes_nothing(a: &impl Allocator, addr: u64) {
    let before = snapshot(a);
    assert_eq!(
        code(a.free(addr)),
        "ERR_ARENA_UNKNOWN_POINTER",
        "free({addr:#x})"
    );
    assert_eq!(snapshot(a), before);
}

#[test]
fn d3_free_of_a_foreign_address_is_unknown_pointer_and_changes_nothing() {
    let a = virtual_arena(&[]);
    let p = alloc(&a, 1000);
    let other = virtual_arena(&[]);
    let q = alloc(&other, 1000);
    assert_free_is_unknown_and_changes_nothing(&a, q);
    assert_free_is_unknown_and_changes_nothing(&a, 0xdead_0000);
    assert_free_is_unknown_and_changes_nothing(&a, u64::MAX);
    a.free(p).expect("own pointer");
}

#[test]
fn d3_free_of_an_interior_pointer_is_unknown_pointer_and_changes_nothing() {
    let a = virtual_arena(&[]);
    let p = alloc(&a, 1000);
    assert_free_is_unknown_and_changes_nothing(&a, p + 1);
    assert_free_is_unknown_and_changes_nothing(&a, p + 256);
    let r = a.reserve(5000).expect("fits").expect("non-zero");
    assert_free_is_unknown_and_changes_nothing(&a, r + 256);
}

#[test]
fn d3_double_free_is_unknown_pointer_and_changes_nothing() {
    let a = virtual_arena(&[]);
    let keep = alloc(&a, 256);
    let p = alloc(&a, 256);
    a.free(p).expect("first free");
    assert_free_is_unknown_and_changes_nothing(&a, p);
    let r = a.reserve(4096).expect("fits").expect("non-zero");
    a.free(r).expect("first free");
    assert_free_is_unknown_and_changes_nothing(&a, r);
    a.free(keep).expect("live");
}

#[test]
fn d3_free_of_a_merged_away_chunk_start_is_unknown_pointer() {
    let a = virtual_arena(&[]);
    let p = alloc(&a, 256);
    let q = alloc(&a, 256);
    a.free(q).expect("live");
    a.free(p).expect("live");
    assert_free_is_unknown_and_changes_nothing(&a, q);
}

#[test]
fn d3_free_of_null_is_a_no_op() {
    let a = virtual_arena(&[]);
    let before = snapshot(&a);
    a.free(0).expect("no-op");
    assert_eq!(snapshot(&a), before);
}

// Decision 4: sizes that cannot be served fail before touching the raw allocator.

#[test]
fn d4_a_size_whose_rounding_overflows_is_out_of_memory_without_a_raw_call() {
    let a = virtual_arena(&[]);
    for size in [u64::MAX, u64::MAX - 254, u64::MAX - 100] {
        assert_eq!(code(a.alloc(size)), "ERR_ARENA_OUT_OF_MEMORY");
        assert_eq!(
            code(a.alloc_on_stream(size, &Stream::new())),
            "ERR_ARENA_OUT_OF_MEMORY"
        );
    }
    assert_eq!(
        a.raw().raw_stats(),
        cuda_arena_core::RawStats {
            free: Some(80 * GIB),
            total: Some(80 * GIB),
            ..Default::default()
        }
    );
    assert_eq!(a.stats().num_allocs, 0);
}

#[test]
fn d4_a_size_above_max_mem_is_out_of_memory_without_a_raw_call() {
    let a = virtual_arena(&[("arena.max_mem", "1048576")]);
    assert_eq!(code(a.alloc(MIB + 1)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(
        a.raw().raw_stats().raw_allocs + a.raw().raw_stats().raw_failures,
        0
    );
    assert!(a.alloc(MIB).expect("exactly max_mem fits").is_some());
}

// Decision 5: reserve is budget-checked against max_mem.

#[test]
fn d5_reserve_beyond_the_budget_is_out_of_memory_and_changes_nothing() {
    let a = virtual_arena(&[("arena.max_mem", "2097152")]);
    let p = alloc(&a, 256); // takes a 1 MiB region
    let before = snapshot(&a);
    assert_eq!(code(a.reserve(MIB + 1)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(snapshot(&a), before);
    let r = a
        .reserve(MIB)
        .expect("exactly the rest fits")
        .expect("non-zero");
    assert_eq!(a.stats().total_allocated, 2 * MIB);
    a.free(r).expect("live");
    a.free(p).expect("live");
}

#[test]
fn d5_reserves_count_against_the_budget_of_later_growth() {
    let a = virtual_arena(&[("arena.max_mem", "2097152"), ("arena.extend_strategy", "1")]);
    let r = a.reserve(MIB + 512).expect("fits").expect("non-zero");
    assert_eq!(code(a.alloc(MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    a.free(r).expect("live");
    assert!(a.alloc(MIB).expect("budget is back").is_some());
}

// Decision 6: a chunk that moves between streams leaves the first; shrink sees every region.

#[test]
fn d6_resetting_the_old_stream_does_not_detach_a_chunk_another_stream_took() {
    let a = virtual_arena(&[]);
    let (s, t) = (Stream::new(), Stream::new());
    let p = a
        .alloc_on_stream(4096, &s)
        .expect("fits")
        .expect("non-zero");
    let guard = a
        .alloc_on_stream(4096, &s)
        .expect("fits")
        .expect("non-zero");
    a.free(p).expect("live");
    t.wait(&s.record());
    let q = a
        .alloc_on_stream(4096, &t)
        .expect("fits")
        .expect("non-zero");
    assert_eq!(q, p, "t may take s's chunk after waiting");
    a.reset_chunks_using_stream(&s).expect("reset");
    let chunk = a.memory_log().regions[0]
        .chunks
        .iter()
        .find(|c| c.addr == q)
        .cloned()
        .expect("chunk");
    assert_eq!(chunk.stream, Some(t.id()), "the chunk still belongs to t");
    a.free(q).expect("live");
    let plain = alloc(&a, 4096);
    assert_ne!(
        plain, q,
        "a chunk t freed is not reusable without a stream until t is reset"
    );
    a.free(guard).expect("live");
    a.check_invariants().expect("consistent");
}

#[test]
fn d6_shrink_releases_the_first_region_too() {
    let a = virtual_arena(&[]);
    let p = alloc(&a, 1024);
    a.free(p).expect("live");
    a.shrink().expect("shrink");
    let s = a.stats();
    assert_eq!(
        (
            s.num_arena_extensions,
            s.num_arena_shrinkages,
            s.total_allocated
        ),
        (0, 1, 0)
    );
    assert_eq!(a.raw().raw_stats().raw_bytes_outstanding, 0);
}

#[test]
fn d6_shrink_keeps_reserves_and_regions_with_live_chunks() {
    let a = virtual_arena(&[("arena.extend_strategy", "1")]);
    let keep = alloc(&a, 4096);
    let gone = alloc(&a, 8192);
    let r = a.reserve(1000).expect("fits").expect("non-zero");
    a.free(gone).expect("live");
    a.shrink().expect("shrink");
    let s = a.stats();
    assert_eq!(
        (s.num_arena_extensions, s.total_allocated, s.reserved_bytes),
        (1, 4096 + 1000, 1000)
    );
    a.free(keep).expect("live");
    a.free(r).expect("live");
}

#[test]
fn d6_shrink_resets_power_of_two_growth_to_the_initial_growth_size() {
    let a = virtual_arena(&[("arena.initial_growth_chunk_size_bytes", "3000")]);
    let ps: Vec<u64> = (0..3).map(|_| alloc(&a, MIB)).collect(); // regions 1, 2 MiB
    for p in ps {
        a.free(p).expect("live");
    }
    a.shrink().expect("shrink");
    alloc(&a, 256);
    assert_eq!(
        a.memory_log().regions[0].size,
        3072,
        "growth restarts at 3000 rounded up"
    );
}

// Decision 7: out of memory releases wholly free regions and tries once more.

#[test]
fn d7_growth_that_the_device_refuses_succeeds_after_releasing_free_regions() {
    let a = limited_arena(
        DeviceLimits::with_total(12 * MIB),
        &[("arena.extend_strategy", "1")],
    );
    let keep = alloc(&a, 2 * MIB);
    let idle = alloc(&a, 8 * MIB);
    a.free(idle).expect("live");
    // 2 + 8 MiB held; 9 MiB more cannot come from the 12 MiB device unless the idle 8 MiB go back.
    let big = alloc(&a, 9 * MIB);
    let s = a.stats();
    assert_eq!(
        (
            s.num_arena_extensions,
            s.num_arena_shrinkages,
            s.total_allocated
        ),
        (2, 1, 11 * MIB)
    );
    a.free(big).expect("live");
    a.free(keep).expect("live");
    a.check_invariants().expect("consistent");
}

#[test]
fn d7_growth_beyond_max_mem_succeeds_after_releasing_free_regions() {
    let a = virtual_arena(&[
        ("arena.extend_strategy", "1"),
        ("arena.max_mem", "10485760"),
    ]);
    let idle = alloc(&a, 4 * MIB);
    a.free(idle).expect("live");
    // 4 MiB held + 7 MiB more would pass the 10 MiB budget.
    let p = alloc(&a, 7 * MIB);
    assert_eq!(a.stats().num_arena_shrinkages, 1);
    assert_eq!(a.stats().total_allocated, 7 * MIB);
    a.free(p).expect("live");
}

#[test]
fn d7_a_failure_after_releasing_changes_only_the_released_regions() {
    let a = limited_arena(
        DeviceLimits::with_total(16 * MIB),
        &[("arena.extend_strategy", "1")],
    );
    let keep = alloc(&a, 4 * MIB);
    let idle = alloc(&a, 4 * MIB);
    a.free(idle).expect("live");
    let before = snapshot(&a);
    assert_eq!(code(a.alloc(13 * MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    let after = snapshot(&a);
    assert_eq!(
        after.live_chunks(),
        before.live_chunks(),
        "live allocations untouched"
    );
    let (b, s) = (before.stats, after.stats);
    assert_eq!(s.num_arena_extensions, b.num_arena_extensions - 1);
    assert_eq!(s.num_arena_shrinkages, b.num_arena_shrinkages + 1);
    assert_eq!(s.total_allocated, b.total_allocated - 4 * MIB);
    assert_eq!(
        (s.in_use, s.requested_in_use, s.num_allocs, s.max_in_use),
        (b.in_use, b.requested_in_use, b.num_allocs, b.max_in_use)
    );
    a.free(keep).expect("live");
}

#[test]
fn d7_a_failure_with_nothing_to_release_changes_nothing() {
    let a = limited_arena(
        DeviceLimits::with_total(8 * MIB),
        &[("arena.extend_strategy", "1")],
    );
    let keep = alloc(&a, 4 * MIB);
    let before = snapshot(&a);
    assert_eq!(code(a.alloc(5 * MIB)), "ERR_ARENA_OUT_OF_MEMORY");
    assert_eq!(snapshot(&a), before);
    a.free(keep).expect("live");
}

#[test]
fn d7_reserve_also_releases_free_regions_before_failing() {
    let a = limited_arena(
        DeviceLimits::with_total(8 * MIB),
        &[("arena.extend_strategy", "1")],
    );
    let idle = alloc(&a, 4 * MIB);
    a.free(idle).expect("live");
    let r = a
        .reserve(6 * MIB)
        .expect("fits once the idle region is gone")
        .expect("non-zero");
    assert_eq!(a.stats().num_arena_shrinkages, 1);
    a.free(r).expect("live");
}

#[test]
fn d7_a_failure_under_an_unlimited_max_mem_says_unlimited_not_2_to_the_64_minus_1() {
    for vm in [false, true] {
        let a = if vm {
            virtual_vm_arena(&[])
        } else {
            virtual_arena(&[])
        };
        let keep = alloc(&a, MIB);
        for size in [1u64 << 62, u64::MAX - 4095, u64::MAX - MIB] {
            for err in [
                a.alloc(size).expect_err("too large"),
                a.reserve(size).expect_err("too large"),
            ] {
                let message = err.to_string();
                assert!(!message.contains(&u64::MAX.to_string()), "{message}");
            }
        }
        a.free(keep).expect("live");
    }
}
