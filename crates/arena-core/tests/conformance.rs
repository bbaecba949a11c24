//! One suite of `Allocator` behaviours, run against every implementation in this crate
//! (the arena in both modes, the plain allocator and the pool, over host and virtual memory).

mod common;
use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, HostAllocator, PlainAllocator,
    PoolAllocator, VirtualMemory,
};
use std::sync::Arc;

struct Subject {
    name: &'static str,
    allocator: Box<dyn Allocator>,
    /// Whether there is memory behind the addresses (host) or not (virtual).
    has_memory: bool,
    /// Whether `reserve` counts in `NumReserves` (ORT's pool serves it as a plain allocation).
    counts_reserves: bool,
}

fn subjects() -> Vec<Subject> {
    let arena = |raw| Arena::new(raw, ArenaConfig::default()).expect("arena");
    vec![
        Subject {
            name: "arena/host",
            allocator: Box::new(arena(HostAllocator::default())),
            has_memory: true,
            counts_reserves: true,
        },
        Subject {
            name: "arena, virtual memory/host",
            allocator: Box::new({
                let host = HostAllocator::default();
                let vm: Arc<dyn VirtualMemory> = Arc::new(host.vm());
                let config = ArenaConfig {
                    use_virtual_memory: true,
                    ..ArenaConfig::default()
                };
                Arena::with_virtual_memory(host, vm, config).expect("arena")
            }),
            has_memory: true,
            counts_reserves: true,
        },
        Subject {
            name: "arena/virtual",
            allocator: Box::new(
                Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default())
                    .expect("arena"),
            ),
            has_memory: false,
            counts_reserves: true,
        },
        Subject {
            name: "plain/host",
            allocator: Box::new(PlainAllocator::new(HostAllocator::default())),
            has_memory: true,
            counts_reserves: true,
        },
        Subject {
            name: "pool/host",
            allocator: Box::new(PoolAllocator::new(
                HostAllocator::default(),
                &ArenaConfig::default(),
            )),
            has_memory: true,
            counts_reserves: false,
        },
        Subject {
            name: "plain/virtual",
            allocator: Box::new(PlainAllocator::new(AddressSpaceAllocator::default())),
            has_memory: false,
            counts_reserves: true,
        },
    ]
}

#[test]
fn zero_byte_alloc_and_reserve_return_none_and_count_nothing() {
    for s in subjects() {
        let a = &*s.allocator;
        assert_eq!(a.alloc(0).expect(s.name), None, "{}", s.name);
        assert_eq!(a.reserve(0).expect(s.name), None, "{}", s.name);
        assert_eq!(a.stats().num_allocs, 0, "{}", s.name);
    }
}

#[test]
fn addresses_are_256_byte_aligned_and_distinct() {
    for s in subjects() {
        let a = &*s.allocator;
        let ps: Vec<u64> = [1, 255, 256, 257, 4095, 70000]
            .iter()
            .map(|&n| alloc(a, n))
            .collect();
        assert!(ps.iter().all(|p| p % 256 == 0), "{}", s.name);
        let mut sorted = ps.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ps.len(), "{}", s.name);
        for p in ps {
            a.free(p).expect(s.name);
        }
    }
}

#[test]
fn requested_size_is_what_was_asked_and_allocated_size_covers_it() {
    for s in subjects() {
        let a = &*s.allocator;
        let p = alloc(a, 1000);
        assert_eq!(a.requested_size(p).expect(s.name), 1000, "{}", s.name);
        assert!(a.allocated_size(p).expect(s.name) >= 1000, "{}", s.name);
        a.free(p).expect(s.name);
        assert_eq!(
            code(a.requested_size(p)),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}",
            s.name
        );
    }
}

#[test]
fn freeing_everything_brings_in_use_back_to_zero() {
    for s in subjects() {
        let a = &*s.allocator;
        let ps: Vec<u64> = (1..50).map(|i| alloc(a, i * 777)).collect();
        let r = a.reserve(12345).expect(s.name).expect(s.name);
        assert!(a.stats().in_use > 0);
        assert_eq!(a.stats().num_allocs, 50, "{}", s.name);
        assert_eq!(
            a.stats().num_reserves,
            u64::from(s.counts_reserves),
            "{}",
            s.name
        );
        for p in ps.into_iter().chain([r]) {
            a.free(p).expect(s.name);
        }
        let st = a.stats();
        assert_eq!(
            (st.in_use, st.requested_in_use, st.reserved_bytes),
            (0, 0, 0),
            "{}",
            s.name
        );
    }
}

#[test]
fn free_of_unknown_interior_or_freed_addresses_is_unknown_pointer() {
    for s in subjects() {
        let a = &*s.allocator;
        let p = alloc(a, 512);
        for bad in [p + 1, p + 256, 0x1234_5600] {
            assert_eq!(
                code(a.free(bad)),
                "ERR_ARENA_UNKNOWN_POINTER",
                "{} {bad:#x}",
                s.name
            );
        }
        a.free(p).expect(s.name);
        assert_eq!(code(a.free(p)), "ERR_ARENA_UNKNOWN_POINTER", "{}", s.name);
        a.free(0).expect(s.name);
    }
}

#[test]
fn written_bytes_read_back_identically() {
    for s in subjects().into_iter().filter(|s| s.has_memory) {
        let a = &*s.allocator;
        let p = alloc(a, 3000);
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 31 % 251) as u8).collect();
        a.write(p, &data).expect(s.name);
        let mut back = vec![0u8; 3000];
        a.read(p, &mut back).expect(s.name);
        assert_eq!(back, data, "{}", s.name);
        a.fill(p + 100, 0xAB, 50).expect(s.name);
        let mut mid = [0u8; 52];
        a.read(p + 99, &mut mid).expect(s.name);
        assert_eq!(mid[0], data[99]);
        assert!(mid[1..51].iter().all(|&b| b == 0xAB), "{}", s.name);
        assert_eq!(mid[51], data[150]);
        a.free(p).expect(s.name);
    }
}

#[test]
fn ranges_outside_one_live_allocation_cannot_be_touched() {
    for s in subjects().into_iter().filter(|s| s.has_memory) {
        let a = &*s.allocator;
        let p = alloc(a, 1000);
        let q = alloc(a, 1000);
        let mut buf = [0u8; 8];
        // Past the requested size, even though the chunk is 1024 bytes.
        assert_eq!(
            code(a.write(p + 996, &buf)),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.read(p + 1000, &mut buf[..1])),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.fill(p, 0, 1001)),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.fill(p, 0, u64::MAX)),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.write(0x10, &buf)),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}",
            s.name
        );
        a.free(p).expect(s.name);
        assert_eq!(
            code(a.read(p, &mut buf)),
            "ERR_ARENA_UNKNOWN_POINTER",
            "freed: {}",
            s.name
        );
        a.write(q + 992, &buf).expect("the last 8 bytes are inside");
        a.free(q).expect(s.name);
    }
}

/// A copy finds the allocation holding its range from the live map, stepping down from the
/// address a 256-byte granule at a time, and walks the chunks only past 16 KiB: either way the
/// same allocations are found and the same bytes refused.
#[test]
fn a_range_is_found_at_any_offset_of_an_allocation_among_thousands_and_never_in_free_memory() {
    for s in subjects().into_iter().filter(|s| s.has_memory) {
        let a = &*s.allocator;
        let small: Vec<u64> = (0..2000).map(|_| alloc(a, 300)).collect();
        let big = alloc(a, 3 << 20);
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 253) as u8).collect();
        for off in [
            0,
            256,
            8 << 10,
            16 << 10,
            16 << 10 | 256,
            1 << 20,
            (3 << 20) - 4096,
        ] {
            a.write(big + off, &data).expect(s.name);
            let mut back = vec![0u8; 4096];
            a.read(big + off, &mut back).expect(s.name);
            assert_eq!(back, data, "{} at +{off}", s.name);
        }
        a.write(big + (3 << 20), &[])
            .expect("an empty range at the end");
        assert_eq!(
            code(a.write(big + (3 << 20) - 1, &[1, 2])),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}: one byte past the end",
            s.name
        );
        // A freed chunk between two live ones: its bytes are refused at and past its start.
        let (lo, gap, hi) = (small[10], small[11], small[12]);
        a.free(gap).expect(s.name);
        for at in [gap, gap + 100, gap + 256] {
            assert_eq!(
                code(a.write(at, &[1])),
                "ERR_ARENA_UNKNOWN_POINTER",
                "{}: freed {gap:#x} + {}",
                s.name,
                at - gap
            );
        }
        a.write(lo + 299, &[1])
            .expect("the last byte of the one below");
        a.write(hi, &[1]).expect("the first byte of the one above");
        for p in small.into_iter().filter(|&p| p != gap) {
            a.free(p).expect(s.name);
        }
        a.free(big).expect(s.name);
    }
}

/// `[end, end)` lies inside an allocation ending at `end`, whether the bytes after it are
/// another live allocation, free memory or none of the allocator's (it was refused when free
/// memory followed in the same region).
#[test]
fn an_empty_range_at_the_very_end_of_an_allocation_is_inside_it_whatever_follows() {
    for s in subjects().into_iter().filter(|s| s.has_memory) {
        let a = &*s.allocator;
        let p = alloc(a, 1024);
        let q = alloc(a, 1024);
        a.write(p + 1024, &[]).expect(s.name);
        a.free(q).expect(s.name);
        a.write(p + 1024, &[]).expect(s.name);
        a.read(p + 1024, &mut []).expect(s.name);
        a.fill(p + 1024, 0, 0).expect(s.name);
        assert_eq!(
            code(a.write(p + 1024, &[0])),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}: a byte past the end",
            s.name
        );
        assert_eq!(
            code(a.write(q + 256, &[])),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}: an empty range inside freed memory",
            s.name
        );
        a.free(p).expect(s.name);
        assert_eq!(
            code(a.write(p + 1024, &[])),
            "ERR_ARENA_UNKNOWN_POINTER",
            "{}: the end of a freed allocation",
            s.name
        );
    }
}

/// A copy succeeds exactly where its range lies within the requested bytes of one live
/// allocation, as a list of the live allocations decides: at random offsets (deep inside, at
/// the ends, just outside) of random allocations, live and freed, small and up to 2 MiB.
#[test]
fn a_copy_succeeds_exactly_where_its_range_lies_in_one_live_allocation() {
    for s in subjects().into_iter().filter(|s| s.has_memory) {
        let a = &*s.allocator;
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |n: u64| xorshift(&mut x) % n.max(1);
        // (address, requested bytes) of the live allocations and of the freed ones.
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut dead: Vec<(u64, u64)> = Vec::new();
        let buf = [0x5Au8; 64];
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..4000 {
            match next(8) {
                0..=2 => {
                    // Some a whole number of granules, so that the next chunk starts at the end.
                    let n = match next(8) {
                        0 => (16 << 10) + next(2 << 20),
                        1 | 2 => 256 * (1 + next(12)),
                        _ => 1 + next(3000),
                    };
                    live.push((alloc(a, n), n));
                }
                3 if !live.is_empty() => {
                    let (p, n) = live.swap_remove(next(live.len() as u64) as usize);
                    a.free(p).expect(s.name);
                    dead.push((p, n));
                }
                _ => {
                    let pool = if next(4) == 0 && !dead.is_empty() {
                        &dead
                    } else {
                        &live
                    };
                    let Some(&(p, n)) = pool.get(next(pool.len() as u64) as usize) else {
                        continue;
                    };
                    let len = if next(4) == 0 { 0 } else { 1 + next(64) };
                    let addr = match next(4) {
                        0 => p,
                        1 => (p + n).saturating_sub(len),
                        2 => p + n + next(2) - next(2),
                        _ => (p + next(n + 1024)).saturating_sub(512),
                    };
                    let inside = live.iter().any(|&(q, m)| addr >= q && addr + len <= q + m);
                    let got = a.write(addr, &buf[..len as usize]);
                    assert_eq!(
                        got.is_ok(),
                        inside,
                        "{}: [{addr:#x}, +{len}) around {p:#x} + {n}",
                        s.name
                    );
                    if inside {
                        accepted += 1;
                    } else {
                        assert_eq!(code(got), "ERR_ARENA_UNKNOWN_POINTER", "{}", s.name);
                        refused += 1;
                    }
                }
            }
        }
        assert!(
            accepted > 500 && refused > 300,
            "{}: {accepted} / {refused}",
            s.name
        );
        for (p, _) in live {
            a.free(p).expect(s.name);
        }
    }
}

#[test]
fn virtual_memory_cannot_be_read_or_written() {
    for s in subjects().into_iter().filter(|s| !s.has_memory) {
        let a = &*s.allocator;
        let p = alloc(a, 64);
        assert_eq!(
            code(a.write(p, &[1])),
            "ERR_ARENA_INVALID_ARGUMENT",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.read(p, &mut [0])),
            "ERR_ARENA_INVALID_ARGUMENT",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.fill(p, 1, 1)),
            "ERR_ARENA_INVALID_ARGUMENT",
            "{}",
            s.name
        );
        a.free(p).expect(s.name);
    }
}

#[test]
fn memory_log_stats_match_stats() {
    for s in subjects() {
        let a = &*s.allocator;
        let p = alloc(a, 10_000);
        assert_eq!(a.memory_log().stats, a.stats(), "{}", s.name);
        a.free(p).expect(s.name);
    }
}

#[test]
fn a_refused_allocation_changes_nothing() {
    for s in subjects() {
        let a = &*s.allocator;
        let p = alloc(a, 4096);
        let before = a.memory_log();
        assert_eq!(
            code(a.alloc(u64::MAX - 10)),
            "ERR_ARENA_OUT_OF_MEMORY",
            "{}",
            s.name
        );
        assert_eq!(
            code(a.reserve(u64::MAX - 10)),
            "ERR_ARENA_OUT_OF_MEMORY",
            "{}",
            s.name
        );
        assert_eq!(a.memory_log(), before, "{}", s.name);
        a.free(p).expect(s.name);
    }
}
