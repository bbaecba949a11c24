//! The GPU suite: runs on a machine with a CUDA driver, from binaries built elsewhere
//! (`cargo test -p cuda-sys-bridge --release --no-run`, then the binary with `--ignored`).
//! Ignored by default so CI, which has no GPU, does not run them.

use cuda_arena_core::{ArenaConfig, Factory, MemoryInfo, MemoryKind, Released, SharedKind};
use cuda_sys_bridge::{devices, CudaBackend};
use std::sync::Arc;

const MIB: u64 = 1 << 20;

fn backend() -> Arc<CudaBackend> {
    Arc::new(CudaBackend::new().expect("a CUDA driver and device"))
}

fn config(pairs: &[(&str, &str)]) -> ArenaConfig {
    ArenaConfig::from_pairs(pairs.iter().copied()).expect("valid")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
#[ignore = "needs a GPU"]
fn devices_reports_every_field() {
    let d = devices();
    assert!(!d.is_empty());
    for g in &d {
        println!("{g:?}");
        assert!(
            !g.name.is_empty()
                && g.total_memory > 0
                && g.free_memory > 0
                && g.free_memory <= g.total_memory
        );
        assert!(g.pci_bus_id.contains(':') && g.uuid.starts_with("GPU-"));
        assert!(g.compute_capability.0 >= 7);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn written_bytes_read_back_on_device_and_pinned_arenas() {
    let f = Factory::new("gpu-rw", backend());
    for kind in [MemoryKind::Cuda, MemoryKind::CudaPinned] {
        let a = f
            .create_allocator(MemoryInfo::new(kind, 0), None)
            .expect("arena")
            .allocator;
        for (i, size) in [1usize, 7, 255, 256, 4097, 65536, 1 << 20, 33 << 20]
            .into_iter()
            .enumerate()
        {
            let p = a.alloc(size as u64).expect("fits").expect("non-zero");
            let data = pattern(size, i as u8);
            a.write(p, &data).expect("write");
            let mut back = vec![0u8; size];
            a.read(p, &mut back).expect("read");
            assert_eq!(back, data, "{kind:?} {size}");
            a.fill(p, 0xAB, size as u64).expect("fill");
            a.read(p, &mut back).expect("read");
            assert!(back.iter().all(|&b| b == 0xAB));
            assert_eq!(
                a.write(p + size as u64, &[1]).map_err(|e| e.code()),
                Err("ERR_ARENA_UNKNOWN_POINTER")
            );
            a.free(p).expect("live");
        }
        f.release_allocator(&a);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn the_mempool_allocates_copies_and_trims() {
    let b = backend();
    let f = Factory::new("gpu-pool", b.clone());
    let pool = f
        .create_allocator(
            MemoryInfo::new(MemoryKind::Cuda, 0),
            Some(&config(&[("arena.use_cuda_mempool", "1")])),
        )
        .expect("pool");
    assert_eq!(pool.kind, Some(SharedKind::Mempool));
    let a = pool.allocator;
    let s = b.create_stream(0).expect("stream");
    let p = a
        .alloc_on_stream(3 * MIB, s.logical())
        .expect("fits")
        .expect("non-zero");
    let data = pattern(3 * MIB as usize, 9);
    a.write(p, &data).expect("write");
    let mut back = vec![0u8; data.len()];
    a.read(p, &mut back).expect("read");
    assert_eq!(back, data);
    assert!(
        a.stats().total_allocated >= 3 * MIB,
        "the pool reserves what it hands out"
    );
    assert_eq!(
        a.free(p + 256).map_err(|e| e.code()),
        Err("ERR_ARENA_UNKNOWN_POINTER")
    );
    a.free(p).expect("live");
    s.synchronize().expect("sync");
    assert!(
        a.stats().total_allocated >= 3 * MIB,
        "unlimited release threshold keeps it"
    );
    a.shrink().expect("trim");
    assert_eq!(a.stats().num_arena_shrinkages, 1);
    assert_eq!(a.stats().total_allocated, 0);
}

#[test]
#[ignore = "needs a GPU"]
fn a_chunk_freed_on_one_stream_is_reused_by_another_only_after_waiting() {
    let b = backend();
    let f = Factory::new("gpu-streams", b.clone());
    let a = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("arena")
        .allocator;
    let (s, t) = (
        b.create_stream(0).expect("s"),
        b.create_stream(0).expect("t"),
    );
    let p = a
        .alloc_on_stream(4096, s.logical())
        .expect("fits")
        .expect("non-zero");
    let keep = a
        .alloc_on_stream(4096, s.logical())
        .expect("fits")
        .expect("non-zero");
    a.free(p).expect("live");
    let q = a
        .alloc_on_stream(4096, t.logical())
        .expect("fits")
        .expect("non-zero");
    assert_ne!(q, p, "t has not waited on s");
    t.wait(&s.record().expect("record")).expect("wait");
    let r = a
        .alloc_on_stream(4096, t.logical())
        .expect("fits")
        .expect("non-zero");
    assert_eq!(r, p, "after waiting, t reuses s's chunk");
    t.synchronize().expect("sync");
    for x in [q, r, keep] {
        a.free(x).expect("live");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn more_than_the_card_has_is_out_of_memory_and_the_arena_keeps_working() {
    let b = backend();
    let total = devices()[0].total_memory;
    let f = Factory::new("gpu-oom", b);
    let a = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("arena")
        .allocator;
    let p = a.alloc(MIB).expect("fits").expect("non-zero");
    let before = a.stats();
    assert_eq!(
        a.alloc(total + MIB).map_err(|e| e.code()),
        Err("ERR_ARENA_OUT_OF_MEMORY")
    );
    assert_eq!(a.stats().in_use, before.in_use);
    let q = a.alloc(8 * MIB).expect("still works").expect("non-zero");
    a.free(q).expect("live");
    a.free(p).expect("live");
}

#[test]
#[ignore = "needs a GPU"]
fn releasing_every_allocator_gives_the_driver_its_memory_back() {
    let start = devices()[0].free_memory;
    {
        let b = backend();
        let f = Factory::new("gpu-teardown", b.clone());
        let a = f
            .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
            .expect("arena")
            .allocator;
        let pinned = f
            .create_allocator(MemoryInfo::new(MemoryKind::CudaPinned, 0), None)
            .expect("pinned")
            .allocator;
        let pool = f
            .create_allocator(
                MemoryInfo::new(MemoryKind::Cuda, 0),
                Some(&config(&[("arena.use_cuda_mempool", "1")])),
            )
            .expect("pool")
            .allocator;
        let held: Vec<u64> = (0..20)
            .map(|i| a.alloc((i + 1) * 7 * MIB).expect("fits").expect("non-zero"))
            .collect();
        let r = a.reserve(100 * MIB).expect("fits").expect("non-zero");
        let x = pool.alloc(64 * MIB).expect("fits").expect("non-zero");
        let y = pinned.alloc(4 * MIB).expect("fits").expect("non-zero");
        assert!(devices()[0].free_memory + 1000 * MIB < start + 2 * MIB);
        for p in held {
            a.free(p).expect("live");
        }
        a.free(r).expect("live");
        pool.free(x).expect("live");
        pinned.free(y).expect("live");
        for al in [&a, &pinned, &pool] {
            assert_eq!(f.release_allocator(al), Released::Destroyed);
        }
        drop((a, pinned, pool));
        assert_eq!(f.device_stats(0).expect("stats").raw_bytes_outstanding, 0);
    }
    let end = devices()[0].free_memory;
    assert!(
        end + 2 * MIB >= start,
        "free memory {end} is more than 2 MiB below the start {start}"
    );
}

#[test]
#[ignore = "needs a GPU"]
fn two_factories_in_one_process_have_separate_arenas() {
    let (f1, f2) = (
        Factory::new("gpu-a", backend()),
        Factory::new("gpu-b", backend()),
    );
    let a1 = f1
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("a1")
        .allocator;
    let a2 = f2
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("a2")
        .allocator;
    assert!(!Arc::ptr_eq(&a1, &a2));
    let p = a1.alloc(MIB).expect("fits").expect("non-zero");
    assert_eq!(
        a2.free(p).map_err(|e| e.code()),
        Err("ERR_ARENA_UNKNOWN_POINTER")
    );
    a1.write(p, &[1, 2, 3]).expect("write");
    a1.free(p).expect("live");
}

// ---- Issue 13: streams the host owns ------------------------------------------------------
//
// These make their streams with the driver directly, as a host (PyTorch, ORT, a C caller)
// would, and never through cuda-arena. A host function launched on a stream holds it at a
// gate until the test opens it, so "the stream's work is not done yet" is deterministic.

mod host {
    use cudarc::driver::result as cu;
    use cudarc::driver::sys;
    use std::ffi::c_void;
    use std::sync::{Arc, Condvar, Mutex};

    /// The device's primary context, current on this thread (what the runtime API, and so
    /// PyTorch, uses).
    pub fn primary_context() -> sys::CUcontext {
        cu::init().expect("driver");
        let dev = cu::device::get(0).expect("device 0");
        // SAFETY: `dev` is a device; the retain is never released (the test process ends).
        let ctx = unsafe { cu::primary_ctx::retain(dev) }.expect("primary context");
        // SAFETY: `ctx` was just retained.
        unsafe { cu::ctx::set_current(ctx) }.expect("set current");
        ctx
    }

    /// A non-blocking stream the host made; its handle as cuda-arena sees it.
    pub fn stream() -> u64 {
        primary_context();
        cu::stream::create(cu::stream::StreamKind::NonBlocking).expect("stream") as u64
    }

    pub fn destroy(s: u64) {
        // SAFETY: `s` came from `stream()` and is destroyed once.
        unsafe { cu::stream::destroy(s as sys::CUstream) }.expect("destroy");
    }

    pub fn sync(s: u64) {
        // SAFETY: `s` is a live stream.
        unsafe { cu::stream::synchronize(s as sys::CUstream) }.expect("synchronize");
    }

    /// Sets `len` bytes at `p` to `byte`, in `s`'s order.
    pub fn memset(p: u64, byte: u8, len: u64, s: u64) {
        // SAFETY: `p..p+len` is an allocation of the test's, live until `s` reaches this.
        unsafe { cu::memset_d8_async(p, byte, len as usize, s as sys::CUstream) }.expect("memset");
    }

    pub fn read(p: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: `p..p+len` is a live allocation; every stream that wrote it was synchronized.
        unsafe { cu::memcpy_dtoh_sync(&mut out, p) }.expect("read");
        out
    }

    /// Holds a stream at a point of its work until opened.
    #[derive(Default)]
    pub struct Gate {
        open: Mutex<bool>,
        cv: Condvar,
    }

    unsafe extern "C" fn wait_at_gate(arg: *mut c_void) {
        // SAFETY: `arg` is the `Gate` an `Arc` the test holds keeps alive until it has
        // synchronized the stream.
        let gate = unsafe { &*(arg as *const Gate) };
        let mut open = gate.open.lock().expect("gate");
        while !*open {
            open = gate.cv.wait(open).expect("gate");
        }
    }

    impl Gate {
        /// Stream `s` stops here until `open()`.
        pub fn hold(s: u64) -> Arc<Gate> {
            let gate = Arc::new(Gate::default());
            // SAFETY: the host function touches only the gate, which outlives the stream's wait.
            unsafe {
                cu::stream::launch_host_function(
                    s as sys::CUstream,
                    wait_at_gate,
                    Arc::as_ptr(&gate) as *mut c_void,
                )
            }
            .expect("launch host function");
            gate
        }

        pub fn open(&self) {
            *self.open.lock().expect("gate") = true;
            self.cv.notify_all();
        }
    }

    /// A context of the test's own, current: what another library on the thread may have.
    pub fn other_context() -> sys::CUcontext {
        let dev = cu::device::get(0).expect("device 0");
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer; the context lives until the process ends.
        unsafe { sys::cuCtxCreate_v2(&mut ctx, 0, dev) }
            .result()
            .expect("a context");
        ctx
    }

    pub fn current() -> sys::CUcontext {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer.
        unsafe { sys::cuCtxGetCurrent(&mut ctx) }
            .result()
            .expect("current");
        ctx
    }

    pub fn set_current(ctx: sys::CUcontext) {
        // SAFETY: `ctx` is a live context.
        unsafe { cu::ctx::set_current(ctx) }.expect("set current");
    }
}

/// The shared allocator `pairs` select on device 0, with its host streams (which carry the
/// backend's events).
fn shared(
    name: &str,
    pairs: &[(&str, &str)],
) -> (
    Factory,
    Arc<dyn cuda_arena_core::Allocator>,
    Arc<cuda_arena_core::ForeignStreams>,
) {
    let f = Factory::new(name, backend());
    let c = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), Some(&config(pairs)))
        .expect("allocator");
    (f, c.allocator, c.streams)
}

/// Many allocations of varied sizes on a stream the host made: how many failed.
fn failures_on_a_host_stream(pairs: &[(&str, &str)], name: &str) -> usize {
    let (_f, a, streams) = shared(name, pairs);
    let s = host::stream();
    let stream = streams.get(s).expect("the host's stream");
    let mut failures = 0;
    let mut live = Vec::new();
    for i in 0..20_000u64 {
        let size = 256 + (i * 7919 % 97) * 4096;
        match a.alloc_on_stream(size, &stream) {
            Ok(Some(p)) => {
                host::memset(p, (i % 251) as u8, size, s);
                live.push(p);
            }
            Ok(None) => failures += 1,
            Err(e) => {
                if failures == 0 {
                    println!("first failure: {}: {e}", e.code());
                }
                failures += 1;
            }
        }
        if live.len() > 16 {
            let p = live.remove((i % 16) as usize);
            if a.free(p).is_err() {
                failures += 1;
            }
        }
    }
    let last = *live.last().expect("live");
    let size = 256 + (19_999u64 * 7919 % 97) * 4096;
    host::sync(s);
    assert!(
        host::read(last, size as usize)
            .iter()
            .all(|&b| b == (19_999 % 251) as u8),
        "the last block holds what the stream wrote"
    );
    for p in live {
        if a.free(p).is_err() {
            failures += 1;
        }
    }
    host::sync(s);
    drop(stream);
    drop(streams.forget(s));
    host::destroy(s);
    failures
}

#[test]
#[ignore = "needs a GPU"]
fn the_memory_pool_allocates_on_a_callers_stream_with_no_failures() {
    // Issue 13: before, every allocation failed with ERR_ARENA_RELEASED.
    let failures = failures_on_a_host_stream(&[("arena.use_cuda_mempool", "1")], "gpu-13-pool");
    println!("memory pool, caller's stream: 20000 allocations, {failures} failures");
    assert_eq!(failures, 0);
}

#[test]
#[ignore = "needs a GPU"]
fn the_arena_allocates_on_a_callers_stream_with_no_failures() {
    let failures = failures_on_a_host_stream(&[], "gpu-13-arena");
    println!("arena, caller's stream: 20000 allocations, {failures} failures");
    assert_eq!(failures, 0);
}

#[test]
#[ignore = "needs a GPU"]
fn the_pools_reuse_flags_are_cudas_defaults_all_enabled() {
    // What the pool relies on (pool.rs): the defaults, which never reuse a block before its
    // free is ordered before the new user.
    let pool = backend()
        .memory_pool(0, &config(&[("arena.use_cuda_mempool", "1")]))
        .expect("pool");
    let flags = pool.reuse_flags().expect("flags");
    println!("REUSE_FOLLOW_EVENT_DEPENDENCIES, ALLOW_OPPORTUNISTIC, ALLOW_INTERNAL_DEPENDENCIES: {flags:?}");
    assert_eq!(flags, [true, true, true]);
}

/// S writes 0xAA into a block, frees it (S held at a gate, so that work is pending); T then
/// allocates the same size and writes 0x55. Once both streams finish, T's block must hold
/// 0x55: whatever block T got, S's pending write must not land in it afterwards.
fn no_block_is_reused_before_its_streams_work(pairs: &[(&str, &str)], name: &str) -> (u64, u64) {
    let (_f, a, streams) = shared(name, pairs);
    let (s, t) = (host::stream(), host::stream());
    let (ss, ts) = (streams.get(s).expect("s"), streams.get(t).expect("t"));
    const LEN: u64 = 64 << 20;
    let gate = host::Gate::hold(s);
    let p = a.alloc_on_stream(LEN, &ss).expect("fits").expect("addr");
    let wall = a.alloc_on_stream(LEN, &ss).expect("fits").expect("addr");
    host::memset(p, 0xAA, LEN, s);
    a.free(p).expect("free on S");
    let q = a.alloc_on_stream(LEN, &ts).expect("fits").expect("addr");
    host::memset(q, 0x55, LEN, t);
    gate.open();
    host::sync(s);
    host::sync(t);
    assert!(
        host::read(q, LEN as usize).iter().all(|&b| b == 0x55),
        "S's write landed in T's block: it was reused before S's work was done"
    );
    for x in [q, wall] {
        a.free(x).expect("free");
    }
    host::sync(s);
    host::sync(t);
    drop((ss, ts));
    streams.clear();
    host::destroy(s);
    host::destroy(t);
    (p, q)
}

#[test]
#[ignore = "needs a GPU"]
fn the_pool_never_gives_a_block_to_another_stream_before_its_streams_work() {
    let (p, q) = no_block_is_reused_before_its_streams_work(
        &[("arena.use_cuda_mempool", "1")],
        "gpu-13-pool-order",
    );
    println!(
        "pool: T got {} block",
        if p == q {
            "S's (ordered by the driver)"
        } else {
            "another"
        }
    );
}

#[test]
#[ignore = "needs a GPU"]
fn cross_stream_reuse_in_the_arena_waits_for_the_event_recorded_after_the_free() {
    // The region arena, each region the request: p is the only place T's request fits.
    let region = [
        ("arena.extend_strategy", "1"),
        ("arena.use_virtual_memory", "0"),
    ];
    cross_stream_reuse_waits_for_the_event(&region, "gpu-13-arena-events", true);
}

#[test]
#[ignore = "needs a GPU"]
fn the_default_arena_never_waits_on_a_stream_held_at_a_gate() {
    // Issue 25: a device-wide wait here deadlocked (S waits for the gate this thread opens).
    cross_stream_reuse_waits_for_the_event(&[], "gpu-25-gate", false);
}

/// S's work up to a free is held at a gate: T may not take the chunk, and must not wait for
/// S; once the gate opens and S finishes, T reuses it (`exact`: at once; else among T's next).
fn cross_stream_reuse_waits_for_the_event(pairs: &[(&str, &str)], name: &str, exact: bool) {
    let (_f, a, streams) = shared(name, pairs);
    let (s, t) = (host::stream(), host::stream());
    let (ss, ts) = (streams.get(s).expect("s"), streams.get(t).expect("t"));
    let gate = host::Gate::hold(s);
    let p = a.alloc_on_stream(MIB, &ss).expect("fits").expect("addr");
    let wall = a.alloc_on_stream(MIB, &ss).expect("fits").expect("addr");
    host::memset(p, 0xAA, MIB, s);
    a.free(p).expect("free on S");
    assert_eq!(
        a.alloc_on_stream(MIB, &ss).expect("fits"),
        Some(p),
        "S reuses its own chunk at once"
    );
    a.free(p).expect("free on S again");
    let q = a.alloc_on_stream(MIB, &ts).expect("fits").expect("addr");
    assert_ne!(
        q, p,
        "S's work up to the free is held at the gate: T may not take p"
    );
    gate.open();
    host::sync(s);
    let r = a.alloc_on_stream(MIB, &ts).expect("fits").expect("addr");
    let mut more = Vec::new();
    if exact {
        assert_eq!(r, p, "S's event has completed: T reuses p");
    } else {
        while more.len() < 4 && r != p && !more.contains(&p) {
            more.push(a.alloc_on_stream(MIB, &ts).expect("fits").expect("addr"));
        }
        assert!(
            r == p || more.contains(&p),
            "S's event has completed: p serves T"
        );
    }
    for x in [q, r, wall].into_iter().chain(more) {
        a.free(x).expect("free");
    }
    host::sync(t);
    drop((ss, ts));
    streams.clear();
    host::destroy(s);
    host::destroy(t);
}

#[test]
#[ignore = "needs a GPU"]
fn the_arena_never_gives_a_block_to_another_stream_before_its_streams_work() {
    let (p, q) = no_block_is_reused_before_its_streams_work(
        &[("arena.extend_strategy", "1")],
        "gpu-13-arena-order",
    );
    assert_ne!(p, q);
}

#[test]
#[ignore = "needs a GPU"]
fn streams_used_once_and_never_reset_are_forgotten_only_once_their_work_is_done() {
    // Issue 25: a stream per request, never reset. S's free is held at a gate while 2,500 other
    // streams come and go: S is kept (its work may still use its chunk), no other stream gets
    // its chunk, and the others are forgotten as their work completes, with memory bounded.
    let (_f, a, streams) = shared("gpu-25-per-request", &[]);
    let s = host::stream();
    // Made before the gate closes: the host function holding S blocks the driver's thread.
    let others: Vec<u64> = (0..2500).map(|_| host::stream()).collect();
    let ss = streams.get(s).expect("s");
    let gate = host::Gate::hold(s);
    let p = a.alloc_on_stream(MIB, &ss).expect("fits").expect("addr");
    host::memset(p, 0xAA, MIB, s);
    a.free(p).expect("free on S");
    drop(ss);
    let mut most = 0;
    for (i, &h) in others.iter().enumerate() {
        let st = streams.get(h).expect("a new stream is served");
        let q = a.alloc_on_stream(MIB, &st).expect("fits").expect("addr");
        assert_ne!(q, p, "stream {i} got S's chunk while S's work may use it");
        host::memset(q, 0x55, MIB, h);
        a.free(q).expect("free");
        most = most.max(streams.len());
    }
    assert!(
        streams.handles().contains(&s),
        "S's work is held at the gate"
    );
    let (forgotten, held) = (streams.forgotten_finished(), a.stats().total_allocated);
    println!(
        "2,500 streams used once: at most {most} remembered, {forgotten} forgotten, {} MiB held",
        held / MIB
    );
    assert!(forgotten >= 1000, "{forgotten} streams forgotten");
    assert!(
        held <= 64 * MIB,
        "{held} bytes held for 1 MiB live at a time"
    );
    gate.open();
    host::sync(s);
    for h in &others {
        host::sync(*h);
    }
    drop(streams.forget(s));
    streams.clear();
    host::destroy(s);
    for h in others {
        host::destroy(h);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn a_pool_block_live_when_its_stream_is_reset_and_destroyed_is_freed_on_the_legacy_stream() {
    let (_f, a, streams) = shared("gpu-13-pool-reset", &[("arena.use_cuda_mempool", "1")]);
    let s = host::stream();
    let stream = streams.get(s).expect("s");
    let p = a
        .alloc_on_stream(MIB, &stream)
        .expect("fits")
        .expect("addr");
    host::sync(s);
    drop(stream);
    drop(streams.forget(s)); // the host's reset: S's work is done
    host::destroy(s);
    a.free(p)
        .expect("freed on the legacy stream, not on the destroyed handle");
    a.shrink().expect("trim");
}

#[test]
#[ignore = "needs a GPU"]
fn record_stream_makes_the_free_wait_for_the_other_streams_work() {
    // PyTorch's record_stream: a block allocated on S is also written on U. After its free on
    // S, S reuses it at once; S's write must land after U's.
    let f = Arc::new(Factory::new("gpu-13-record-stream", backend()));
    let (d, _) = cuda_arena_core::PluggableDevice::new(f, 0, &config(&[])).expect("device");
    let (s, u) = (host::stream(), host::stream());
    let p = d.alloc(MIB, s).expect("fits").expect("addr");
    d.record_stream(p, u).expect("record");
    let gate = host::Gate::hold(u);
    host::memset(p, 0xAA, MIB, u);
    d.free(p, s).expect("free");
    let q = d.alloc(MIB, s).expect("fits").expect("addr");
    assert_eq!(q, p, "S reuses the block at once");
    host::memset(q, 0x55, MIB, s);
    gate.open();
    host::sync(u);
    host::sync(s);
    assert!(
        host::read(q, MIB as usize).iter().all(|&b| b == 0x55),
        "U's write landed after S's: the free did not wait for U"
    );
    d.free(q, s).expect("free");
    host::sync(s);
    host::destroy(s);
    host::destroy(u);
}

#[test]
#[ignore = "needs a GPU"]
fn a_call_leaves_the_callers_current_context_as_it_was() {
    // PyTorch frees a tensor of one device while another is current; the driver calls the
    // pool makes must not leave its own context current.
    let (_f, a, _streams) = shared("gpu-13-context", &[("arena.use_cuda_mempool", "1")]);
    let other = host::other_context();
    host::set_current(other);
    let p = a.alloc(MIB).expect("fits").expect("addr");
    assert_eq!(
        host::current(),
        other,
        "alloc restored the caller's context"
    );
    a.free(p).expect("free");
    assert_eq!(host::current(), other, "free restored the caller's context");
    host::primary_context();
}
