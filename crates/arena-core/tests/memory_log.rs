//! The memory log: a faithful structured picture of regions, chunks, reserves and bins.

mod common;
use common::*;
use cuda_arena_core::{Allocator, Stream};

#[test]
fn regions_are_tiled_by_their_chunks_in_address_order() {
    let a = virtual_arena(&[]);
    let p = alloc(&a, 1000);
    let q = alloc(&a, 5000);
    let log = a.memory_log();
    assert_eq!(log.regions.len(), 1);
    let r = &log.regions[0];
    assert_eq!(r.size, MIB);
    let mut at = r.base;
    for c in &r.chunks {
        assert_eq!(c.addr, at);
        at += c.size;
    }
    assert_eq!(at, r.base + r.size);
    let live: Vec<(u64, u64, u64)> = log.live_chunks();
    assert_eq!(live, vec![(p, 1024, 1000), (q, 5120, 5000)]);
    assert!(r
        .chunks
        .last()
        .is_some_and(|c| !c.in_use && c.requested_size == 0));
}

#[test]
fn chunks_show_their_stream_and_allocation_order() {
    let a = virtual_arena(&[]);
    let s = Stream::new();
    let p = alloc(&a, 256);
    let q = a.alloc_on_stream(256, &s).expect("fits").expect("non-zero");
    let log = a.memory_log();
    let chunk = |addr| {
        log.regions[0]
            .chunks
            .iter()
            .find(|c| c.addr == addr)
            .cloned()
            .expect("chunk")
    };
    assert_eq!(chunk(p).stream, None);
    assert_eq!(chunk(q).stream, Some(s.id()));
    assert!(chunk(p).alloc_id < chunk(q).alloc_id);
}

#[test]
fn reserves_are_listed_apart_from_regions() {
    let a = virtual_arena(&[]);
    let r = a.reserve(3000).expect("fits").expect("non-zero");
    let log = a.memory_log();
    assert!(log.regions.is_empty());
    assert_eq!(log.reserves.len(), 1);
    assert_eq!((log.reserves[0].addr, log.reserves[0].size), (r, 3000));
    assert_eq!(a.allocated_size(r), Ok(3000));
    assert_eq!(a.requested_size(r), Ok(3000));
}

#[test]
fn the_bin_summary_adds_up_to_the_chunks() {
    let a = virtual_arena(&[]);
    let ps: Vec<u64> = [300, 700, 5000, 70_000]
        .iter()
        .map(|&n| alloc(&a, n))
        .collect();
    a.free(ps[1]).expect("live");
    let log = a.memory_log();
    let chunks: Vec<_> = log.regions.iter().flat_map(|r| r.chunks.iter()).collect();
    let total: u64 = log.bins.iter().map(|b| b.chunks).sum();
    assert_eq!(total, chunks.len() as u64);
    let in_use_bytes: u64 = log.bins.iter().map(|b| b.in_use_bytes).sum();
    assert_eq!(in_use_bytes, a.stats().in_use);
    let requested: u64 = log.bins.iter().map(|b| b.requested_bytes).sum();
    assert_eq!(requested, 300 + 5000 + 70_000);
    assert!(log.bins.windows(2).all(|w| w[0].bin_size < w[1].bin_size));
}

/// Every chunk start of `a`'s memory log: the arena's run from it is the log's.
fn assert_runs_are_the_logs(a: &dyn Allocator, when: &str) {
    let log = a.memory_log();
    let mut starts = 0;
    for c in log.regions.iter().flat_map(|r| &r.chunks) {
        assert_eq!(
            a.chunks_from(c.addr),
            log.chunks_from(c.addr),
            "the run from {:#x} {when}",
            c.addr
        );
        starts += 1;
        if c.size > 256 {
            assert_eq!(a.chunks_from(c.addr + 256), None, "inside a chunk {when}");
        }
    }
    assert!(starts > 0, "the log has chunks {when}");
}

#[test]
fn an_arenas_run_of_chunks_from_an_address_is_its_memory_logs_in_every_mode() {
    let streams: Vec<Stream> = (0..3).map(|_| Stream::new()).collect();
    let region = virtual_arena(&[("arena.extend_strategy", "1")]);
    let paged = virtual_vm_arena(&[("arena.vm_unmap_threshold_bytes", "0")]);
    for (mode, a) in [("regions", &region), ("pages", &paged)] {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut live = Vec::new();
        for op in 0..2000 {
            if live.is_empty() || next(5) < 3 {
                let size = 256 + next(4 * MIB);
                let stream = next(4) as usize;
                let addr = match streams.get(stream) {
                    Some(s) => a.alloc_on_stream(size, s),
                    None => a.alloc(size),
                };
                live.push(addr.expect("fits").expect("non-zero"));
            } else {
                let at = next(live.len() as u64) as usize;
                a.free(live.swap_remove(at)).expect("frees");
            }
            if op % 50 == 0 {
                assert_runs_are_the_logs(a, &format!("in {mode} after op {op}"));
            }
        }
        assert_eq!(a.chunks_from(1), None, "no chunk starts at 1 ({mode})");
        assert_eq!(a.chunks_from(u64::MAX), None, "nor at the top ({mode})");
        let r = a.reserve(3000).expect("fits").expect("non-zero");
        assert_eq!(a.chunks_from(r), None, "a reserve is no chunk ({mode})");
        assert_eq!(a.memory_log().chunks_from(r), None);
        let first = live[0];
        a.retire();
        assert_eq!(
            a.chunks_from(first),
            None,
            "a retired arena has no chunks ({mode})"
        );
    }
}
