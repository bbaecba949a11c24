//! Virtual-memory mode: how many pages one mapping holds. A sub-arena maps a run of pages in
//! mappings of up to `arena.vm_map_unit_bytes` (fewer driver calls), but only a whole mapping
//! can be unmapped; once a second stream maps pages there, it maps one page at a time, so the
//! free pages of one stream's memory are never held by another's use of the same mapping.

mod common;
use common::*;
use cuda_arena_core::{AddressSpaceAllocator, Allocator, Arena, Stream};

const PAGE: u64 = 64 * KIB;

fn arena() -> Arena<AddressSpaceAllocator> {
    vm_arena(GIB, PAGE, &[])
}

fn on(a: &Arena<AddressSpaceAllocator>, size: u64, s: &Stream) -> u64 {
    a.alloc_on_stream(size, s).expect("fits").expect("non-zero")
}

#[test]
fn one_stream_maps_a_run_of_pages_in_one_mapping() {
    let a = arena();
    let s = Stream::new();
    let p = on(&a, 20 * MIB, &s);
    let q = on(&a, 20 * MIB, &s);
    assert_eq!(
        map_calls(&a),
        2,
        "20 MiB in one mapping each (the unit is 64 MiB)"
    );
    for x in [p, q] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn from_a_second_stream_on_pages_are_mapped_one_at_a_time() {
    let a = arena();
    let (s, t) = (Stream::new(), Stream::new());
    let p = on(&a, 20 * MIB, &s);
    assert_eq!(map_calls(&a), 1);
    let q = on(&a, 20 * MIB, &t);
    assert_eq!(
        map_calls(&a),
        1 + 20 * MIB / PAGE,
        "the second stream's run, page by page"
    );
    let r = on(&a, 4 * MIB, &s);
    assert_eq!(
        map_calls(&a),
        1 + 24 * MIB / PAGE,
        "and the first stream's from then on"
    );
    for x in [p, q, r] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn with_several_streams_the_free_pages_beside_a_chunk_in_use_can_go() {
    let a = arena();
    let (s, t) = (Stream::new(), Stream::new());
    let p = on(&a, 2 * MIB, &s);
    let x = on(&a, 8 * MIB, &t);
    a.free(x).expect("live");
    let y = on(&a, 2 * MIB, &t);
    a.shrink().expect("shrink");
    // In one 8 MiB mapping, the 6 MiB free beside y would stay mapped through the shrink.
    assert_eq!(mapped(&a), 4 * MIB, "p's pages and y's, no more");
    for z in [p, y] {
        a.free(z).expect("live");
    }
    a.shrink().expect("shrink");
    assert_eq!(mapped(&a), 0);
    a.check_invariants().expect("consistent");
}
