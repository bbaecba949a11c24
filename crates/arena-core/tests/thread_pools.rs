//! Issue 25: memory held by an arena that long-lived threads use the way real clients do. A
//! pool's threads take turns on one working set (onnxruntime-node's libuv workers, a server's
//! request threads), and PyTorch's autograd thread frees what the main thread allocated and
//! allocates what the main thread frees. The arena must hold about the live set, not the live
//! set once per thread that ever allocated. (A benchmark where each thread replays its own
//! copy of a trace cannot see this: there every thread's memory is live at once.)

mod common;
use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ForeignStreams, SimEvents, Stream, StreamEvents,
};
use std::sync::Arc;

fn live_bytes(sizes: &[u64]) -> u64 {
    sizes.iter().sum()
}

/// The two compositions: regions (ORT's arena) and mapped pages (virtual-memory mode).
#[derive(Debug, Clone, Copy)]
enum Mode {
    Regions,
    Pages,
}

fn arena(mode: Mode) -> Arena<AddressSpaceAllocator> {
    match mode {
        Mode::Regions => virtual_arena(&[]),
        Mode::Pages => virtual_vm_arena(&[]),
    }
}

/// Held ÷ the live set after `threads` pool threads each took `rounds` turns, one at a time.
fn held_after_turns(mode: Mode, threads: usize, rounds: usize) -> f64 {
    let a = Arc::new(arena(mode));
    let sizes = Arc::new(pool_working_set());
    let pool: Vec<Worker> = (0..threads).map(|_| Worker::new()).collect();
    for _ in 0..rounds {
        for w in &pool {
            let (a, sizes) = (a.clone(), sizes.clone());
            w.run(move || pool_turn(&*a, &sizes));
        }
    }
    a.check_invariants().expect("consistent");
    a.stats().total_allocated as f64 / live_bytes(&sizes) as f64
}

fn pool_threads_taking_turns_hold_about_the_live_set(mode: Mode, threads: usize, rounds: usize) {
    let one = held_after_turns(mode, 1, rounds);
    let many = held_after_turns(mode, threads, rounds);
    eprintln!("{mode:?}: held/live {many:.3} with {threads} threads, {one:.3} with one");
    assert!(
        many <= 1.10 * one.max(1.0),
        "{mode:?}: held/live {many:.2} with {threads} threads, {one:.2} with one"
    );
}

#[test]
fn four_pool_threads_taking_turns_hold_about_the_live_set() {
    pool_threads_taking_turns_hold_about_the_live_set(Mode::Regions, 4, 3);
}

#[test]
fn sixteen_pool_threads_taking_turns_hold_about_the_live_set() {
    pool_threads_taking_turns_hold_about_the_live_set(Mode::Regions, 16, 2);
}

#[test]
fn four_pool_threads_taking_turns_hold_about_the_live_set_in_mapped_pages() {
    pool_threads_taking_turns_hold_about_the_live_set(Mode::Pages, 4, 3);
}

#[test]
fn sixteen_pool_threads_taking_turns_hold_about_the_live_set_in_mapped_pages() {
    pool_threads_taking_turns_hold_about_the_live_set(Mode::Pages, 16, 2);
}

/// The stream each pool thread allocates on.
#[derive(Debug, Clone, Copy)]
enum PoolStream {
    /// A stream the host owns (the C ABI's `CUstream`, PyTorch's), with events.
    Host,
    /// cuda-arena's own stream with events (the Node binding's `createStream` on `cuda`).
    Own,
}

/// [`held_after_turns`] in the default arena with each pool thread on a stream of its own,
/// whose events complete at once (nothing runs on `virtual`). Each turn's frees are the
/// stream's last until its thread's next turn: no call of the host covers them with an event.
fn held_after_turns_on_streams(kind: PoolStream, threads: usize, rounds: usize) -> f64 {
    let a = Arc::new(arena(Mode::Pages));
    let events: Arc<dyn StreamEvents> = SimEvents::immediate();
    let host = ForeignStreams::with_events(Some(events.clone()));
    let sizes = Arc::new(pool_working_set());
    let pool: Vec<(Worker, Stream)> = (0..threads)
        .map(|i| {
            let native = 0x10_0000 + i as u64;
            let s = match kind {
                PoolStream::Host => host.get(native).expect("a stream"),
                PoolStream::Own => Stream::with_events(native, events.clone()),
            };
            (Worker::new(), s)
        })
        .collect();
    for _ in 0..rounds {
        for (w, s) in &pool {
            let (a, s, sizes) = (a.clone(), s.clone(), sizes.clone());
            w.run(move || {
                let addrs: Vec<u64> = sizes.iter().map(|&n| on(&*a, &s, n)).collect();
                for x in addrs {
                    a.free(x).expect("live");
                }
            });
        }
    }
    a.check_invariants().expect("consistent");
    a.stats().total_allocated as f64 / live_bytes(&sizes) as f64
}

fn pool_threads_on_their_own_streams_hold_about_the_live_set(kind: PoolStream, threads: usize) {
    let one = held_after_turns_on_streams(kind, 1, 2);
    let many = held_after_turns_on_streams(kind, threads, 2);
    eprintln!("{kind:?} streams: held/live {many:.3} with {threads} threads, {one:.3} with one");
    assert!(
        many <= 1.10 * one.max(1.0),
        "{kind:?} streams: held/live {many:.2} with {threads} threads, {one:.2} with one"
    );
}

#[test]
fn four_pool_threads_each_on_a_host_stream_taking_turns_hold_about_the_live_set() {
    pool_threads_on_their_own_streams_hold_about_the_live_set(PoolStream::Host, 4);
}

#[test]
fn sixteen_pool_threads_each_on_a_host_stream_taking_turns_hold_about_the_live_set() {
    pool_threads_on_their_own_streams_hold_about_the_live_set(PoolStream::Host, 16);
}

#[test]
fn four_pool_threads_each_on_an_own_stream_taking_turns_hold_about_the_live_set() {
    pool_threads_on_their_own_streams_hold_about_the_live_set(PoolStream::Own, 4);
}

#[test]
fn sixteen_pool_threads_each_on_an_own_stream_taking_turns_hold_about_the_live_set() {
    pool_threads_on_their_own_streams_hold_about_the_live_set(PoolStream::Own, 16);
}

/// PyTorch's training step, `steps` times (the main thread allocates activations; the autograd
/// thread allocates gradients and frees the activations; the main thread frees the gradients),
/// with the main thread's and the autograd thread's
/// work run by `main` and `autograd` in turn: every address handed out, in order (as offsets), and the
/// arena's held bytes and extensions at the end.
fn training_steps(
    mode: Mode,
    main: &Worker,
    autograd: &Worker,
    steps: usize,
) -> (Vec<u64>, u64, u64) {
    let a = Arc::new(arena(mode));
    let sizes = Arc::new(pool_working_set());
    let mut seen = Vec::new();
    for _ in 0..steps {
        let (a1, s1) = (a.clone(), sizes.clone());
        let activations: Vec<u64> = main.run(move || s1.iter().map(|&s| alloc(&*a1, s)).collect());
        seen.extend(&activations);
        let (a2, s2) = (a.clone(), sizes.clone());
        let grads: Vec<u64> = autograd.run(move || {
            let grads = s2.iter().map(|&s| alloc(&*a2, s)).collect();
            for x in activations {
                a2.free(x).expect("live");
            }
            grads
        });
        seen.extend(&grads);
        let a3 = a.clone();
        main.run(move || {
            for x in grads {
                a3.free(x).expect("live");
            }
        });
    }
    a.check_invariants().expect("consistent");
    let s = a.stats();
    // Each arena has an address space of its own: its addresses as offsets from its first.
    let first = seen.first().copied().unwrap_or(0);
    let offsets = seen.iter().map(|x| x.wrapping_sub(first)).collect();
    (offsets, s.total_allocated, s.num_arena_extensions)
}

/// Threads that never allocate at once share one sub-arena: PyTorch's main thread and its
/// autograd thread get every address, and hold every byte, that one thread doing both parts
/// would (on an H100, GPT-2 training held 13946 MiB on two sub-arenas where one held 13864).
fn threads_taking_turns_are_one_arena(mode: Mode) {
    let one = Worker::shared();
    let alone = training_steps(mode, &one, &one, 4);
    let (main, autograd) = (Worker::shared(), Worker::shared());
    let two = training_steps(mode, &main, &autograd, 4);
    let first = alone.0.iter().zip(&two.0).position(|(x, y)| x != y);
    assert!(
        two == alone,
        "{mode:?}: two threads taking turns differ from one (first address at {first:?} of {}; held {} / {}, extensions {} / {})",
        alone.0.len(), two.1, alone.1, two.2, alone.2
    );
}

#[test]
fn threads_taking_turns_get_the_addresses_and_hold_the_bytes_of_one_thread() {
    threads_taking_turns_are_one_arena(Mode::Regions);
}

#[test]
fn threads_taking_turns_get_the_addresses_and_hold_the_bytes_of_one_thread_in_mapped_pages() {
    threads_taking_turns_are_one_arena(Mode::Pages);
}

#[test]
fn sixteen_shared_pool_threads_taking_turns_hold_what_one_thread_holds() {
    let held = |threads: usize| {
        let a = Arc::new(arena(Mode::Pages));
        let sizes = Arc::new(pool_working_set());
        let pool: Vec<Worker> = (0..threads).map(|_| Worker::shared()).collect();
        for _ in 0..2 {
            for w in &pool {
                let (a, sizes) = (a.clone(), sizes.clone());
                w.run(move || pool_turn(&*a, &sizes));
            }
        }
        a.check_invariants().expect("consistent");
        a.stats().total_allocated
    };
    assert_eq!(held(16), held(1));
}

#[test]
fn a_thread_that_frees_what_another_allocated_and_allocates_alike_holds_about_the_live_set() {
    allocate_on_one_free_on_another(Mode::Regions);
}

#[test]
fn a_thread_that_frees_what_another_allocated_and_allocates_alike_holds_about_the_live_set_in_mapped_pages(
) {
    allocate_on_one_free_on_another(Mode::Pages);
}

fn allocate_on_one_free_on_another(mode: Mode) {
    // PyTorch's training step on threads with sub-arenas of their own (as threads that met in
    // the shared one): held before region moves too (each thread keeps memory in use, so none
    // moves). Threads that never meet share one sub-arena and hold exactly one thread's bytes
    // (`threads_taking_turns_are_one_arena`). Both threads live for the whole run.
    let sizes = pool_working_set();
    let (main, autograd) = (Worker::new(), Worker::new());
    let held = training_steps(mode, &main, &autograd, 4).1 as f64;
    // At most the activations and the gradients are live at once.
    let peak_live = 2.0 * live_bytes(&sizes) as f64;
    let single = {
        let b = arena(mode);
        for _ in 0..4 {
            let act: Vec<u64> = sizes.iter().map(|&s| alloc(&b, s)).collect();
            let grads: Vec<u64> = sizes.iter().map(|&s| alloc(&b, s)).collect();
            for x in act.into_iter().chain(grads) {
                b.free(x).expect("live");
            }
        }
        b.stats().total_allocated as f64
    };
    eprintln!(
        "{mode:?}: held {:.3}x the peak live set on two threads, {:.3}x on one",
        held / peak_live,
        single / peak_live
    );
    assert!(
        held <= 1.10 * single,
        "{mode:?}: held {:.2}x the peak live set on two threads, {:.2}x on one",
        held / peak_live,
        single / peak_live
    );
}

#[test]
fn a_region_that_moves_to_another_thread_keeps_its_host_streams_rule() {
    use cuda_arena_core::{ForeignStreams, SimEvents, StreamEvents};
    let sim = SimEvents::new();
    let events: Arc<dyn StreamEvents> = sim.clone();
    let f = Arc::new(ForeignStreams::with_events(Some(events)));
    // Each region exactly its request: the freed chunk is the only place one of its size fits.
    let a = Arc::new(virtual_arena(&[("arena.extend_strategy", "1")]));
    let (first, second) = (Worker::new(), Worker::new());
    let (a1, f1) = (a.clone(), f.clone());
    let p = first.run(move || {
        let s = f1.get(0x5000).expect("stream");
        let p = a1.alloc_on_stream(4096, &s).expect("ok").expect("addr");
        a1.free(p).expect("live");
        p
    });
    // The first thread holds nothing in use: its region may move to the second thread, whose
    // stream may take the chunk only once stream 0x5000's work up to the free is done.
    let (a2, f2) = (a.clone(), f.clone());
    let q = second.run(move || {
        let t = f2.get(0x7000).expect("stream");
        a2.alloc_on_stream(4096, &t).expect("ok").expect("addr")
    });
    assert_ne!(q, p, "stream 0x5000's work may still use the chunk");
    sim.finish(0x5000);
    let (a2, f2) = (a.clone(), f.clone());
    let r = second.run(move || {
        let t = f2.get(0x7000).expect("stream");
        a2.alloc_on_stream(4096, &t).expect("ok").expect("addr")
    });
    assert_eq!(r, p, "its work is done: the chunk serves the other stream");
    for x in [q, r] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}

#[test]
fn threads_that_overlap_and_pass_regions_around_keep_every_promise() {
    threads_that_overlap_keep_every_promise(Mode::Regions);
}

#[test]
fn threads_that_overlap_and_pass_mapped_memory_around_keep_every_promise() {
    threads_that_overlap_keep_every_promise(Mode::Pages);
}

fn threads_that_overlap_keep_every_promise(mode: Mode) {
    // Eight threads, each going idle and busy again many times, half on streams of their own:
    // regions move to whoever misses while their threads are idle and go home when needed.
    // Every chunk stays where the directory says, the stats add up, and nothing is lost.
    use cuda_arena_core::Stream;
    let a = Arc::new(arena(mode));
    let sizes = Arc::new(pool_working_set());
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let (a, sizes) = (a.clone(), sizes.clone());
            std::thread::spawn(move || {
                let stream = (t % 2 == 1).then(Stream::new);
                for round in 0..40u64 {
                    let n = 20 + ((t * 7 + round * 13) % 60) as usize;
                    let addrs: Vec<u64> = sizes
                        .iter()
                        .take(n)
                        .map(|&s| match &stream {
                            Some(st) => a.alloc_on_stream(s, st).expect("ok").expect("addr"),
                            None => alloc(&*a, s),
                        })
                        .collect();
                    for x in addrs {
                        a.free(x).expect("live");
                    }
                    if round % 8 == t % 8 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    a.check_invariants().expect("consistent");
    assert_eq!(a.stats().in_use, 0);
}

/// How a session's run ends for the allocator.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RunEnd {
    /// The host resets the session's stream (ORT's `OnSessionRunEnd` on its own arena).
    Reset,
    /// The host only synchronizes its stream and says nothing: ONNX Runtime through the
    /// `OrtAllocator` view, whose streams it may destroy without a word (events are recorded on
    /// them only in their own allocations).
    Synchronized,
}

/// K sessions at once on a pool of K long-lived threads (onnxruntime-node: each session on a
/// CUDA stream of its own, each `run` on whichever libuv worker is free): every round, session
/// `s` runs a request on thread `(s + round) % K`, with a batch drawn from a seeded generator
/// scaling the working set 1-16x; the K requests overlap (each allocates while the others hold
/// theirs), then free, and each run ends as `end` says. Returns peak held ÷ MaxInUse and the
/// device-wide waits. The pool's threads each have a sub-arena of their own (as threads that
/// met in the shared one), or share it (`shared`: threads that never allocate at once).
fn k_sessions_on(mode: Mode, end: RunEnd, k: usize, rounds: usize, shared: bool) -> (f64, u64) {
    let a = Arc::new(arena(mode));
    let sim = SimEvents::new();
    let events: Arc<dyn StreamEvents> = sim.clone();
    let hosted = ForeignStreams::with_events(Some(events));
    let pool: Vec<Worker> = (0..k)
        .map(|_| {
            if shared {
                Worker::shared()
            } else {
                Worker::new()
            }
        })
        .collect();
    let sessions: Vec<Arc<Stream>> = (0..k)
        .map(|s| match end {
            RunEnd::Reset => Arc::new(Stream::new()),
            RunEnd::Synchronized => {
                let st = hosted.get(0x1000 * (s as u64 + 1)).expect("a host stream");
                st.free_events().expect("events").set_host_may_destroy();
                Arc::new(st)
            }
        })
        .collect();
    let base = pool_working_set();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut peak_held = 0;
    for round in 0..rounds {
        let mut live = Vec::new();
        for (s, stream) in sessions.iter().enumerate() {
            let batch = 1 + xorshift(&mut x) % 16;
            let sizes: Vec<u64> = base.iter().take(60).map(|&b| b * batch).collect();
            let (a2, st) = (a.clone(), stream.clone());
            let addrs = pool[(s + round) % k].run(move || {
                sizes
                    .iter()
                    .map(|&n| {
                        // As the OrtAllocator view does at each AllocOnStream.
                        if let Some(e) = st.free_events() {
                            e.cover_in_use();
                        }
                        a2.alloc_on_stream(n, &st).expect("fits").expect("non-zero")
                    })
                    .collect::<Vec<u64>>()
            });
            peak_held = peak_held.max(a.stats().total_allocated);
            live.push((s, addrs));
        }
        for (s, addrs) in live {
            let (a2, st) = (a.clone(), sessions[s].clone());
            pool[(s + round) % k].run(move || {
                for p in addrs {
                    a2.free(p).expect("live");
                }
                if end == RunEnd::Reset {
                    a2.reset_chunks_using_stream(&st).expect("run end");
                }
            });
            if let Some(e) = sessions[s].free_events() {
                // The run ends with the host synchronizing the session's stream.
                sim.finish(e.native());
            }
        }
    }
    a.check_invariants().expect("consistent");
    (
        peak_held as f64 / a.stats().max_in_use as f64,
        sim.device_syncs(),
    )
}

fn k_sessions(mode: Mode, end: RunEnd, k: usize, rounds: usize) -> (f64, u64) {
    k_sessions_on(mode, end, k, rounds, false)
}

fn k_sessions_held_over_max_in_use(mode: Mode, end: RunEnd, k: usize, rounds: usize) -> f64 {
    k_sessions(mode, end, k, rounds).0
}

#[test]
fn k_sessions_on_k_streams_over_a_thread_pool_hold_within_the_churn_ceiling_in_mapped_pages() {
    for k in [1, 4, 8] {
        let pages = k_sessions_held_over_max_in_use(Mode::Pages, RunEnd::Reset, k, 12);
        let regions = k_sessions_held_over_max_in_use(Mode::Regions, RunEnd::Reset, k, 12);
        eprintln!("K = {k}: peak held / MaxInUse {pages:.3} (regions {regions:.3})");
        // Measured 1.016 / 1.229 / 1.205 (regions 1.431 / 1.314 / 1.819): within the 30 %
        // churn ceiling over the peak in use, and under the region arena.
        assert!(pages <= 1.30, "K = {k}: {pages:.3}");
        assert!(
            pages <= regions,
            "K = {k}: {pages:.3} against regions' {regions:.3}"
        );
    }
}

/// Issue 25's ONNX Runtime bar, deterministic: sessions whose streams are never reset (the
/// `OrtAllocator` view) leave their last frees covered by no event; past the headroom the
/// device is waited for once and that memory serves whichever session needs it.
#[test]
fn k_onnx_runtime_sessions_whose_streams_are_never_reset_hold_within_a_tenth_of_max_in_use() {
    for k in [1, 4, 8] {
        let (pages, syncs) = k_sessions(Mode::Pages, RunEnd::Synchronized, k, 12);
        let regions = k_sessions_held_over_max_in_use(Mode::Regions, RunEnd::Synchronized, k, 12);
        eprintln!(
            "K = {k}: peak held / MaxInUse {pages:.3} with {syncs} device waits in {} runs \
             (regions {regions:.3})",
            12 * k
        );
        // Measured 1.016 / 1.045 / 1.047 (before the wait: 1.016 / 1.370 / 1.2+; regions
        // 1.384 / 2.359 / 2.351).
        assert!(pages <= 1.10, "K = {k}: {pages:.3}");
    }
}

/// K sessions on K streams whose threads share one sub-arena (Python threads under the GIL,
/// requests that never allocate at once): every stream's rule in one sub-arena, memory within
/// the churn ceiling of MaxInUse, and within a tenth for sessions whose streams are never reset.
#[test]
fn k_sessions_on_threads_sharing_one_sub_arena_hold_about_max_in_use() {
    for k in [1, 4, 8] {
        let (reset, _) = k_sessions_on(Mode::Pages, RunEnd::Reset, k, 12, true);
        let (kept, syncs) = k_sessions_on(Mode::Pages, RunEnd::Synchronized, k, 12, true);
        eprintln!(
            "K = {k}, shared: peak held / MaxInUse {reset:.3} (reset), {kept:.3} with {syncs} \
             device waits (never reset)"
        );
        // Measured 1.016 / 1.002 / 1.003 and 1.016 / 1.017 / 1.018.
        assert!(
            reset <= 1.10 && kept <= 1.10,
            "K = {k}: {reset:.3}, {kept:.3}"
        );
    }
}

/// A thread reading stats all the while (PyTorch's memory polling) moves no allocating thread
/// off the shared sub-arena: only another thread allocating or freeing there does. (On an
/// H100, BERT serving from one thread held 640 MiB while the poller moved it, 584 not.)
#[test]
fn a_thread_reading_stats_moves_no_thread_off_the_shared_sub_arena() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let a = Arc::new(arena(Mode::Pages));
    // Reads so far; u64::MAX tells the reader to stop.
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (a, reads) = (a.clone(), reads.clone());
        std::thread::spawn(move || {
            while reads.load(Ordering::Relaxed) != u64::MAX {
                let _ = a.stats();
                let _ = a.memory_log();
                let _ = reads.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n != u64::MAX).then(|| n + 1)
                });
            }
        })
    };
    let (a1, reads1) = (a.clone(), reads.clone());
    // Allocating and freeing all through the reader's first 20,000 reads.
    let moved = Worker::shared().run(move || {
        let mut i = 0u64;
        while reads1.load(Ordering::Relaxed) < 20_000 {
            let p = alloc(&*a1, 256 << (i % 12));
            a1.free(p).expect("live");
            i += 1;
        }
        cuda_arena_core::uses_own_sub_arena()
    });
    reads.store(u64::MAX, Ordering::Relaxed);
    reader.join().expect("reader");
    assert!(!moved, "the thread left the shared sub-arena for a reader");
    a.check_invariants().expect("consistent");
}

#[test]
fn a_worker_that_leaves_the_shared_sub_arena_says_so() {
    assert!(!Worker::shared().run(cuda_arena_core::uses_own_sub_arena));
    assert!(Worker::new().run(cuda_arena_core::uses_own_sub_arena));
}

/// Allocations off the common path per allocation in the last of `passes` passes of
/// `threads` threads, each on a logical stream of its own (`Stream::new()`: no events, so a
/// chunk freed on it is that stream's until a reset) and replaying its own copy of `mixed` ÷
/// 16, all busy at once: in lockstep slices of `slice` operations, one thread after another,
/// so the run is the same every time.
fn slow_share_on_logical_streams(threads: usize, passes: usize, slice: usize) -> f64 {
    use cuda_arena_core::trace::{synthetic::mixed_trace, TraceOp};
    let a = Arc::new(arena(Mode::Pages));
    let pool: Vec<(Worker, Stream, Vec<TraceOp>)> = (0..threads)
        .map(|i| {
            let trace = mixed_trace(4_000, 16, 4 << 20, 200, 7 + i as u64);
            (Worker::new(), Stream::new(), trace)
        })
        .collect();
    let live: Vec<Arc<std::sync::Mutex<std::collections::HashMap<u64, u64>>>> =
        (0..threads).map(|_| Arc::default()).collect();
    let mut second = (0, 0);
    for pass in 0..passes {
        let slow_before = a.slow_allocations();
        let mut allocs = 0;
        for start in (0..4_000).step_by(slice) {
            for ((w, s, trace), live) in pool.iter().zip(&live) {
                let ops: Vec<TraceOp> = trace[start..(start + slice).min(trace.len())].to_vec();
                allocs += ops
                    .iter()
                    .filter(|op| matches!(op, TraceOp::Alloc { .. }))
                    .count();
                let (a, s, live) = (a.clone(), s.clone(), live.clone());
                w.run(move || {
                    let mut live = live.lock().expect("not poisoned");
                    for op in ops {
                        match op {
                            TraceOp::Alloc { id, size, .. } => {
                                live.insert(id, on(&*a, &s, size));
                            }
                            TraceOp::Free { id } => {
                                let addr = live.remove(&id).expect("a live allocation");
                                a.free(addr).expect("live");
                            }
                            TraceOp::Reserve { .. } => {}
                        }
                    }
                });
            }
        }
        if pass + 1 == passes {
            second = (a.slow_allocations() - slow_before, allocs);
        }
    }
    a.check_invariants().expect("consistent");
    second.0 as f64 / second.1 as f64
}

#[test]
fn threads_on_logical_streams_stay_on_their_common_paths() {
    // Once warm, a thread on a stream without events finds its memory in its own part: it
    // never takes a busy part's free memory, which, freed on its stream, that part's thread
    // could not reuse (eight threads so took the slow path on more than every allocation).
    // (At 1c3c489, before this rule: 0.174 of the fourth pass's allocations; with it, 0.026.)
    let share = slow_share_on_logical_streams(8, 4, 10);
    eprintln!("slow path / allocation in the fourth pass: {share:.4}");
    assert!(
        share < 0.08,
        "{share:.4} of allocations off the common path"
    );
}

/// Sizes from 256 bytes to 64 MiB, `total` bytes in all, from `seed`.
fn mixed_pieces(total: u64, mut seed: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut t = 0;
    while t < total {
        let n = (256u64 << (xorshift(&mut seed) % 19))
            .min(total - t)
            .max(256);
        t += n;
        v.push(n);
    }
    v
}

/// `k` sessions, each on a long-lived thread and a stream of its own whose work is done at
/// once, never reset: in each phase one session peaks at `peak` bytes while the others stay
/// busy with `busy` bytes each, then each frees on its own thread. Returns the most held ÷ the
/// live peak so far. `host_may_destroy`: streams only their own calls record on (ONNX
/// Runtime's), else streams any miss may cover (PyTorch's threads).
fn k_sessions_on_long_lived_threads_whose_peaks_take_turns(
    host_may_destroy: bool,
    k: usize,
    peak: u64,
    busy: u64,
) -> f64 {
    let a = Arc::new(virtual_vm_arena(&[]));
    let sim = SimEvents::immediate();
    let events: Arc<dyn StreamEvents> = sim.clone();
    let host = ForeignStreams::with_events(Some(events));
    let streams: Vec<Stream> = (0..k as u64)
        .map(|i| {
            let st = host.get(0x5000 + i).expect("stream");
            if host_may_destroy {
                st.free_events().expect("events").set_host_may_destroy();
            }
            st
        })
        .collect();
    let pool: Vec<Worker> = (0..k).map(|_| Worker::new()).collect();
    let (mut peak_live, mut worst) = (0u64, 0f64);
    for phase in 0..3 * k {
        let mut live = Vec::new();
        let mut live_now = 0;
        for (i, s) in streams.iter().enumerate() {
            let total = if i == phase % k { peak } else { busy };
            let sizes = mixed_pieces(total, 77 + 13 * phase as u64 + i as u64);
            live_now += live_bytes(&sizes);
            let (a, s) = (a.clone(), s.clone());
            live.push(
                pool[i].run(move || sizes.iter().map(|&n| on(&*a, &s, n)).collect::<Vec<_>>()),
            );
        }
        peak_live = peak_live.max(live_now);
        worst = worst.max(a.stats().total_allocated as f64 / peak_live as f64);
        for (i, ps) in live.into_iter().enumerate() {
            let a = a.clone();
            pool[i].run(move || ps.into_iter().for_each(|p| a.free(p).expect("free")));
        }
    }
    a.check_invariants().expect("invariants");
    worst
}

/// PyTorch's threads: the arena holds about what it holds with no streams at all (1.31x the
/// live peak, the churn ceiling; 1.306x here), not the sum of the sessions' peaks (3.39x
/// when a live thread's latest stream was never recorded for).
#[test]
fn k_sessions_on_long_lived_threads_whose_peaks_take_turns_hold_the_peak_not_their_sum() {
    let worst = k_sessions_on_long_lived_threads_whose_peaks_take_turns(false, 4, GIB, 64 * MIB);
    assert!(worst <= 1.35, "held {worst:.3}x the live peak");
}

/// Many sessions, each peak a few times the others' working sets: what stopped freeing is left
/// uncovered past the ceiling only up to all that churn may add in total (1.3x + 0.3x, and a
/// page per thread: 1.68x here, 1.34x with no streams), not up to that per thread (5.03x with
/// a rule that covered only a sub-arena holding more free memory than that alone; 5.66x when
/// a live thread's latest stream was never recorded for).
#[test]
fn many_sessions_whose_peaks_take_turns_hold_at_most_the_churn_past_the_ceiling() {
    let worst =
        k_sessions_on_long_lived_threads_whose_peaks_take_turns(false, 16, 256 * MIB, 32 * MIB);
    assert!(worst <= 1.75, "held {worst:.3}x the live peak");
}

/// ONNX Runtime's sessions, whose streams no other call records on: the device is waited for
/// once past the headroom instead (1.12x).
#[test]
fn k_ort_sessions_on_long_lived_threads_whose_peaks_take_turns_hold_the_peak_not_their_sum() {
    let worst = k_sessions_on_long_lived_threads_whose_peaks_take_turns(true, 4, GIB, 64 * MIB);
    assert!(worst <= 1.35, "held {worst:.3}x the live peak");
}
