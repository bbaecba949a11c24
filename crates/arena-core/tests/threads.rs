//! Issue 15: an arena shared by threads is one sub-arena per thread underneath. What a user
//! can see of that: stats over every thread's memory (MaxInUse the peak of the sum), frees
//! that go back where the memory came from, out-of-memory paths that reach every thread's
//! memory, streams reset everywhere, and no lock held across a raw allocator call.

mod common;
use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, DeviceLimits, MemoryInfo, RawAllocator, RawStats,
    Result, Stream,
};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

/// Runs `f` on a new thread (so on a sub-arena of its own while it lives) and returns its result.
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().expect("thread")
}

#[test]
fn max_in_use_is_the_peak_of_what_all_threads_hold_together() {
    let a = Arc::new(virtual_arena(&[]));
    let (w1, w2) = (Worker::new(), Worker::new());
    let a1 = a.clone();
    let p = w1.run(move || alloc(&*a1, MIB));
    let a2 = a.clone();
    let q = w2.run(move || alloc(&*a2, 2 * MIB));
    assert_eq!(a.stats().max_in_use, 3 * MIB);
    let a1 = a.clone();
    w1.run(move || a1.free(p)).expect("live");
    let a2 = a.clone();
    let r = w2.run(move || alloc(&*a2, MIB / 2));
    assert_eq!(a.stats().in_use, 2 * MIB + MIB / 2);
    assert_eq!(
        a.stats().max_in_use,
        3 * MIB,
        "2.5 MiB together is no new peak"
    );
    let a1 = a.clone();
    let s = w1.run(move || alloc(&*a1, MIB));
    assert_eq!(a.stats().max_in_use, 3 * MIB + MIB / 2);
    for x in [q, r, s] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn stats_add_up_every_threads_memory() {
    let a = Arc::new(virtual_arena(&[]));
    let barrier = Arc::new(Barrier::new(5));
    let live = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (a, barrier, live) = (a.clone(), barrier.clone(), live.clone());
            std::thread::spawn(move || {
                let p = alloc(&*a, (t + 1) * 1000);
                let r = a.reserve(4096).expect("reserve").expect("addr");
                live.lock().expect("lock").extend([p, r]);
                barrier.wait();
                // Held until the main thread has looked.
                barrier.wait();
            })
        })
        .collect();
    barrier.wait();
    let s = a.stats();
    let rounded: u64 = (1..=4u64).map(|t| (t * 1000).div_ceil(256) * 256).sum();
    assert_eq!(s.in_use, rounded + 4 * 4096);
    assert_eq!(s.requested_in_use, 10_000 + 4 * 4096);
    assert_eq!((s.num_allocs, s.num_reserves), (8, 4));
    assert_eq!(s.reserved_bytes, 4 * 4096);
    assert_eq!(s.total_allocated, a.raw().raw_stats().raw_bytes_outstanding);
    assert_eq!(s.max_alloc_size, 4096);
    a.check_invariants().expect("consistent");
    barrier.wait();
    for t in threads {
        t.join().expect("thread");
    }
    for p in live.lock().expect("lock").drain(..) {
        a.free(p).expect("live, freed from another thread");
    }
    let s = a.stats();
    assert_eq!((s.in_use, s.requested_in_use, s.reserved_bytes), (0, 0, 0));
    a.check_invariants().expect("consistent");
}

#[test]
fn a_free_from_another_thread_gives_the_memory_back_to_the_thread_it_came_from() {
    let a = Arc::new(virtual_arena(&[]));
    let (owner, other) = (Worker::new(), Worker::new());
    let a1 = a.clone();
    let (p, keep) = owner.run(move || (alloc(&*a1, 4096), alloc(&*a1, 4096)));
    let a2 = a.clone();
    let q = other.run(move || {
        a2.free(p).expect("a pointer another thread allocated");
        alloc(&*a2, 4096)
    });
    assert_ne!(
        q, p,
        "the owner holds memory in use: the other thread allocates from its own"
    );
    let a1 = a.clone();
    let again = owner.run(move || alloc(&*a1, 4096));
    assert_eq!(again, p, "the owner gets its chunk back");
    for x in [q, keep, again] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn out_of_memory_a_thread_takes_a_free_chunk_of_another_threads_memory() {
    let a = Arc::new(limited_arena(
        DeviceLimits::with_total(80 * GIB),
        &[
            ("arena.max_mem", "1048576"),
            ("arena.initial_chunk_size_bytes", "1048576"),
        ],
    ));
    let owner = Worker::new();
    let a1 = a.clone();
    let (keep, freed) = owner.run(move || {
        let keep = alloc(&*a1, 512 * KIB);
        let freed = alloc(&*a1, 256 * KIB);
        a1.free(freed).expect("live");
        (keep, freed)
    });
    let a2 = a.clone();
    let got = on_thread(move || a2.alloc(256 * KIB));
    let got = got
        .expect("the owner's free chunk is reachable")
        .expect("addr");
    assert_eq!(
        got, freed,
        "no budget to grow: the free chunk of the other sub-arena"
    );
    assert_eq!(a.stats().num_arena_extensions, 1);
    for x in [keep, got] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

/// The default mode with a budget of one page: the owner's thread holds half of it, then
/// another thread asks for the other half; each on a logical stream of its own when
/// `on_streams` (the free half is memory of no stream, which any stream may take). The
/// request must be served from the owner's page, mapping nothing more.
fn another_thread_takes_the_free_half_of_the_only_page(on_streams: bool) {
    let a = Arc::new(vm_arena(64 * MIB, 2 * MIB, &[("arena.max_mem", "2097152")]));
    let take = move |a: Arc<Arena<AddressSpaceAllocator>>| {
        if on_streams {
            a.alloc_on_stream(MIB, &Stream::new())
        } else {
            a.alloc(MIB)
        }
    };
    let (owner, other) = (Worker::new(), Worker::new());
    let a1 = a.clone();
    let keep = owner.run(move || take(a1).expect("fits").expect("an address"));
    let a2 = a.clone();
    let got = other
        .run(move || take(a2))
        .expect("the owner's free memory is reachable")
        .expect("an address");
    assert_eq!(a.stats().total_allocated, 2 * MIB, "no page more");
    for x in [keep, got] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn out_of_memory_a_thread_takes_free_memory_from_a_busy_thread_in_mapped_pages() {
    another_thread_takes_the_free_half_of_the_only_page(false);
}

#[test]
fn out_of_memory_a_logical_stream_takes_free_memory_of_no_stream_from_a_busy_thread() {
    another_thread_takes_the_free_half_of_the_only_page(true);
}

#[test]
fn out_of_memory_idle_regions_of_every_thread_go_back_and_the_allocation_retries() {
    let a = Arc::new(limited_arena(
        DeviceLimits::with_total(2 * MIB),
        &[("arena.initial_chunk_size_bytes", "1048576")],
    ));
    // Both live at once, so each thread grows a region of its own.
    let (w1, w2) = (Worker::new(), Worker::new());
    let held: Vec<(&Worker, u64)> = [&w1, &w2]
        .into_iter()
        .map(|w| {
            let a = a.clone();
            (w, w.run(move || alloc(&*a, MIB)))
        })
        .collect();
    for (w, p) in held {
        let a = a.clone();
        w.run(move || a.free(p).expect("live"));
    }
    assert_eq!(
        a.stats().total_allocated,
        2 * MIB,
        "each thread holds an idle region"
    );
    let a3 = a.clone();
    let p = on_thread(move || alloc(&*a3, 2 * MIB));
    let s = a.stats();
    assert_eq!(
        (
            s.num_arena_shrinkages,
            s.num_arena_extensions,
            s.total_allocated
        ),
        (2, 1, 2 * MIB)
    );
    a.free(p).expect("live");
    a.check_invariants().expect("consistent");
}

#[test]
fn a_stream_waited_on_lends_its_freed_chunk_to_another_thread_when_memory_is_short() {
    let a = Arc::new(limited_arena(
        DeviceLimits::with_total(80 * GIB),
        &[
            ("arena.max_mem", "1048576"),
            ("arena.initial_chunk_size_bytes", "1048576"),
        ],
    ));
    let (s, t) = (Stream::new(), Stream::new());
    let owner = Worker::new();
    let (a1, s1) = (a.clone(), s.clone());
    let (keep, freed) = owner.run(move || {
        let keep = a1
            .alloc_on_stream(512 * KIB, &s1)
            .expect("fits")
            .expect("addr");
        let freed = a1
            .alloc_on_stream(512 * KIB, &s1)
            .expect("fits")
            .expect("addr");
        a1.free(freed).expect("live");
        (keep, freed)
    });
    let (a2, t2) = (a.clone(), t.clone());
    let refused = on_thread(move || a2.alloc_on_stream(512 * KIB, &t2));
    assert_eq!(
        code(refused),
        "ERR_ARENA_OUT_OF_MEMORY",
        "t has not waited on s"
    );
    t.wait(&s.record());
    let (a2, t2) = (a.clone(), t.clone());
    let got = on_thread(move || a2.alloc_on_stream(512 * KIB, &t2))
        .expect("after the wait, s's chunk may go to t")
        .expect("addr");
    assert_eq!(got, freed);
    for x in [keep, got] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn a_released_stream_loses_its_tag_in_every_threads_memory() {
    let a = Arc::new(virtual_arena(&[]));
    let s = Stream::new();
    let workers = [Worker::new(), Worker::new(), Worker::new()];
    let mut live = Vec::new();
    for w in &workers {
        let (a, s) = (a.clone(), s.clone());
        live.push(w.run(move || {
            let p = a.alloc_on_stream(4096, &s).expect("fits").expect("addr");
            let q = a.alloc_on_stream(4096, &s).expect("fits").expect("addr");
            a.free(p).expect("live");
            q
        }));
    }
    let tagged = |a: &Arena<AddressSpaceAllocator>, id| {
        a.memory_log()
            .regions
            .iter()
            .flat_map(|r| r.chunks.iter())
            .filter(|c| c.stream == Some(id))
            .count()
    };
    let id = s.id();
    assert!(
        tagged(&a, id) >= 3,
        "three threads' chunks carry the stream"
    );
    drop(s);
    assert_eq!(tagged(&a, id), 0, "reset in every sub-arena");
    for p in live {
        a.free(p).expect("live");
    }
    a.shrink().expect("shrink");
    assert_eq!(
        a.stats().total_allocated,
        0,
        "everything merged and went back"
    );
    a.check_invariants().expect("consistent");
}

#[test]
fn a_retired_arena_fails_on_every_thread_and_holds_nothing() {
    let a = Arc::new(virtual_arena(&[]));
    let workers = [Worker::new(), Worker::new()];
    let ptrs: Vec<u64> = workers
        .iter()
        .map(|w| {
            let a = a.clone();
            w.run(move || alloc(&*a, 8192))
        })
        .collect();
    a.retire();
    assert_eq!(a.raw().raw_stats().raw_bytes_outstanding, 0);
    for (w, p) in workers.iter().zip(ptrs) {
        let a = a.clone();
        let (freed, alloced) = w.run(move || (a.free(p), a.alloc(256)));
        assert_eq!(code(freed), "ERR_ARENA_RELEASED");
        assert_eq!(code(alloced), "ERR_ARENA_RELEASED");
    }
    let a2 = a.clone();
    assert_eq!(
        code(on_thread(move || a2.alloc(256))),
        "ERR_ARENA_RELEASED",
        "a thread new to the arena too"
    );
    assert_eq!(a.stats().total_allocated, 0);
}

/// A raw allocator that, once armed, stops in `alloc` until released: the test can then look
/// at the arena from another thread while a growth is inside the raw allocator.
#[derive(Debug)]
struct Gate {
    inner: AddressSpaceAllocator,
    armed: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl RawAllocator for Gate {
    fn alloc(&self, size: u64) -> Result<u64> {
        let armed = self.armed.lock().expect("lock").take();
        if let Some((entered, release)) = armed {
            entered.send(()).expect("test waiting");
            // Bounded, so a test that fails does not hang.
            let _ = release.recv_timeout(Duration::from_secs(20));
        }
        self.inner.alloc(size)
    }
    fn free(&self, addr: u64, size: u64) -> Result<()> {
        self.inner.free(addr, size)
    }
    fn info(&self) -> MemoryInfo {
        self.inner.info()
    }
    fn raw_stats(&self) -> RawStats {
        self.inner.raw_stats()
    }
}

#[test]
fn the_raw_allocator_is_called_with_no_lock_another_thread_needs() {
    let gate = Gate {
        inner: AddressSpaceAllocator::default(),
        armed: Mutex::new(None),
    };
    let a = Arc::new(Arena::new(gate, config(&[])).expect("arena"));
    let grower = Worker::new();
    let a1 = a.clone();
    let small = grower.run(move || alloc(&*a1, 256));
    let (entered_tx, entered_rx) = channel();
    let (release_tx, release_rx) = channel();
    *a.raw().armed.lock().expect("lock") = Some((entered_tx, release_rx));
    let a1 = a.clone();
    let growing = std::thread::spawn(move || grower.run(move || alloc(&*a1, 64 * MIB)));
    entered_rx
        .recv()
        .expect("the growth reached the raw allocator");
    // While it is in there: stats (every sub-arena), a free of the grower's chunk, an
    // allocation of our own. None may wait for the raw allocator.
    let (done_tx, done_rx) = channel();
    let a2 = a.clone();
    std::thread::spawn(move || {
        let s = a2.stats();
        a2.free(small).expect("live");
        let p = alloc(&*a2, 4096);
        let _ = done_tx.send((s.in_use, p));
    });
    let done = done_rx.recv_timeout(Duration::from_secs(10));
    release_tx.send(()).expect("raw allocator waiting");
    let (in_use, p) = done.expect("stats, free and alloc went on while the raw allocator ran");
    assert_eq!(in_use, 256);
    let big = growing.join().expect("grower");
    for x in [p, big] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn many_threads_on_their_own_streams_leave_exact_stats_at_every_quiescent_point() {
    let a = Arc::new(virtual_arena(&[]));
    const THREADS: usize = 8;
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let peak_of_rounds = Arc::new(Mutex::new(Vec::<u64>::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (a, barrier, peaks) = (a.clone(), barrier.clone(), peak_of_rounds.clone());
            std::thread::spawn(move || {
                let s = Stream::new();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                let mut live: Vec<(u64, u64)> = Vec::new();
                for round in 0..5 {
                    for _ in 0..3000 {
                        xorshift(&mut x);
                        if live.len() < 200 && !x.is_multiple_of(3) {
                            let size = 1 + x % (256 * KIB);
                            let p = a.alloc_on_stream(size, &s).expect("fits").expect("addr");
                            live.push((p, size));
                        } else if !live.is_empty() {
                            let (p, size) = live.swap_remove((x as usize / 3) % live.len());
                            assert_eq!(a.requested_size(p), Ok(size), "our own memory");
                            a.free(p).expect("live");
                        }
                    }
                    // The rounds' end: each thread holds exactly `live`, then all stop.
                    let held: u64 = live
                        .iter()
                        .map(|&(p, _)| a.allocated_size(p).expect("live"))
                        .sum();
                    peaks.lock().expect("lock").push(held);
                    barrier.wait();
                    barrier.wait();
                    if round == 4 {
                        for (p, _) in live.drain(..) {
                            a.free(p).expect("live");
                        }
                    }
                }
            })
        })
        .collect();
    for _ in 0..5 {
        barrier.wait();
        a.check_invariants()
            .expect("consistent at a quiescent point");
        let s = a.stats();
        let held: u64 = peak_of_rounds.lock().expect("lock").drain(..).sum();
        assert_eq!(s.in_use, held, "InUse is what the threads hold");
        assert!(s.max_in_use >= s.in_use);
        barrier.wait();
    }
    for t in threads {
        t.join().expect("thread");
    }
    let s = a.stats();
    assert_eq!((s.in_use, s.requested_in_use), (0, 0));
    a.shrink().expect("shrink");
    assert_eq!(a.raw().raw_stats().raw_bytes_outstanding, 0);
    a.check_invariants().expect("consistent");
}

/// Found by the JS fuzzer (`__test__/fuzz-api.spec.ts`) when lookups by address went through the
/// directory: a range must lie inside one live allocation, and an empty one may sit at its very
/// end, where no region or reserve starts.
#[test]
fn an_empty_range_at_the_end_of_an_allocation_is_inside_it_from_any_thread() {
    let a = Arc::new(host_arena(&[]));
    let r = a.reserve(1000).expect("reserve").expect("addr");
    let p = alloc(&*a, 1000);
    let a2 = a.clone();
    let (w_r, w_p, past) = on_thread(move || {
        (
            a2.write(r + 1000, &[]),
            a2.fill(p + 1000, 7, 0),
            a2.write(r + 1000, &[1]),
        )
    });
    assert_eq!(w_r, Ok(()), "the end of a reserve");
    assert_eq!(w_p, Ok(()), "the end of a chunk's requested bytes");
    assert_eq!(
        code(past),
        "ERR_ARENA_UNKNOWN_POINTER",
        "one byte past the end"
    );
    a.free(r).expect("live");
    a.free(p).expect("live");
}
