//! Replays a named trace on the `virtual` backend and prints ns/op, for profilers:
//! `cargo run --release -p cuda-arena-core --example replay_trace -- small 200000`.
use cuda_arena_core::trace::replay;
use cuda_arena_core::trace::synthetic::named_trace;
use cuda_arena_core::{AddressSpaceAllocator, Arena, ArenaConfig};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "mixed".into());
    let ops: usize = match args.next() {
        None => 200_000,
        Some(a) => a
            .parse()
            .map_err(|_| format!("ops must be a whole number, got {a:?}"))?,
    };
    let trace = named_trace(&kind, ops, 7)
        .ok_or_else(|| format!("kind must be inference, mixed, small or growing, got {kind:?}"))?;
    for _ in 0..3 {
        let arena = Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default())
            .map_err(|e| e.to_string())?;
        let r = replay(&arena, &trace, &[], false).map_err(|e| e.to_string())?;
        println!("{kind}: {:.1} ns/op over {} ops", r.ns_per_op(), r.ops);
    }
    Ok(())
}
