//! Replays a named trace on the `virtual` backend and prints ns/op, for profilers:
//! `cargo run --release -p cuda-arena-core --example replay_trace -- small 200000`.
use cuda_arena_core::trace::{named_trace, replay};
use cuda_arena_core::{Arena, ArenaConfig, VirtualAllocator};

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "mixed".into());
    let ops: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let trace = named_trace(&kind, ops, 7).expect("inference, mixed, small or growing");
    for _ in 0..3 {
        let arena = Arena::new(VirtualAllocator::default(), ArenaConfig::default()).expect("arena");
        let r = replay(&arena, &trace, &[], false).expect("replay");
        println!("{kind}: {:.1} ns/op over {} ops", r.ns_per_op(), r.ops);
    }
}
