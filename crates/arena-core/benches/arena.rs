//! `cargo bench -p cuda-arena-core`: warm alloc+free pairs (one size at a time, then 1/2/8 threads
//! on one arena, then through trace recording's wrapper) and a 200,000-op trace replay on the
//! `virtual` backend. Every figure is nanoseconds per alloc+free pair or per trace op, but for
//! `write_among_live`: a 4 KiB write on `host` into the last of 1 or 100,000 live allocations,
//! and `per_request_stream`: a new foreign stream (never reset) looked up, allocated on and
//! freed on, among the first thousand a set sees and after 15,000, in region and virtual-memory mode.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use cuda_arena_core::trace::replay;
use cuda_arena_core::trace::synthetic::mixed_trace;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, DeviceLimits, ForeignStreams,
    HostAllocator, RecordingAllocator, SimEvents, StreamEvents, VirtualMemory,
};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const SIZES: [(&str, u64); 3] = [("256B", 256), ("64KiB", 64 << 10), ("4MiB", 4 << 20)];

fn warm_arena(size: u64) -> Arena<AddressSpaceAllocator> {
    warm(
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena"),
        size,
    )
}

/// As [`warm_arena`], in virtual-memory mode (the factories' default) with 2 MiB pages.
fn warm_vm_arena(size: u64) -> Arena<AddressSpaceAllocator> {
    let raw = AddressSpaceAllocator::default().with_granularity(2 << 20);
    let v: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    warm(
        Arena::with_virtual_memory(raw, v, ArenaConfig::default()).expect("arena"),
        size,
    )
}

fn warm(arena: Arena<AddressSpaceAllocator>, size: u64) -> Arena<AddressSpaceAllocator> {
    // Warm: the region exists and the bins have been through one cycle.
    let p = arena.alloc(size).expect("fits").expect("non-zero");
    arena.free(p).expect("live");
    arena
}

fn pair(arena: &(impl Allocator + ?Sized), size: u64) {
    let p = arena
        .alloc(black_box(size))
        .expect("fits")
        .expect("non-zero");
    arena.free(black_box(p)).expect("live");
}

fn alloc_free_pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_free_pair");
    for (name, size) in SIZES {
        let arena = warm_arena(size);
        g.bench_function(name, |b| b.iter(|| pair(&arena, size)));
    }
    g.finish();
}

/// Wall time for every thread to do `iters` pairs, divided by the thread count: the cost
/// of one pair when all threads share one arena.
fn threaded(
    arena: &Arc<Arena<AddressSpaceAllocator>>,
    threads: u32,
    iters: u64,
    size: u64,
) -> Duration {
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (arena, barrier) = (arena.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    pair(&*arena, size);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("bench thread");
    }
    start.elapsed() / threads
}

fn alloc_free_pair_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_free_pair_threads");
    let size = 64 << 10;
    for threads in [1u32, 2, 8] {
        let arena = Arc::new(warm_arena(size));
        g.bench_with_input(BenchmarkId::new("64KiB", threads), &threads, |b, &t| {
            b.iter_custom(|iters| threaded(&arena, t, iters, size))
        });
    }
    g.finish();
}

/// What trace recording costs a pair on the path every user takes, an `Arc<dyn Allocator>`
/// from the factory: `bare` is the arena as the factory handed it out before recording
/// existed, `off` the recordable wrapper it hands out now with no recording on, `on` the same
/// while recording to `/dev/null` (formatting, buffering, the writer thread; no disk).
fn alloc_free_pair_recording(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_free_pair_recording");
    for (name, size) in SIZES {
        let bare: Arc<dyn Allocator> = Arc::new(warm_arena(size));
        // As the factory wraps it: around the concrete arena.
        let recordable = || -> Arc<dyn Allocator> {
            Arc::new(RecordingAllocator::new(Arc::new(warm_arena(size))))
        };
        let (off, on) = (recordable(), recordable());
        on.start_recording("/dev/null").expect("records");
        for (how, a) in [("bare", &bare), ("off", &off), ("on", &on)] {
            g.bench_function(format!("{how}/{name}"), |b| b.iter(|| pair(&**a, size)));
        }
        on.stop_recording().expect("stops");
    }
    g.finish();
}

fn trace_replay(c: &mut Criterion) {
    const OPS: usize = 200_000;
    let trace = mixed_trace(OPS, 256, 64 << 20, 2000, 42);
    let mut g = c.benchmark_group("trace_replay");
    g.sample_size(20);
    g.bench_function("mixed_200k_per_op", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let arena = Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default())
                    .expect("arena");
                let report = replay(&arena, &trace, &[], false).expect("replay");
                assert_eq!(report.failed_allocs, 0);
                total += Duration::from_nanos(report.elapsed_ns);
            }
            total / OPS as u32
        })
    });
    g.finish();
}

/// A host that makes a stream per request and never resets it (issue 25): streams whose work
/// is done and that hold nothing are forgotten, so the thousand streams after 15,000 cost what
/// the first thousand do. Per stream: the lookup that makes it, one 4 KiB alloc and its free.
fn per_request_stream(c: &mut Criterion) {
    const BLOCK: u64 = 1000;
    let mut g = c.benchmark_group("per_request_stream");
    g.sample_size(10);
    g.sampling_mode(criterion::SamplingMode::Flat);
    for (mode, make) in [
        (
            "regions",
            warm_arena as fn(u64) -> Arena<AddressSpaceAllocator>,
        ),
        ("pages", warm_vm_arena),
    ] {
        for seen in [0u64, 15_000] {
            g.bench_function(format!("{mode}/after_{seen}"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let arena = make(4096);
                        let events: Arc<dyn StreamEvents> = SimEvents::immediate();
                        let streams = ForeignStreams::with_events(Some(events));
                        let one = |h: u64| {
                            let s = streams.get(h).expect("served");
                            let p = arena
                                .alloc_on_stream(4096, &s)
                                .expect("fits")
                                .expect("addr");
                            arena.free(p).expect("live");
                        };
                        (1..=seen).for_each(one);
                        let start = Instant::now();
                        (seen + 1..=seen + BLOCK).for_each(one);
                        total += start.elapsed();
                    }
                    total / BLOCK as u32
                })
            });
        }
    }
    g.finish();
}

/// A write finds its allocation in O(1) however many are live (it used to walk every chunk
/// below it in its region: 183 us at 100,000), in region and virtual-memory mode: 4 KiB into
/// the highest-addressed of `n` live 8 KiB allocations, at its start and 1 KiB in.
fn write_among_live(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_among_live");
    let data = [7u8; 4096];
    for vm in [false, true] {
        for n in [1u64, 100_000] {
            let raw = HostAllocator::new(DeviceLimits::with_total(2 << 30));
            let mut cfg = ArenaConfig::default();
            let arena = if vm {
                cfg.use_virtual_memory = true;
                let v: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
                Arena::with_virtual_memory(raw, v, cfg).expect("arena")
            } else {
                Arena::new(raw, cfg).expect("arena")
            };
            let last = (0..n)
                .map(|_| arena.alloc(8192).expect("fits").expect("non-zero"))
                .max()
                .expect("one");
            let mode = if vm { "virtual_memory" } else { "region" };
            for (at, off) in [("start", 0), ("1KiB_in", 1024)] {
                arena.write(last + off, &data).expect("inside");
                g.bench_function(format!("{mode}/{n}/{at}"), |b| {
                    b.iter(|| arena.write(black_box(last + off), &data))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    alloc_free_pair,
    alloc_free_pair_threads,
    alloc_free_pair_recording,
    trace_replay,
    write_among_live,
    per_request_stream
);
criterion_main!(benches);
