//! `cargo bench -p cuda-arena-core --bench threads`: thread scaling on `virtual`, the Rust
//! twin of the GPU harness's `replay_mt` (`scripts/gpu/bench/replay_mt.cpp`).
//!
//! N threads share one arena; each replays its own copy of a trace on its own stream (its own
//! id → address table), so the ops are the same at every N and only the sharing differs. One
//! fresh arena per (trace, N). Pass 0 starts from the empty arena (growth included); then timed
//! passes, each started for all threads at once and ended when the last thread is done, until
//! `BUDGET_S` seconds are spent (at least one). Aggregate Mops/s = N × ops ÷ pass wall time,
//! median over the timed passes; `held/req` = the arena's `TotalAllocated` at the end (it never
//! shrinks here, so that is its peak) ÷ (N × the trace's peak live requested bytes); `slow path
//! / alloc` = the timed passes' allocations that left the common path
//! ([`Arena::slow_allocations`]: the global lock, memory of another thread's part, new pages) ÷
//! their allocations.
//!
//! Traces (the GPU matrix's two): `small` (8 B – 64 KiB, at most 4,000 live) and `mixed` with
//! every size divided by 16 (16 B – 4 MiB, at most 2,000 live), `OPS` ops each (default
//! 131,072, as `run_mt_device.sh`).
//!
//! Environment: `THREADS` (default "1 2 4 8"), `TRACES` ("small mixed"), `OPS`, `BUDGET_S`
//! (default 2), `STREAMS` ("1", the default: each thread on a stream of its own that the host
//! owns, as `replay_mt`'s `CUstream`s, whose events complete at once since nothing runs on
//! `virtual`; "own": each on a `Stream::new()`, cuda-arena's own stream, which has no events, so
//! a chunk another thread's stream freed is that stream's until a reset; "own-events": each on
//! a `Stream::with_events`, as cuda-arena's own `CUstream`s on `cuda`; "0": plain `alloc`),
//! `MODES` ("regions pages": ORT's region arena, and the virtual-memory mode at 2 MiB pages),
//! `LOG=1` (each arena's regions or mapped extents and stats at the end, on stderr),
//! `CONF="k=v,..."` (config keys for the virtual-memory mode's arenas), `PRIVATE=1` (each
//! thread its own arena: what the machine gives threads that share nothing, the ceiling for
//! the shared arena's scaling; held/req, MaxInUse/req, regions and slow path then sum them).
//! `BENCH_JSON=path` appends one JSON object per row.

use cuda_arena_core::trace::synthetic::named_trace;
use cuda_arena_core::trace::TraceOp;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, ForeignStreams, SimEvents, Stream,
    StreamEvents, VirtualMemory,
};
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// One thread's copy of a trace: `(is_alloc, slot, size)` with slots numbered densely.
type Ops = Vec<(bool, u32, u64)>;

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// The trace `kind` as dense slots, sizes divided by `div` (rounded up); and its peak live
/// requested bytes.
fn load(kind: &str, ops: usize, div: u64) -> (Ops, usize, u64) {
    let trace = named_trace(kind, ops, 0x5eed).expect("known trace kind");
    let mut slot_of = std::collections::HashMap::new();
    let mut size_of: Vec<u64> = Vec::new();
    let (mut live, mut peak) = (0u64, 0u64);
    let mut out = Vec::with_capacity(trace.len());
    for op in trace {
        match op {
            TraceOp::Alloc { id, size, .. } | TraceOp::Reserve { id, size } => {
                let s = size.div_ceil(div).max(1);
                let slot = size_of.len() as u32;
                slot_of.insert(id, slot);
                size_of.push(s);
                live += s;
                peak = peak.max(live);
                out.push((true, slot, s));
            }
            TraceOp::Free { id } => {
                if let Some(slot) = slot_of.remove(&id) {
                    live -= size_of[slot as usize];
                    out.push((false, slot, 0));
                }
            }
        }
    }
    (out, size_of.len(), peak)
}

/// Replays `ops` once; frees what the trace leaves live (the prefix may end mid-way).
fn replay_once(
    arena: &Arena<AddressSpaceAllocator>,
    ops: &Ops,
    slots: &mut [u64],
    stream: Option<&Stream>,
) {
    for &(is_alloc, slot, size) in ops {
        let s = &mut slots[slot as usize];
        if is_alloc {
            let r = match stream {
                Some(st) => arena.alloc_on_stream(size, st),
                None => arena.alloc(size),
            };
            *s = r.ok().flatten().unwrap_or(0);
        } else if *s != 0 {
            arena.free(*s).expect("live");
            *s = 0;
        }
    }
}

struct Row {
    trace: String,
    threads: usize,
    agg_mops: f64,
    ns_per_op_thread: f64,
    first_pass_mops: f64,
    passes: usize,
    held_over_req: f64,
    max_in_use_over_req: f64,
    extensions: u64,
    rebalances: u64,
    /// Of which moved quota without waiting for a sub-arena another thread held.
    rebalances_in_part: u64,
    /// Of which borrowed from one other sub-arena alone.
    borrows: u64,
    /// Allocations of the timed passes that left the common path, per allocation.
    slow_per_alloc: f64,
}

/// One trace prepared for every thread count.
struct Case {
    kind: String,
    div: u64,
    ops: Arc<Ops>,
    n_slots: usize,
    peak: u64,
    budget_s: f64,
    streams: Streams,
    /// Virtual-memory mode.
    pages: bool,
    /// Each thread an arena of its own.
    private: bool,
}

/// The streams the threads allocate on.
#[derive(Clone, Copy, PartialEq)]
enum Streams {
    /// Plain `alloc`.
    None,
    /// Streams the host owns, as `replay_mt`'s `CUstream`s: each carries events, which
    /// complete at once here (no work runs on `virtual`), as on the GPU where the harness
    /// launches no kernels.
    Host,
    /// cuda-arena's own streams (`Stream::new`): ONNX Runtime's sync-id rule, no events, so
    /// a chunk one thread's stream freed serves another only after a reset.
    Own,
    /// cuda-arena's own streams with events (`Stream::with_events`), as its `CUstream`s on
    /// `cuda` (the Node binding's `createStream`): completing at once here, as `Host`.
    OwnEvents,
}

impl Streams {
    /// The `STREAMS` value that picks it.
    fn name(self) -> &'static str {
        match self {
            Streams::None => "0",
            Streams::Host => "1",
            Streams::Own => "own",
            Streams::OwnEvents => "own-events",
        }
    }
}

fn run(case: &Case, threads: usize) -> Row {
    let make = || {
        Arc::new(if case.pages {
            let raw = AddressSpaceAllocator::default().with_granularity(2 << 20);
            let vm: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
            {
                let extra = std::env::var("CONF").unwrap_or_default();
                let pairs = extra.split(',').filter_map(|kv| kv.split_once('='));
                let config = ArenaConfig::from_pairs(pairs).expect("CONF holds valid config pairs");
                Arena::with_virtual_memory(raw, vm, config).expect("arena")
            }
        } else {
            Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena")
        })
    };
    // One arena for all, or (`PRIVATE=1`) one each.
    let arenas: Vec<_> = if case.private {
        (0..threads).map(|_| make()).collect()
    } else {
        vec![make(); threads]
    };
    let slow = || arenas.iter().map(|a| a.slow_allocations()).sum::<u64>();
    let start = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let events: Arc<dyn StreamEvents> = SimEvents::immediate();
    let host_streams = Arc::new(ForeignStreams::with_events(Some(events)));
    let Case {
        ref kind,
        div,
        ref ops,
        n_slots,
        peak,
        budget_s,
        streams,
        pages,
        ..
    } = *case;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (arena, ops, start, done, stop, host_streams) = (
                arenas[t].clone(),
                ops.clone(),
                start.clone(),
                done.clone(),
                stop.clone(),
                host_streams.clone(),
            );
            std::thread::spawn(move || {
                // First touch by the owning thread, as replay_mt does.
                let ops: Ops = (*ops).clone();
                let mut slots = vec![0u64; n_slots];
                let stream = match streams {
                    Streams::None => None,
                    // Handles past the legacy and per-thread default streams' (1, 2), as a
                    // `CUstream` is.
                    Streams::Host => {
                        Some(host_streams.get(0x10_0000 + t as u64).expect("a handle"))
                    }
                    Streams::Own => Some(Stream::new()),
                    Streams::OwnEvents => Some(Stream::with_events(
                        0x20_0000 + t as u64,
                        host_streams.events().expect("events").clone(),
                    )),
                };
                loop {
                    start.wait();
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    replay_once(&arena, &ops, &mut slots, stream.as_ref());
                    for s in slots.iter_mut().filter(|s| **s != 0) {
                        arena.free(*s).expect("live");
                        *s = 0;
                    }
                    done.wait();
                }
            })
        })
        .collect();
    let pass = || {
        let t0 = Instant::now();
        start.wait();
        done.wait();
        t0.elapsed().as_secs_f64()
    };
    let began = Instant::now();
    let first = pass();
    let slow_before = slow();
    let mut walls = Vec::new();
    loop {
        walls.push(pass());
        if began.elapsed().as_secs_f64() + walls[walls.len() - 1] > budget_s || walls.len() >= 50 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    start.wait();
    for h in handles {
        h.join().expect("bench thread");
    }
    let arena = &arenas[0];
    let mut stats = arena.stats();
    let mut rebalances = arena.quota_rebalances();
    let mut in_part = arena.quota_rebalances_in_part();
    let mut borrows = arena.quota_borrows();
    // Private arenas: their sums (MaxInUse so is the sum of each one's peak).
    for a in &arenas[1..] {
        if !Arc::ptr_eq(a, arena) {
            let s = a.stats();
            stats.total_allocated += s.total_allocated;
            stats.max_in_use += s.max_in_use;
            stats.num_arena_extensions += s.num_arena_extensions;
            rebalances += a.quota_rebalances();
            in_part += a.quota_rebalances_in_part();
            borrows += a.quota_borrows();
        }
    }
    let allocs_per_pass = (threads * ops.iter().filter(|op| op.0).count()) as f64;
    let slow_per_alloc = (slow() - slow_before) as f64 / (walls.len() as f64 * allocs_per_pass);
    // `LOG=1`: each mapped extent or region at the end, and the stats (the first arena's).
    if std::env::var("LOG").is_ok() {
        let log = arena.memory_log();
        for r in &log.regions {
            let used: u64 = r.chunks.iter().filter(|c| c.in_use).map(|c| c.size).sum();
            eprintln!(
                "region {} base {:#x} size {} chunks {} in_use {}",
                r.id,
                r.base,
                r.size,
                r.chunks.len(),
                used
            );
        }
        eprintln!("{stats:?}");
    }
    walls.sort_by(f64::total_cmp);
    let wall = walls[walls.len() / 2];
    let total_ops = (threads * ops.len()) as f64;
    let req = (threads as u64 * peak) as f64;
    Row {
        trace: format!(
            "{}{}",
            if div > 1 {
                format!("{kind}/{div}")
            } else {
                kind.to_string()
            },
            if pages { " (pages)" } else { "" }
        ),
        threads,
        agg_mops: total_ops / wall / 1e6,
        ns_per_op_thread: wall * 1e9 / ops.len() as f64,
        first_pass_mops: total_ops / first / 1e6,
        passes: walls.len(),
        held_over_req: stats.total_allocated as f64 / req,
        max_in_use_over_req: stats.max_in_use as f64 / req,
        extensions: stats.num_arena_extensions,
        rebalances,
        rebalances_in_part: in_part,
        borrows,
        slow_per_alloc,
    }
}

fn main() {
    let threads: Vec<usize> = env_or("THREADS", "1 2 4 8")
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    let traces = env_or("TRACES", "small mixed");
    let ops: usize = env_or("OPS", "131072").parse().expect("OPS is a number");
    let budget_s: f64 = env_or("BUDGET_S", "2")
        .parse()
        .expect("BUDGET_S is a number");
    let streams = match env_or("STREAMS", "1").as_str() {
        "0" => Streams::None,
        "own" => Streams::Own,
        "own-events" => Streams::OwnEvents,
        "1" | "host" => Streams::Host,
        other => panic!("STREAMS is 1 (host streams), own, own-events or 0, not {other:?}"),
    };
    let private = match env_or("PRIVATE", "0").as_str() {
        "0" => false,
        "1" => true,
        other => panic!("PRIVATE is 0 or 1, not {other:?}"),
    };
    let modes = env_or("MODES", "regions pages");
    let json = std::env::var("BENCH_JSON").ok();
    println!(
        "thread scaling on virtual, {} ({ops} ops per thread)",
        match streams {
            Streams::Host => "each thread on its own host stream (events complete at once)",
            Streams::Own => "each thread on its own cuda-arena stream (no events)",
            Streams::OwnEvents => {
                "each thread on its own cuda-arena stream with events (complete at once)"
            }
            Streams::None => "no streams",
        }
    );
    println!("| trace | threads | agg Mops/s | vs 1 thread | ns/op/thread | pass 0 Mops/s | passes | held/req | MaxInUse/req | regions | quota rebalances (in part, borrowed) | slow path / alloc |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let cases = traces.split_whitespace().flat_map(|kind| {
        modes
            .split_whitespace()
            .map(move |m| (kind.to_string(), m == "pages"))
    });
    for (kind, pages) in cases {
        let div = if kind == "mixed" { 16 } else { 1 };
        let (trace, n_slots, peak) = load(&kind, ops, div);
        let case = Case {
            kind,
            div,
            ops: Arc::new(trace),
            n_slots,
            peak,
            budget_s,
            streams,
            pages,
            private,
        };
        let mut base = None;
        for &n in &threads {
            let r = run(&case, n);
            let one = *base.get_or_insert(r.agg_mops);
            println!(
                "| {} | {} | {:.3} | {:.2}x | {:.1} | {:.3} | {} | {:.3} | {:.3} | {} | {} ({}, {}) | {:.4} |",
                r.trace,
                r.threads,
                r.agg_mops,
                r.agg_mops / one,
                r.ns_per_op_thread,
                r.first_pass_mops,
                r.passes,
                r.held_over_req,
                r.max_in_use_over_req,
                r.extensions,
                r.rebalances,
                r.rebalances_in_part,
                r.borrows,
                r.slow_per_alloc
            );
            if let Some(path) = &json {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("BENCH_JSON");
                writeln!(
                    f,
                    "{{\"trace\":\"{}\",\"threads\":{},\"streams\":\"{}\",\"agg_mops\":{:.4},\"ns_per_op_thread\":{:.2},\"first_pass_mops\":{:.4},\"passes\":{},\"held_over_req\":{:.4},\"max_in_use_over_req\":{:.4},\"regions\":{},\"rebalances\":{},\"rebalances_in_part\":{},\"borrows\":{},\"slow_per_alloc\":{:.5}}}",
                    r.trace, r.threads, streams.name(), r.agg_mops, r.ns_per_op_thread, r.first_pass_mops, r.passes, r.held_over_req, r.max_in_use_over_req, r.extensions, r.rebalances, r.rebalances_in_part, r.borrows, r.slow_per_alloc
                )
                .expect("write");
            }
        }
    }
}
