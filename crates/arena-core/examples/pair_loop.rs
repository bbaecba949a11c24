//! A bare alloc+free loop, for profilers (`valgrind --tool=callgrind`, `perf`):
//! `cargo run --release -p cuda-arena-core --example pair_loop -- 256 10000000`.
use cuda_arena_core::{AddressSpaceAllocator, Allocator, Arena, ArenaConfig};
use std::hint::black_box;

fn main() {
    let mut args = std::env::args().skip(1);
    let size: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let arena =
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena");
    // Through a trait object, as the bindings call it: nothing inlined into this loop.
    let arena: &dyn Allocator = black_box(&arena);
    let start = std::time::Instant::now();
    for _ in 0..n {
        let p = arena
            .alloc(black_box(size))
            .expect("fits")
            .expect("non-zero");
        arena.free(black_box(p)).expect("live");
    }
    println!(
        "{:.1} ns per alloc+free pair of {size} bytes",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}
