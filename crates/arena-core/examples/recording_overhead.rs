//! What the recordable wrapper costs with no recording on, measured so that machine noise
//! cancels: alternating blocks of warm alloc+free pairs through the arena as the factory handed
//! it out before recording existed (`Arc<dyn Allocator>`) and through the wrapper it hands out
//! now, both seeing the same machine state. Prints the median ns per pair of each and the
//! median of the per-block differences; `control` compares two bare arenas instead (the
//! method's own noise):
//! `cargo run --release -p cuda-arena-core --example recording_overhead [-- control]`.
use cuda_arena_core::{AddressSpaceAllocator, Allocator, Arena, ArenaConfig, RecordingAllocator};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const BLOCKS: usize = 400;
const PAIRS: u32 = 20_000;

fn warm(size: u64) -> Arena<AddressSpaceAllocator> {
    let a = Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena");
    let p = a.alloc(size).expect("fits").expect("non-zero");
    a.free(p).expect("live");
    a
}

/// Nanoseconds per pair over one block.
fn block(a: &dyn Allocator, size: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..PAIRS {
        let p = a.alloc(black_box(size)).expect("fits").expect("non-zero");
        a.free(black_box(p)).expect("live");
    }
    t.elapsed().as_nanos() as f64 / f64::from(PAIRS)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let control = std::env::args().any(|a| a == "control");
    for (name, size) in [("256B", 256u64), ("64KiB", 64 << 10), ("4MiB", 4 << 20)] {
        let bare: Arc<dyn Allocator> = Arc::new(warm(size));
        // As the factory wraps it: around the concrete arena.
        let other: Arc<dyn Allocator> = if control {
            Arc::new(warm(size))
        } else {
            Arc::new(RecordingAllocator::new(Arc::new(warm(size))))
        };
        let (mut b, mut o, mut d) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..BLOCKS {
            // Each goes first in every other block.
            let (x, y) = if i % 2 == 0 {
                let x = block(&*bare, size);
                (x, block(&*other, size))
            } else {
                let y = block(&*other, size);
                (block(&*bare, size), y)
            };
            b.push(x);
            o.push(y);
            d.push(y - x);
        }
        println!(
            "{name}: bare {:.2} ns/pair, {} {:.2} ns/pair, median difference {:+.2} ns",
            median(&mut b),
            if control {
                "bare again"
            } else {
                "recording off"
            },
            median(&mut o),
            median(&mut d)
        );
    }
}
