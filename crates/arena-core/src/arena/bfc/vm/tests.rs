//! Virtual-memory mode: merge and reserve rules seen from the outside.

use crate::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, DeviceLimits, Stream, VirtualMemory,
};
use std::sync::Arc;

#[test]
fn a_chunk_of_no_stream_freed_between_two_streams_free_chunks_joins_only_the_one_above() {
    let raw =
        AddressSpaceAllocator::new(DeviceLimits::with_total(1 << 30)).with_granularity(1 << 16);
    let vm: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    let a = Arena::with_virtual_memory(raw, vm, ArenaConfig::default()).expect("arena");
    let (s, t) = (Stream::new(), Stream::new());
    // Adjacent in one page: s's, no stream's, t's.
    let x = a.alloc_on_stream(4096, &s).expect("fits").expect("x");
    let y = a.alloc(4096).expect("fits").expect("y");
    let z = a.alloc_on_stream(4096, &t).expect("fits").expect("z");
    assert_eq!((y, z), (x + 4096, x + 8192), "packed from the bottom");
    a.free(x).expect("live");
    a.free(z).expect("live");
    a.free(y).expect("live");
    // y joined t's free chunk above it (taking its stream), not s's below it: t takes
    // both, with no wait on s.
    let w = a.alloc_on_stream(8192, &t).expect("fits").expect("w");
    assert_eq!(w, y);
    a.free(w).expect("live");
    a.check_invariants().expect("consistent");
}

fn four_gib(pairs: &[(&str, &str)]) -> Arena<AddressSpaceAllocator> {
    let raw = AddressSpaceAllocator::new(DeviceLimits::with_total(4 << 30)).with_granularity(4096);
    let vm: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    let config = ArenaConfig::from_pairs(pairs.iter().copied()).expect("config");
    Arena::with_virtual_memory(raw, vm, config).expect("arena")
}

fn oom_reason(a: &Arena<AddressSpaceAllocator>, size: u64) -> String {
    let e = a.alloc(size).expect_err("out of memory");
    assert_eq!(e.code(), "ERR_ARENA_OUT_OF_MEMORY");
    e.to_string()
}

#[test]
fn more_than_the_device_has_is_said_so_with_no_advice_that_cannot_work() {
    // Issue 26, item 4: 1 TiB on a 4 GiB device advised a larger page size, and with
    // 1 GiB pages the message said the empty device had 0 bytes free.
    for pairs in [vec![], vec![("arena.vm_page_size_bytes", "1073741824")]] {
        let a = four_gib(&pairs);
        for size in [1u64 << 40, 5 << 30] {
            let reason = oom_reason(&a, size);
            assert!(
                reason.contains("more than the device's 4294967296 bytes"),
                "{pairs:?} {size}: {reason}"
            );
            assert!(!reason.contains("vm_page_size_bytes"), "{reason}");
            assert!(!reason.contains("0 of 4294967296 bytes free"), "{reason}");
        }
        assert_eq!(
            a.stats().total_allocated,
            0,
            "nothing held after the failures"
        );
    }
}

#[test]
fn a_mapping_that_fails_partway_says_how_much_it_had_mapped() {
    let a = four_gib(&[("arena.vm_map_unit_bytes", "1073741824")]);
    let keep = a.alloc(2 << 30).expect("fits").expect("keep");
    let reason = oom_reason(&a, 3 << 30);
    assert!(reason.contains("mapped already (given back)"), "{reason}");
    a.free(keep).expect("live");
}

#[test]
fn percent_of_is_the_exact_floor_at_every_width() {
    let exact =
        |b: u64, p: u64| u64::try_from(u128::from(b) * u128::from(p) / 100).unwrap_or(u64::MAX);
    for b in [
        0,
        1,
        99,
        100,
        101,
        1 << 32,
        u64::MAX / 100,
        u64::MAX / 3,
        u64::MAX,
    ] {
        for p in [0, 1, 10, 30, 99, 100, 101, 1000, u64::MAX / 7, u64::MAX] {
            assert_eq!(super::percent_of(b, p), exact(b, p), "{p} % of {b}");
        }
    }
}
