//! Many threads on one arena: 8 threads x 100,000 random ops, then the invariants; in the
//! region mode and in the virtual-memory mode (issue 14), where frees and growth also unmap
//! and map pages.

mod common;
use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, DeviceLimits, HostAllocator,
    RawAllocator, Stream, VirtualMemory,
};
use std::sync::{Arc, Barrier};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Log-uniform in [256, 2^max_log2).
    fn size(&mut self, max_log2: u64) -> u64 {
        let log = 8 + self.next() % (max_log2 - 8);
        (1 << log) + self.next() % (1 << log)
    }
}

/// Runs `ops` random operations on `arena` from one thread; returns what is still live
/// as `(addr, requested)`.
fn worker<R: RawAllocator>(arena: &Arena<R>, seed: u64, ops: usize) -> Vec<(u64, u64)> {
    let mut rng = Rng(seed);
    let stream = Stream::new();
    let mut live: Vec<(u64, u64, bool)> = Vec::new();
    for _ in 0..ops {
        match rng.next() % 16 {
            0..=5 => {
                let size = rng.size(22);
                if let Ok(Some(p)) = arena.alloc(size) {
                    live.push((p, size, false));
                }
            }
            6..=7 => {
                let size = rng.size(20);
                if let Ok(Some(p)) = arena.alloc_on_stream(size, &stream) {
                    live.push((p, size, false));
                }
            }
            8 => {
                let size = rng.size(16);
                if let Ok(Some(p)) = arena.reserve(size) {
                    live.push((p, size, true));
                }
            }
            9..=14 if !live.is_empty() => {
                let (p, size, _) = live.swap_remove((rng.next() as usize) % live.len());
                assert_eq!(
                    arena.requested_size(p),
                    Ok(size),
                    "another thread got our memory"
                );
                arena.free(p).expect("own live pointer");
            }
            15 if rng.next().is_multiple_of(64) => {
                arena.shrink().expect("shrink");
                arena.reset_chunks_using_stream(&stream).expect("reset");
            }
            _ => {}
        }
        if live.len() > 200 {
            let (p, _, _) = live.swap_remove(0);
            arena.free(p).expect("own live pointer");
        }
    }
    live.into_iter().map(|(p, s, _)| (p, s)).collect()
}

fn run_threads<R: RawAllocator + 'static>(
    arena: Arc<Arena<R>>,
    threads: u64,
    ops: usize,
) -> Vec<(u64, u64)> {
    let barrier = Arc::new(Barrier::new(threads as usize));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (arena, barrier) = (arena.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                worker(&arena, 0x9E37_79B9_7F4A_7C15 ^ ((t + 1) * 0x1234_5679), ops)
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("worker panicked"))
        .collect()
}

/// Checks the arena the threads left, frees what they left live, shrinks, and checks that
/// nothing is held any more.
fn check_after_threads<R: RawAllocator>(arena: &Arena<R>, mut live: Vec<(u64, u64)>) {
    arena
        .check_invariants()
        .expect("consistent after the threads");
    live.sort_unstable();
    let mut in_use = 0;
    for (i, &(p, size)) in live.iter().enumerate() {
        let allocated = arena.allocated_size(p).expect("live");
        in_use += allocated;
        assert_eq!(arena.requested_size(p), Ok(size));
        if let Some(&(next, _)) = live.get(i + 1) {
            assert!(p + allocated <= next, "allocations overlap");
        }
    }
    assert_eq!(arena.stats().in_use, in_use);
    for (p, _) in live {
        arena.free(p).expect("live");
    }
    arena.shrink().expect("shrink");
    arena.check_invariants().expect("consistent");
    let s = arena.stats();
    assert_eq!((s.in_use, s.requested_in_use, s.total_allocated), (0, 0, 0));
    assert_eq!(arena.raw().raw_stats().raw_bytes_outstanding, 0);
    if let Some(vm) = arena.virtual_memory() {
        assert_eq!(
            vm.mapped_bytes(),
            0,
            "nothing mapped after freeing all and shrinking"
        );
    }
}

/// A virtual-memory arena over a 64 GiB virtual device with 64 KiB pages, shared by threads.
fn vm_arena_64_kib_pages(pairs: &[(&str, &str)]) -> Arc<Arena<AddressSpaceAllocator>> {
    let raw =
        AddressSpaceAllocator::new(DeviceLimits::with_total(64 << 30)).with_granularity(64 << 10);
    let vm: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    Arc::new(Arena::with_virtual_memory(raw, vm, config(pairs)).expect("arena"))
}

#[test]
fn eight_threads_of_100000_random_ops_leave_a_consistent_virtual_memory_arena() {
    // No headroom and a small threshold: the threads' frees and growth unmap and map pages
    // all the time.
    let arena = vm_arena_64_kib_pages(&[
        ("arena.vm_peak_headroom_percent", "0"),
        ("arena.vm_unmap_threshold_bytes", "4194304"),
    ]);
    let live = run_threads(arena.clone(), 8, 100_000);
    assert!(
        arena.stats().num_arena_shrinkages > 0,
        "pages were unmapped"
    );
    check_after_threads(&arena, live);
}

#[test]
fn eight_threads_mostly_out_of_memory_leave_a_consistent_virtual_memory_arena() {
    // A 64 MiB budget against up to 200 live allocations of up to 4 MiB a thread: most
    // allocations fail after decision 7 and a search of every other thread's part, while the
    // other threads allocate and free there.
    let arena = vm_arena_64_kib_pages(&[("arena.max_mem", "67108864")]);
    let live = run_threads(arena.clone(), 8, 30_000);
    assert!(arena.stats().total_allocated <= 64 << 20, "within max_mem");
    check_after_threads(&arena, live);
}

#[test]
fn threads_writing_their_own_allocations_in_virtual_memory_never_see_each_others_bytes() {
    let raw = HostAllocator::new(DeviceLimits::with_total(1 << 30));
    let vm: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    let arena = Arc::new(
        Arena::with_virtual_memory(
            raw,
            vm,
            config(&[
                ("arena.vm_unmap_threshold_bytes", "0"),
                ("arena.vm_reserve_bytes", "268435456"),
            ]),
        )
        .expect("arena"),
    );
    write_read_threads(&arena);
    assert_eq!(arena.stats().total_allocated, 0, "every page went back");
}

#[test]
fn eight_threads_of_100000_random_ops_leave_a_consistent_arena() {
    let arena = Arc::new(
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena"),
    );
    let mut live = run_threads(arena.clone(), 8, 100_000);
    arena
        .check_invariants()
        .expect("consistent after the threads");
    live.sort_unstable();
    let mut in_use = 0;
    for (i, &(p, size)) in live.iter().enumerate() {
        let allocated = arena.allocated_size(p).expect("live");
        in_use += allocated;
        assert_eq!(arena.requested_size(p), Ok(size));
        if let Some(&(next, _)) = live.get(i + 1) {
            assert!(p + allocated <= next, "allocations overlap");
        }
    }
    assert_eq!(arena.stats().in_use, in_use);
    for (p, _) in live {
        arena.free(p).expect("live");
    }
    arena.shrink().expect("shrink");
    arena.check_invariants().expect("consistent");
    let s = arena.stats();
    assert_eq!((s.in_use, s.requested_in_use, s.total_allocated), (0, 0, 0));
    assert_eq!(arena.raw().raw_stats().raw_bytes_outstanding, 0);
}

#[test]
fn threads_writing_their_own_allocations_never_see_each_others_bytes() {
    let arena = Arc::new(Arena::new(HostAllocator::default(), config(&[])).expect("arena"));
    write_read_threads(&arena);
}

/// 8 threads each fill their allocations with their own byte and check it on the way out.
fn write_read_threads(arena: &Arc<Arena<HostAllocator>>) {
    let handles: Vec<_> = (0..8u8)
        .map(|t| {
            let arena = arena.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(u64::from(t) + 7);
                let mut live: Vec<(u64, u64)> = Vec::new();
                for _ in 0..3_000 {
                    if live.len() < 16 && rng.next().is_multiple_of(2) {
                        let size = 1 + rng.next() % 5000;
                        let p = alloc(&*arena, size);
                        arena.fill(p, t, size).expect("own memory");
                        live.push((p, size));
                    } else if let Some((p, size)) = live.pop() {
                        let mut back = vec![0u8; size as usize];
                        arena.read(p, &mut back).expect("own memory");
                        assert!(
                            back.iter().all(|&b| b == t),
                            "thread {t} found foreign bytes"
                        );
                        arena.free(p).expect("live");
                    }
                }
                for (p, _) in live {
                    arena.free(p).expect("live");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no thread saw foreign bytes");
    }
    arena.check_invariants().expect("consistent");
    assert_eq!(arena.stats().in_use, 0);
}

#[test]
fn the_arena_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Arena<AddressSpaceAllocator>>();
    assert_send_sync::<Arena<HostAllocator>>();
    assert_send_sync::<cuda_arena_core::PlainAllocator<HostAllocator>>();
}

/// Issue 15: sixteen threads (a sub-arena each) share four streams, wait on each other's events,
/// free each other's memory through a mailbox, reset streams and shrink; at the end of every
/// round all stop, and the arena's invariants and stats must match what the threads hold.
#[test]
fn sixteen_threads_sharing_streams_and_freeing_each_others_memory_stay_exact_at_every_pause() {
    const THREADS: usize = 16;
    const ROUNDS: usize = 4;
    let arena = Arc::new(Arena::new(AddressSpaceAllocator::default(), config(&[])).expect("arena"));
    let streams: Arc<Vec<Stream>> = Arc::new((0..4).map(|_| Stream::new()).collect());
    let mailbox: Arc<std::sync::Mutex<Vec<(u64, u64)>>> = Arc::default();
    let held: Arc<std::sync::Mutex<Vec<(u64, u64)>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (arena, streams, mailbox, held, barrier) = (
                arena.clone(),
                streams.clone(),
                mailbox.clone(),
                held.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng(0xA5A5_5A5A ^ ((t as u64 + 1) * 0x9E37_79B9));
                let mut live: Vec<(u64, u64)> = Vec::new();
                for _ in 0..ROUNDS {
                    for _ in 0..4_000 {
                        let s = &streams[(rng.next() % 4) as usize];
                        match rng.next() % 20 {
                            0..=7 => {
                                let size = rng.size(20);
                                let r = if rng.next().is_multiple_of(2) {
                                    arena.alloc_on_stream(size, s)
                                } else {
                                    arena.alloc(size)
                                };
                                if let Ok(Some(p)) = r {
                                    live.push((p, size));
                                }
                            }
                            8..=12 if !live.is_empty() => {
                                let (p, size) =
                                    live.swap_remove((rng.next() as usize) % live.len());
                                assert_eq!(arena.requested_size(p), Ok(size), "ours");
                                arena.free(p).expect("live");
                            }
                            13 if !live.is_empty() => {
                                let x = live.swap_remove((rng.next() as usize) % live.len());
                                mailbox.lock().expect("lock").push(x);
                            }
                            14 => {
                                let x = mailbox.lock().expect("lock").pop();
                                if let Some((p, size)) = x {
                                    assert_eq!(arena.requested_size(p), Ok(size), "mailed");
                                    arena.free(p).expect("another thread's live pointer");
                                }
                            }
                            15 => {
                                let other = &streams[(rng.next() % 4) as usize];
                                other.wait(&s.record());
                            }
                            16 if rng.next().is_multiple_of(50) => {
                                arena.reset_chunks_using_stream(s).expect("reset");
                            }
                            17 if rng.next().is_multiple_of(200) => {
                                arena.shrink().expect("shrink");
                            }
                            _ => {}
                        }
                        if live.len() > 100 {
                            let (p, _) = live.swap_remove(0);
                            arena.free(p).expect("live");
                        }
                    }
                    held.lock().expect("lock").extend(live.iter().copied());
                    barrier.wait();
                    barrier.wait();
                }
                for (p, _) in live {
                    arena.free(p).expect("live");
                }
            })
        })
        .collect();
    for _ in 0..ROUNDS {
        barrier.wait();
        arena.check_invariants().expect("consistent at a pause");
        let mut all = std::mem::take(&mut *held.lock().expect("lock"));
        all.extend(mailbox.lock().expect("lock").iter().copied());
        let in_use: u64 = all
            .iter()
            .map(|&(p, _)| arena.allocated_size(p).expect("live"))
            .sum();
        let requested: u64 = all.iter().map(|&(_, size)| size).sum();
        let s = arena.stats();
        assert_eq!((s.in_use, s.requested_in_use), (in_use, requested));
        assert!(s.max_in_use >= s.in_use);
        barrier.wait();
    }
    for t in threads {
        t.join().expect("worker panicked");
    }
    for (p, _) in mailbox.lock().expect("lock").drain(..) {
        arena.free(p).expect("live");
    }
    arena.shrink().expect("shrink");
    arena.check_invariants().expect("consistent");
    let s = arena.stats();
    assert_eq!((s.in_use, s.total_allocated), (0, 0));
    assert_eq!(arena.raw().raw_stats().raw_bytes_outstanding, 0);
}
