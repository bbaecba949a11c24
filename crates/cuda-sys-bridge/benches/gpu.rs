//! The GPU benchmark (one command, one device call): four generated traces replayed through
//! the arena over device memory, the memory-pool allocator, raw `cuMemAlloc`/`cuMemFree`, and
//! `cuMemAllocAsync` on the default pool with an unlimited release threshold, all in this run.
//! Reports ns/op, the median of 5 passes over one allocator (the first pass includes the
//! allocator's growth from nothing; the median is the steady state a server sees), and peak
//! memory held / peak bytes requested (from one more pass on a fresh allocator that reads the
//! stats after every allocation). Without a GPU it says so and exits.
//!
//! Build here: `cargo bench -p cuda-sys-bridge --no-run`; run there: `<binary> [ops]`.

use cuda_arena_core::trace::synthetic::named_trace;
use cuda_arena_core::trace::{replay, TraceOp};
use cuda_arena_core::{Allocator, Arena, ArenaConfig, PlainAllocator};
use cuda_sys_bridge::{cuda_available, CudaBackend};
use std::sync::Arc;

type Make<'a> = Box<dyn Fn() -> Arc<dyn Allocator> + 'a>;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn measure(make: &Make<'_>, trace: &[TraceOp]) -> (f64, f64, u64) {
    let a = make();
    let times: Vec<f64> = (0..5)
        .map(|_| {
            let r = replay(&*a, trace, &[], false).expect("replay");
            assert_eq!(r.failed_allocs, 0, "the device ran out of memory");
            r.ns_per_op()
        })
        .collect();
    drop(a);
    let a = make();
    let r = replay(&*a, trace, &[], true).expect("replay");
    let ratio = r.peak_held as f64 / r.peak_requested.max(1) as f64;
    (median(times), ratio, r.peak_held)
}

fn main() {
    let ops: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    if !cuda_available() {
        println!("no CUDA driver or device here: nothing to measure");
        return;
    }
    let backend = Arc::new(CudaBackend::new().expect("backend"));
    let info = backend.device_info(0).expect("device 0");
    println!(
        "device 0: {} ({} MiB), {ops} ops per trace, median of 5 passes\n",
        info.name,
        info.total_memory >> 20
    );
    let makers: Vec<(&str, Make<'_>)> = vec![
        (
            "arena (device memory)",
            Box::new(|| {
                let raw = backend.device_memory(0).expect("raw");
                Arc::new(Arena::new(raw, ArenaConfig::default()).expect("arena"))
                    as Arc<dyn Allocator>
            }),
        ),
        (
            "mempool allocator",
            Box::new(|| {
                use cuda_arena_core::Backend;
                let cfg = ArenaConfig::from_pairs([("arena.use_cuda_mempool", "1")]).expect("cfg");
                backend.mempool(0, &cfg).expect("pool")
            }),
        ),
        (
            "cuMemAlloc/cuMemFree",
            Box::new(|| {
                Arc::new(PlainAllocator::new(backend.device_memory(0).expect("raw")))
                    as Arc<dyn Allocator>
            }),
        ),
        (
            "cuMemAllocAsync (default pool)",
            Box::new(|| {
                Arc::new(backend.default_pool(0).expect("default pool")) as Arc<dyn Allocator>
            }),
        ),
    ];
    println!("| trace | allocator | ns/op | vs cuMemAlloc | vs cuMemAllocAsync | peak held / requested |");
    println!("|---|---|---:|---:|---:|---:|");
    for kind in ["inference", "mixed", "small", "growing"] {
        let trace = named_trace(kind, ops, 7).expect("known trace");
        let results: Vec<(&str, (f64, f64, u64))> = makers
            .iter()
            .map(|(name, make)| (*name, measure(make, &trace)))
            .collect();
        let raw = results[2].1 .0;
        let asy = results[3].1 .0;
        for (name, (ns, ratio, _)) in &results {
            println!(
                "| {kind} | {name} | {ns:.1} | {:.1}x | {:.1}x | {ratio:.3} |",
                raw / ns,
                asy / ns
            );
        }
    }
}
