//! Virtual-memory mode: requests up to 1 MiB and larger ones are fitted from pools of ranges of
//! their own (PyTorch's small and large pools), kept apart while the peak headroom has room.
//! Once it is used up, a request that finds no free chunk in its own pool takes one of the
//! other's rather than unmapping pages to map new ones; after the first such miss it does so on
//! the common path (one thread replaying `mixed` ÷ 16 met 8,200 such misses a pass, each through
//! the slow path: 105 against 71 ns/op).

mod common;
use common::*;
use cuda_arena_core::Allocator;

const PAGE: u64 = 64 * KIB;

#[test]
fn past_the_headroom_small_requests_take_the_large_pools_free_memory_on_the_common_path() {
    let a = vm_arena(GIB, PAGE, &[]);
    let big = alloc(&a, 4 * MIB);
    a.free(big).expect("live");
    let held = a.stats().total_allocated;
    let slow = a.slow_allocations();
    // The small pool has nothing free, and mapping for it would pass the headroom (2 % of the
    // 4 MiB peak): the large pool's free chunk serves, the first time from the slow path.
    let first = alloc(&a, 200 * KIB);
    assert_eq!(a.slow_allocations(), slow + 1);
    let rest: Vec<u64> = (0..10).map(|_| alloc(&a, 200 * KIB)).collect();
    assert_eq!(
        a.slow_allocations(),
        slow + 1,
        "the next ten from the large pool's chunk on the common path"
    );
    for &p in std::iter::once(&first).chain(&rest) {
        assert!(
            p >= big && p + 200 * KIB <= big + 4 * MIB,
            "inside the freed chunk"
        );
    }
    assert_eq!(a.stats().total_allocated, held, "nothing mapped");
    for p in std::iter::once(first).chain(rest) {
        a.free(p).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn a_small_request_whose_pages_fit_in_the_headroom_maps_its_own_pool_even_after_a_miss_crossed() {
    // A headroom of 10 % of the 4 MiB peak: 409 KiB.
    let a = vm_arena(GIB, PAGE, &[("arena.vm_peak_headroom_percent", "10")]);
    let big = alloc(&a, 4 * MIB);
    a.free(big).expect("live");
    // 640 KiB of pages would pass it: the large pool's free chunk serves.
    let first = alloc(&a, 600 * KIB);
    assert!(first >= big && first < big + 4 * MIB);
    let slow = a.slow_allocations();
    // One page fits in it: the small pool maps a page of its own, from the slow path.
    let small = alloc(&a, 1000);
    assert!(
        small < big || small >= big + 4 * MIB,
        "not cut from the large pool's chunk while the headroom has room for its pages"
    );
    assert_eq!(a.slow_allocations(), slow + 1);
    for p in [first, small] {
        a.free(p).expect("live");
    }
    a.check_invariants().expect("consistent");
}
