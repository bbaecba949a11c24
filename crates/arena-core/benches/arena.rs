//! `cargo bench -p cuda-arena-core`: warm alloc+free pairs (one size at a time, then 1/2/8 threads
//! on one arena) and a 200,000-op trace replay on the `virtual` backend. Every figure is
//! nanoseconds per alloc+free pair or per trace op.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use cuda_arena_core::trace::{mixed_trace, replay};
use cuda_arena_core::{Allocator, Arena, ArenaConfig, VirtualAllocator};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const SIZES: [(&str, u64); 3] = [("256B", 256), ("64KiB", 64 << 10), ("4MiB", 4 << 20)];

fn warm_arena(size: u64) -> Arena<VirtualAllocator> {
    let arena = Arena::new(VirtualAllocator::default(), ArenaConfig::default()).expect("arena");
    // Warm: the region exists and the bins have been through one cycle.
    let p = arena.alloc(size).expect("fits").expect("non-zero");
    arena.free(p).expect("live");
    arena
}

fn pair(arena: &impl Allocator, size: u64) {
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
fn threaded(arena: &Arc<Arena<VirtualAllocator>>, threads: u32, iters: u64, size: u64) -> Duration {
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

fn trace_replay(c: &mut Criterion) {
    const OPS: usize = 200_000;
    let trace = mixed_trace(OPS, 256, 64 << 20, 2000, 42);
    let mut g = c.benchmark_group("trace_replay");
    g.sample_size(20);
    g.bench_function("mixed_200k_per_op", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let arena =
                    Arena::new(VirtualAllocator::default(), ArenaConfig::default()).expect("arena");
                let report = replay(&arena, &trace, &[], false).expect("replay");
                assert_eq!(report.failed_allocs, 0);
                total += Duration::from_nanos(report.elapsed_ns);
            }
            total / OPS as u32
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    alloc_free_pair,
    alloc_free_pair_threads,
    trace_replay
);
criterion_main!(benches);
