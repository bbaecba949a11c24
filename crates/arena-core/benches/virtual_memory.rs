//! `cargo bench -p cuda-arena-core --bench virtual_memory` (and `npm run bench`): the
//! virtual-memory mode (issue 14) against the region arena on the `virtual` backend with
//! 2 MiB pages, in the same run.
//!
//! - First it prints, per sample trace (the `cuda-arena replay --sample` traces: 100,000 ops,
//!   seed 1), peak held ÷ peak requested of both modes and the pages the new mode maps and
//!   unmaps in a warm pass: deterministic figures, the same on every machine.
//! - `vm_alloc_free_pair/<mode>/<size>`: one warm alloc+free pair, ns.
//! - `vm_trace_replay/<mode>/<trace>`: ns per op of a warm pass (the arena has replayed the
//!   trace once, as the GPU harness's timed passes follow its first pass).
//!
//! On `virtual` a map or unmap costs a few map updates; on a GPU it costs driver calls
//! (`scripts/gpu/vmm.sh` prints what one page costs there), so the pages a warm pass maps are
//! what decides the new mode's time on the device.

use criterion::{criterion_group, criterion_main, Criterion};
use cuda_arena_core::trace::synthetic::named_trace;
use cuda_arena_core::trace::{replay, TraceOp};
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, RawAllocator, VirtualMemory,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const TRACES: [&str; 4] = ["inference", "mixed", "small", "growing"];
const SIZES: [(&str, u64); 3] = [("256B", 256), ("64KiB", 64 << 10), ("4MiB", 4 << 20)];

fn arena(vm: bool) -> Arena<AddressSpaceAllocator> {
    let raw = AddressSpaceAllocator::default();
    if vm {
        let v: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
        Arena::with_virtual_memory(raw, v, ArenaConfig::default()).expect("arena")
    } else {
        Arena::new(raw, ArenaConfig::default()).expect("arena")
    }
}

fn mode(vm: bool) -> &'static str {
    if vm {
        "vm"
    } else {
        "region"
    }
}

/// Held ÷ requested of a first pass, and the raw calls (maps in the new mode) of the second.
fn memory_figures(trace: &[TraceOp], vm: bool) -> (f64, u64, u64) {
    let a = arena(vm);
    let first = replay(&a, trace, &[], true).expect("replays");
    let before = a.raw().raw_stats();
    replay(&a, trace, &[], false).expect("replays");
    let after = a.raw().raw_stats();
    (
        first.peak_held as f64 / first.peak_requested as f64,
        after.raw_allocs - before.raw_allocs,
        after.raw_frees - before.raw_frees,
    )
}

fn print_memory() {
    println!("held/requested on virtual, 2 MiB pages (sample traces, 100,000 ops, seed 1):");
    println!("| trace | region arena | virtual-memory mode | maps / unmaps in a warm pass |");
    println!("|---|---:|---:|---:|");
    for kind in TRACES {
        let trace = named_trace(kind, 100_000, 1).expect("known kind");
        let (region, _, _) = memory_figures(&trace, false);
        let (vm, maps, unmaps) = memory_figures(&trace, true);
        println!("| {kind} | {region:.4} | {vm:.4} | {maps} / {unmaps} |");
    }
}

fn vm_alloc_free_pair(c: &mut Criterion) {
    print_memory();
    let mut g = c.benchmark_group("vm_alloc_free_pair");
    for vm in [false, true] {
        for (name, size) in SIZES {
            let a = arena(vm);
            let p = a.alloc(size).expect("fits").expect("non-zero");
            a.free(p).expect("live");
            g.bench_function(format!("{}/{name}", mode(vm)), |b| {
                b.iter(|| {
                    let p = a.alloc(black_box(size)).expect("fits").expect("non-zero");
                    a.free(black_box(p)).expect("live");
                })
            });
        }
    }
    g.finish();
}

fn vm_trace_replay(c: &mut Criterion) {
    let mut g = c.benchmark_group("vm_trace_replay");
    g.sample_size(10);
    for kind in TRACES {
        let trace = named_trace(kind, 100_000, 1).expect("known kind");
        for vm in [false, true] {
            let a = arena(vm);
            replay(&a, &trace, &[], false).expect("warm-up pass");
            g.bench_function(format!("{}/{kind}", mode(vm)), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let r = replay(&a, &trace, &[], false).expect("replays");
                        total += Duration::from_nanos(r.elapsed_ns) / r.ops.max(1) as u32;
                    }
                    total
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, vm_alloc_free_pair, vm_trace_replay);
criterion_main!(benches);
