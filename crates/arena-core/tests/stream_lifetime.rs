//! Issue 11, item 7: a stream's chunks stay tagged with it only while it lives. Releasing a
//! stream (dropping its last clone) resets its chunks in every allocator that used it, so
//! one stream per request — the way servers and ONNX Runtime use streams — holds no more
//! than one request needs, and nothing grows with the number of streams ever seen.

mod common;

use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, ForeignStreams, PoolAllocator, Stream, MAX_FOREIGN_STREAMS,
};

/// Chunks in the memory log tagged with `id`.
fn tagged(a: &impl Allocator, id: u64) -> usize {
    a.memory_log()
        .regions
        .iter()
        .flat_map(|r| &r.chunks)
        .filter(|c| c.stream == Some(id))
        .count()
}

#[test]
fn one_stream_per_request_holds_what_one_request_needs() {
    let a = virtual_arena(&[]);
    for _ in 0..40 {
        let s = Stream::new();
        let p = a
            .alloc_on_stream(64 * MIB, &s)
            .expect("alloc")
            .expect("addr");
        a.free(p).expect("free");
        drop(s);
    }
    let held = a.stats().total_allocated;
    assert!(
        held <= 128 * MIB,
        "40 requests of 64 MiB, one stream each, hold {} MiB",
        held / MIB
    );
    a.check_invariants().expect("invariants");
}

#[test]
fn a_released_streams_free_chunks_lose_their_tag_and_merge() {
    let a = virtual_arena(&[]);
    let s = Stream::new();
    let id = s.id();
    let ps: Vec<u64> = (0..8)
        .map(|_| a.alloc_on_stream(4096, &s).expect("alloc").expect("addr"))
        .collect();
    for p in ps {
        a.free(p).expect("free");
    }
    assert!(tagged(&a, id) > 0);
    drop(s);
    assert_eq!(tagged(&a, id), 0);
    let log = a.memory_log();
    assert_eq!(log.regions.len(), 1);
    assert_eq!(
        log.regions[0].chunks.len(),
        1,
        "the region is one free chunk again"
    );
    a.check_invariants().expect("invariants");
}

#[test]
fn a_chunk_in_use_when_its_stream_is_released_merges_when_freed() {
    let a = virtual_arena(&[]);
    let s = Stream::new();
    let id = s.id();
    let p = a.alloc_on_stream(4096, &s).expect("alloc").expect("addr");
    drop(s);
    assert_eq!(tagged(&a, id), 0);
    a.free(p).expect("free");
    assert_eq!(a.memory_log().regions[0].chunks.len(), 1);
    let other = Stream::new();
    assert_eq!(
        a.alloc_on_stream(4096, &other).expect("alloc"),
        Some(p),
        "another stream takes the freed chunk at once"
    );
}

#[test]
fn a_clone_kept_alive_keeps_the_tag_until_it_goes() {
    let a = virtual_arena(&[]);
    let s = Stream::new();
    let kept = s.clone();
    let p = a.alloc_on_stream(4096, &s).expect("alloc").expect("addr");
    a.free(p).expect("free");
    drop(s);
    assert!(tagged(&a, kept.id()) > 0, "the stream is still alive");
    let id = kept.id();
    drop(kept);
    assert_eq!(tagged(&a, id), 0);
}

#[test]
fn a_stream_used_by_two_arenas_resets_both() {
    let (a, b) = (virtual_arena(&[]), virtual_arena(&[]));
    let s = Stream::new();
    let id = s.id();
    for arena in [&a, &b] {
        let p = arena
            .alloc_on_stream(256, &s)
            .expect("alloc")
            .expect("addr");
        arena.free(p).expect("free");
        assert!(tagged(arena, id) > 0);
    }
    assert_eq!(s.users(), 2);
    drop(s);
    assert_eq!(tagged(&a, id), 0);
    assert_eq!(tagged(&b, id), 0);
}

#[test]
fn a_stream_outliving_its_arena_is_released_without_touching_it() {
    let s = Stream::new();
    {
        let a = virtual_arena(&[]);
        a.alloc_on_stream(256, &s).expect("alloc");
    }
    assert_eq!(s.users(), 0);
    drop(s);
}

#[test]
fn many_streams_over_time_leave_the_arena_as_small_as_one() {
    let a = virtual_arena(&[]);
    let long_lived = Stream::new();
    for i in 0..20_000u64 {
        let s = Stream::new();
        let p = a
            .alloc_on_stream(256 + (i % 7) * 1024, &s)
            .expect("alloc")
            .expect("addr");
        a.free(p).expect("free");
        long_lived.wait(&s.record());
    }
    let log = a.memory_log();
    let chunks: usize = log.regions.iter().map(|r| r.chunks.len()).sum();
    assert_eq!(chunks, 1, "every request's chunk merged back");
    assert_eq!(log.stats.total_allocated, MIB, "the first region suffices");
    assert!(
        long_lived.known_streams() <= 17,
        "a stream that waited on 20,000 others keeps {} entries",
        long_lived.known_streams()
    );
}

#[test]
fn a_pool_block_freed_on_a_released_stream_is_reused_by_any_stream() {
    let pool = PoolAllocator::new(AddressSpaceAllocator::default(), &config(&[]));
    let s = Stream::new();
    let p = pool
        .alloc_on_stream(4096, &s)
        .expect("alloc")
        .expect("addr");
    pool.free(p).expect("free");
    let other = Stream::new();
    let q = pool
        .alloc_on_stream(4096, &other)
        .expect("alloc")
        .expect("addr");
    assert_ne!(q, p, "while s lives its block is its own");
    pool.free(q).expect("free");
    drop(s);
    assert_eq!(
        pool.alloc_on_stream(4096, &Stream::new()).expect("alloc"),
        Some(p)
    );
}

#[test]
fn reset_chunks_using_stream_frees_a_pools_blocks_for_others() {
    let pool = PoolAllocator::new(AddressSpaceAllocator::default(), &config(&[]));
    let s = Stream::new();
    let p = pool
        .alloc_on_stream(4096, &s)
        .expect("alloc")
        .expect("addr");
    pool.free(p).expect("free");
    pool.reset_chunks_using_stream(&s).expect("reset");
    assert_eq!(pool.alloc(4096).expect("alloc"), Some(p));
}

#[test]
fn forgetting_a_foreign_stream_resets_its_chunks() {
    let a = virtual_arena(&[]);
    let foreign = ForeignStreams::new();
    let s = foreign.get(0xabc).expect("stream");
    let id = s.id();
    let p = a.alloc_on_stream(4096, &s).expect("alloc").expect("addr");
    a.free(p).expect("free");
    drop(s);
    assert!(tagged(&a, id) > 0, "the registry still holds the stream");
    drop(foreign.forget(0xabc));
    assert_eq!(tagged(&a, id), 0);
    assert!(foreign.is_empty());
}

#[test]
fn foreign_streams_are_bounded_and_the_bound_is_a_coded_error() {
    let foreign = ForeignStreams::new();
    for h in 1..=MAX_FOREIGN_STREAMS as u64 {
        foreign.get(h).expect("within the bound");
    }
    assert_eq!(
        code(foreign.get(MAX_FOREIGN_STREAMS as u64 + 1)),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
}

/// Issue 11, item 7: a host that resets each stream handle when its work is done (the C ABI's
/// `cuda_arena_reset_stream`) can go through any number of distinct handles; the handles
/// remembered and the arena stay as they are after one.
#[test]
fn a_hundred_thousand_foreign_streams_with_resets_leave_nothing_behind() {
    let a = virtual_arena(&[]);
    let foreign = ForeignStreams::new();
    for handle in 1..=100_000u64 {
        let s = foreign.get(handle).expect("within the bound");
        let p = a.alloc_on_stream(4096, &s).expect("alloc").expect("addr");
        a.free(p).expect("free");
        drop(s);
        drop(foreign.forget(handle));
    }
    assert!(foreign.is_empty());
    let log = a.memory_log();
    let chunks: usize = log.regions.iter().map(|r| r.chunks.len()).sum();
    assert_eq!(chunks, 1, "every handle's chunk merged back");
    assert_eq!(log.stats.total_allocated, MIB, "the first region suffices");
    a.check_invariants().expect("invariants");
}

/// Issue 11, item 7: a failed allocation on a new handle takes none of the bound.
#[test]
fn a_handle_made_for_a_failed_call_can_be_taken_back() {
    let foreign = ForeignStreams::new();
    for h in 1..MAX_FOREIGN_STREAMS as u64 {
        foreign.get(h).expect("within the bound");
    }
    let (made, new) = foreign.get_or_make(u64::MAX).expect("the last place");
    assert!(new);
    assert!(foreign.forget_made(u64::MAX, &made).is_some());
    assert!(foreign.get(u64::MAX - 1).is_ok(), "the place is free again");
}
