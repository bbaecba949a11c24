//! Replays traces through the region arena and the virtual-memory arena on the `virtual`
//! backend and prints held/requested, driver calls, ns/op and allocations off the common path
//! (`slow`, [`Arena::slow_allocations`]) per pass, for choosing the
//! virtual-memory mode's defaults (docs/virtual-memory.md):
//!
//! `cargo run --release -p cuda-arena-core --example vm_replay -- TRACE... [-- k=v ...]`
//!
//! A trace is a sample name (`inference`, `mixed`, `small`, `growing`: the `--sample` traces
//! of `cuda-arena replay`), a `GPUTRC01` file of the GPU benchmark (`.trc`, from
//! `../shared/bench/gen_traces.py`), a PyTorch memory snapshot (`.pickle`) or a JSON-lines
//! trace. Pairs after `--` are added to the virtual-memory arena's config (and to the region
//! arena's, but for `arena.use_virtual_memory`). Each config replays the trace three times in
//! one arena: the first pass measures memory (as the GPU benchmark's pass 0 does), the next
//! two are warm (`SHOW_PASSES=n`: n passes in all; `HELD_EVERY_PASS=1`: held/req of every pass,
//! over the first pass's peak requested; `STREAM_TURNS=1`: every odd pass allocates everything
//! on one cuda-arena stream instead, a stream and no stream taking turns; `HOST_STREAM=immediate`
//! or `pending`: every pass allocates on one host-owned stream with simulated events, its work
//! done as soon as an event is recorded or only once waited for, as the GPU benchmark's replays
//! allocate through the C ABI on their one stream). With `RATIO=n`, prints instead the median
//! warm ns/op of both modes over `n` interleaved passes and their ratio; with `DUMP=dir`, writes
//! each trace as text there; with `WARM=vm` (or `WARM=region`), replays one pass in that mode
//! and then `PASSES` (default 1) warm ones in `warm_passes`, for profilers
//! (`valgrind --tool=callgrind --toggle-collect='*warm_passes*'` counts the warm passes alone).
use cuda_arena_core::trace::trace_format::parse_trace_bytes;
use cuda_arena_core::trace::{replay, TraceOp};
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, RawAllocator, Stream, VirtualMemory,
};
use std::sync::Arc;

/// Reads a `GPUTRC01` trace (layout in `gen_traces.py`): 64-byte header, then 16-byte
/// records `u32 id, u8 kind, u8 stream, u16 pad, u64 size`.
fn read_trc(bytes: &[u8]) -> Result<Vec<TraceOp>, String> {
    if bytes.len() < 64 || &bytes[..8] != b"GPUTRC01" {
        return Err("not a GPUTRC01 trace".into());
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let n = u64_at(16) as usize;
    let recs = &bytes[64..];
    if recs.len() < n * 16 {
        return Err("short trace".into());
    }
    Ok((0..n)
        .map(|i| {
            let r = &recs[i * 16..i * 16 + 16];
            let id = u64::from(u32::from_le_bytes([r[0], r[1], r[2], r[3]])) + 1;
            let mut b = [0u8; 8];
            b.copy_from_slice(&r[8..16]);
            if r[4] == 0 {
                TraceOp::Alloc {
                    id,
                    size: u64::from_le_bytes(b),
                    stream: u32::from(r[5]),
                }
            } else {
                TraceOp::Free { id }
            }
        })
        .collect())
}

fn load(name: &str) -> Result<Vec<TraceOp>, String> {
    if let Some(t) = cuda_arena_core::trace::synthetic::named_trace(name, 100_000, 1) {
        return Ok(t);
    }
    let bytes = std::fs::read(name).map_err(|e| format!("{name}: {e}"))?;
    if name.ends_with(".trc") {
        return read_trc(&bytes);
    }
    if cuda_arena_core::trace::torch_snapshot::looks_like_pickle(&bytes) {
        let t = cuda_arena_core::trace::torch_snapshot::read_snapshot(&bytes, None)
            .map_err(|e| format!("{name}: {e}"))?;
        return Ok(t.ops);
    }
    parse_trace_bytes(&bytes, false)
        .map(|t| t.ops)
        .map_err(|e| format!("{name}: {e}"))
}

fn streams_for(trace: &[TraceOp]) -> Vec<Stream> {
    let max = trace
        .iter()
        .map(|op| match op {
            TraceOp::Alloc { stream, .. } => *stream,
            _ => 0,
        })
        .max()
        .unwrap_or(0);
    (0..max).map(|_| Stream::new()).collect()
}

/// Counts the bytes mapped and unmapped through it (the driver's work is per page).
#[derive(Debug)]
struct Counting {
    inner: cuda_arena_core::AddressSpaceVm,
    mapped: std::sync::atomic::AtomicU64,
    unmapped: std::sync::atomic::AtomicU64,
}

impl VirtualMemory for Counting {
    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }
    fn total_memory(&self) -> u64 {
        self.inner.total_memory()
    }
    fn reserve(&self, size: u64) -> cuda_arena_core::Result<u64> {
        self.inner.reserve(size)
    }
    fn release(&self, base: u64, size: u64) -> cuda_arena_core::Result<()> {
        self.inner.release(base, size)
    }
    fn map(&self, addr: u64, len: u64) -> cuda_arena_core::Result<()> {
        self.inner.map(addr, len)?;
        self.mapped
            .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn unmap(&self, addr: u64, len: u64) -> cuda_arena_core::Result<()> {
        self.inner.unmap(addr, len)?;
        self.unmapped
            .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn synchronize(&self) -> cuda_arena_core::Result<()> {
        self.inner.synchronize()
    }
    fn synchronizations(&self) -> u64 {
        self.inner.synchronizations()
    }
    fn mapped_bytes(&self) -> u64 {
        self.inner.mapped_bytes()
    }
    fn info(&self) -> cuda_arena_core::MemoryInfo {
        VirtualMemory::info(&self.inner)
    }
}

fn run(name: &str, trace: &[TraceOp], pairs: &[(String, String)], vm: bool) -> Result<(), String> {
    let mut cfg = ArenaConfig::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| e.to_string())?;
    cfg.use_virtual_memory = vm;
    let raw = AddressSpaceAllocator::default();
    let counting = Arc::new(Counting {
        inner: raw.vm(),
        mapped: Default::default(),
        unmapped: Default::default(),
    });
    let arena = if vm {
        let v: Arc<dyn VirtualMemory> = counting.clone();
        Arena::with_virtual_memory(raw.clone(), v, cfg).map_err(|e| e.to_string())?
    } else {
        Arena::new(raw.clone(), cfg).map_err(|e| e.to_string())?
    };
    let streams = streams_for(trace);
    let mut line = format!(
        "{:<18} {:<6}",
        name.trim_start_matches("snapshot."),
        if vm { "vm" } else { "region" }
    );
    let passes: u32 = std::env::var("SHOW_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let every = std::env::var("HELD_EVERY_PASS").is_ok_and(|v| v == "1");
    let turns = std::env::var("STREAM_TURNS").is_ok_and(|v| v == "1");
    let on_stream: Vec<TraceOp> = trace
        .iter()
        .map(|op| match *op {
            TraceOp::Alloc { id, size, .. } => TraceOp::Alloc {
                id,
                size,
                stream: 1,
            },
            other => other,
        })
        .collect();
    let one_stream = [Stream::new()];
    // HOST_STREAM=immediate|pending: every op on one host-owned stream with simulated events
    // (the GPU harness's one CUstream, its work done at once or only once waited for), as the
    // C ABI sees it.
    let foreign = match std::env::var("HOST_STREAM").ok().as_deref() {
        None => None,
        Some("immediate") => Some(cuda_arena_core::SimEvents::immediate()),
        Some("pending") => Some(cuda_arena_core::SimEvents::new()),
        Some(other) => return Err(format!("HOST_STREAM={other}: immediate or pending")),
    }
    .map(|sim| {
        let events: Arc<dyn cuda_arena_core::StreamEvents> = sim;
        cuda_arena_core::ForeignStreams::with_events(Some(events))
    });
    let host_stream = match &foreign {
        Some(f) => Some([f.get(0x5000).map_err(|e| e.to_string())?]),
        None => None,
    };
    let mut peak_req = 0u64;
    for pass in 0..passes.max(1) {
        let (trace, streams) = if let Some(h) = &host_stream {
            (&on_stream[..], &h[..])
        } else if turns && pass % 2 == 1 {
            (&on_stream[..], &one_stream[..])
        } else {
            (trace, &streams[..])
        };
        let before = raw.raw_stats();
        let slow_before = arena.slow_allocations();
        let pages_before = (
            counting.mapped.load(std::sync::atomic::Ordering::Relaxed),
            counting.unmapped.load(std::sync::atomic::Ordering::Relaxed),
        );
        let r = replay(&arena, trace, streams, pass == 0 || every).map_err(|e| e.to_string())?;
        if pass == 0 {
            peak_req = r.peak_requested.max(1);
        }
        let after = raw.raw_stats();
        let pages = (
            (counting.mapped.load(std::sync::atomic::Ordering::Relaxed) - pages_before.0) >> 21,
            (counting.unmapped.load(std::sync::atomic::Ordering::Relaxed) - pages_before.1) >> 21,
        );
        if pass == 0 {
            line += &format!(
                " held/req {:.4} (held {:.0} MiB, req {:.0} MiB, in use {:.0} MiB)",
                r.peak_held as f64 / r.peak_requested.max(1) as f64,
                r.peak_held as f64 / 1048576.0,
                r.peak_requested as f64 / 1048576.0,
                arena.stats().max_in_use as f64 / 1048576.0,
            );
        }
        if every && pass > 0 {
            // Held in this pass over the first pass's peak requested (the passes repeat it).
            line += &format!(
                " | p{pass} held/req {:.4}",
                r.peak_held as f64 / peak_req as f64
            );
        }
        line += &format!(
            " | p{pass} {:.0} ns/op maps {}/{}p unmaps {}/{}p slow {}",
            r.ns_per_op(),
            after.raw_allocs - before.raw_allocs,
            pages.0,
            after.raw_frees - before.raw_frees,
            pages.1,
            arena.slow_allocations() - slow_before
        );
    }
    arena.check_invariants()?;
    let s = arena.stats();
    line += &format!(" | extents {}", s.num_arena_extensions);
    println!("{line}");
    Ok(())
}

/// Median warm ns/op of the region arena and the virtual-memory arena over `rounds` passes
/// each, interleaved in one process (a warm-up pass each first), so both see the same machine.
fn ratio(
    name: &str,
    trace: &[TraceOp],
    pairs: &[(String, String)],
    rounds: usize,
) -> Result<(), String> {
    if rounds == 0 {
        return Err("RATIO needs at least one round".into());
    }
    let mut cfg = ArenaConfig::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| e.to_string())?;
    cfg.use_virtual_memory = false;
    let raw = AddressSpaceAllocator::default();
    let region = Arena::new(raw, cfg.clone()).map_err(|e| e.to_string())?;
    let raw = AddressSpaceAllocator::default();
    let v: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    cfg.use_virtual_memory = true;
    let paged = Arena::with_virtual_memory(raw, v, cfg).map_err(|e| e.to_string())?;
    let streams = streams_for(trace);
    let pass = |a: &dyn Allocator| replay(a, trace, &streams, false).map(|r| r.ns_per_op());
    pass(&region).map_err(|e| e.to_string())?;
    pass(&paged).map_err(|e| e.to_string())?;
    let (mut r, mut p) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        r.push(pass(&region).map_err(|e| e.to_string())?);
        p.push(pass(&paged).map_err(|e| e.to_string())?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (r, p) = (median(&mut r), median(&mut p));
    println!(
        "{:<24} region {r:6.1} ns/op  vm {p:6.1} ns/op  vm/region {:.3}",
        name.trim_start_matches("snapshot."),
        p / r
    );
    Ok(())
}

/// `WARM=mode`: one pass to warm the arena up, then `passes` warm ones in [`warm_passes`].
fn warm(
    trace: &[TraceOp],
    pairs: &[(String, String)],
    vm: bool,
    passes: usize,
) -> Result<(), String> {
    let mut cfg = ArenaConfig::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| e.to_string())?;
    cfg.use_virtual_memory = vm;
    let raw = AddressSpaceAllocator::default();
    let arena = if vm {
        let v: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
        Arena::with_virtual_memory(raw, v, cfg).map_err(|e| e.to_string())?
    } else {
        Arena::new(raw, cfg).map_err(|e| e.to_string())?
    };
    let streams = streams_for(trace);
    replay(&arena, trace, &streams, false).map_err(|e| e.to_string())?;
    let ns = warm_passes(&arena, trace, &streams, passes)?;
    // Free chunks halfway through a warm pass: what the bins hold on the way.
    let half = &trace[..trace.len() / 2];
    replay(&arena, half, &streams, false).map_err(|e| e.to_string())?;
    let log = arena.memory_log();
    let chunks = log.regions.iter().flat_map(|r| &r.chunks);
    let free = chunks.filter(|c| !c.in_use).count();
    println!("{passes} warm pass(es): {ns:.1} ns/op; {free} free chunks halfway through a pass");
    Ok(())
}

/// The warm passes alone, out of line so a profiler can count just them.
#[inline(never)]
fn warm_passes(
    arena: &dyn Allocator,
    trace: &[TraceOp],
    streams: &[Stream],
    passes: usize,
) -> Result<f64, String> {
    let mut ns = 0.0;
    for _ in 0..passes {
        ns = replay(arena, trace, streams, false)
            .map_err(|e| e.to_string())?
            .ns_per_op();
    }
    Ok(ns)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let pairs: Vec<(String, String)> = args[split.min(args.len())..]
        .iter()
        .skip(1)
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into())))
        .collect();
    let only = std::env::var("ONLY").unwrap_or_default();
    for name in &args[..split] {
        let trace = load(name)?;
        if let Ok(dir) = std::env::var("DUMP") {
            let short = name.rsplit('/').next().unwrap_or(name);
            let mut out = String::new();
            for op in &trace {
                match op {
                    TraceOp::Alloc { id, size, stream } => {
                        out += &format!("a {id} {size} {stream}\n")
                    }
                    TraceOp::Free { id } => out += &format!("f {id}\n"),
                    _ => out += "x\n",
                }
            }
            std::fs::write(format!("{dir}/{short}.txt"), out).map_err(|e| e.to_string())?;
            continue;
        }
        let short = name.rsplit('/').next().unwrap_or(name);
        if let Ok(mode) = std::env::var("WARM") {
            let passes = std::env::var("PASSES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            warm(&trace, &pairs, mode == "vm", passes)?;
            continue;
        }
        if let Some(rounds) = std::env::var("RATIO").ok().and_then(|v| v.parse().ok()) {
            ratio(short, &trace, &pairs, rounds)?;
            continue;
        }
        if only != "vm" {
            run(short, &trace, &pairs, false)?;
        }
        if only != "region" {
            run(short, &trace, &pairs, true)?;
        }
    }
    Ok(())
}
