//! Issue 25, attacked: K sessions on host streams (some a host may destroy, as ONNX Runtime's,
//! some not) over a pool of threads, in the default mode, on seeded random operations. Whatever
//! the arena untags, merges, settles or unmaps, memory freed on stream S goes to another stream
//! (or to a call with no stream) only after S's work up to that free finished or the device was
//! waited for; live allocations never overlap; the arena stays consistent.

mod common;

use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, AddressSpaceVm, Allocator, Arena, ForeignStreams, SimEvents, Stream,
    StreamEvents, VirtualMemory,
};
use std::sync::Arc;

const STREAMS: usize = 6;
const THREADS: usize = 3;

/// A freed range and what was true at its free: its stream, how many times that stream's work
/// had been finished, and how many device-wide waits there had been.
#[derive(Debug, Clone, Copy)]
struct Freed {
    lo: u64,
    hi: u64,
    stream: usize,
    finished: u64,
    waits: u64,
    /// Events recorded on the stream before the free: one of those after it completing means
    /// the stream's work up to the free is done (the arena waited on it, or the test finished it).
    records: u64,
}

struct World {
    a: Arc<Arena<AddressSpaceAllocator>>,
    vm: AddressSpaceVm,
    sim: Arc<SimEvents>,
    streams: Vec<Arc<Stream>>,
    handles: Vec<u64>,
    finished: Vec<u64>,
    pool: Vec<Worker>,
}

impl World {
    fn new(seed: u64) -> Self {
        let sim = SimEvents::new();
        let events: Arc<dyn StreamEvents> = sim.clone();
        let hosted = ForeignStreams::with_events(Some(events));
        let raw = AddressSpaceAllocator::default().with_granularity(2 * MIB);
        let vm = raw.vm();
        let a = Arena::with_virtual_memory(raw, Arc::new(vm.clone()), config(&[])).expect("arena");
        let handles: Vec<u64> = (0..STREAMS as u64).map(|s| 0x1000 * (s + 1)).collect();
        let streams = handles
            .iter()
            .enumerate()
            .map(|(i, &h)| {
                let s = hosted.get(h).expect("a host stream");
                // Streams of even index are ONNX Runtime's: events only in their own calls.
                if (i as u64 + seed).is_multiple_of(2) {
                    s.free_events().expect("events").set_host_may_destroy();
                }
                Arc::new(s)
            })
            .collect();
        World {
            a: Arc::new(a),
            vm,
            sim,
            streams,
            handles,
            finished: vec![0; STREAMS],
            pool: (0..THREADS).map(|_| Worker::new()).collect(),
        }
    }

    /// Device-wide waits so far: event-settling waits and the virtual memory's own.
    fn waits(&self) -> u64 {
        self.sim.device_syncs() + self.vm.synchronizations() + self.vm.waiting_unmaps()
    }
}

/// Runs `ops` operations; returns how many times memory freed on one stream went to another
/// (or to no stream), and the device-wide waits.
fn run(seed: u64, ops: usize) -> (u64, u64) {
    let mut w = World::new(seed);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || xorshift(&mut x);
    // (address, size, stream or None, thread)
    let mut live: Vec<(u64, u64, Option<usize>)> = Vec::new();
    let mut freed: Vec<Freed> = Vec::new();
    let mut crossed = 0u64;
    for op in 0..ops {
        let r = next();
        match r % 10 {
            0..=4 => {
                let size = 256 << (next() % 17); // 256 B … 16 MiB
                let stream = (r % 7 != 0).then(|| (next() % STREAMS as u64) as usize);
                let thread = (next() % THREADS as u64) as usize;
                let a = w.a.clone();
                let s = stream.map(|i| w.streams[i].clone());
                let addr = w.pool[thread].run(move || match s {
                    Some(s) => {
                        if let Some(e) = s.free_events() {
                            // As the OrtAllocator view does at each AllocOnStream.
                            if e.host_may_destroy() {
                                e.cover_in_use();
                            }
                        }
                        a.alloc_on_stream(size, &s)
                    }
                    None => a.alloc(size),
                });
                let addr = addr.expect("fits").expect("non-zero");
                let (lo, hi) = (addr, addr + size);
                for &(p, n, _) in &live {
                    assert!(
                        hi <= p || p + n <= lo,
                        "op {op}: {lo:#x}+{size} overlaps a live one"
                    );
                }
                let waits = w.waits();
                freed.retain(|f| {
                    if f.hi <= lo || hi <= f.lo {
                        return true;
                    }
                    assert!(
                        stream == Some(f.stream)
                            || w.finished[f.stream] > f.finished
                            || w.sim.completed(w.handles[f.stream]) > f.records
                            || waits > f.waits,
                        "op {op} (seed {seed}): memory freed on stream {} went to {stream:?} \
                         before its work finished or the device was waited for",
                        f.stream
                    );
                    crossed += u64::from(stream != Some(f.stream));
                    false
                });
                live.push((addr, size, stream));
            }
            5..=7 if !live.is_empty() => {
                let i = (next() % live.len() as u64) as usize;
                let (addr, size, stream) = live.swap_remove(i);
                let thread = (next() % THREADS as u64) as usize;
                let a = w.a.clone();
                w.pool[thread].run(move || a.free(addr).expect("live"));
                if let Some(s) = stream {
                    freed.push(Freed {
                        lo: addr,
                        hi: addr + size,
                        stream: s,
                        finished: w.finished[s],
                        waits: w.waits(),
                        records: w.sim.records(w.handles[s]),
                    });
                } else {
                    // Memory of no stream is free at once (ORT's contract for a plain free).
                    freed.retain(|f| f.hi <= addr || addr + size <= f.lo);
                }
            }
            8 => {
                let s = (next() % STREAMS as u64) as usize;
                w.sim.finish(w.handles[s]);
                w.finished[s] += 1;
            }
            _ => {
                if op.is_multiple_of(50) {
                    w.a.check_invariants().expect("consistent");
                }
            }
        }
    }
    for (addr, _, _) in live {
        w.a.free(addr).expect("live");
    }
    w.a.check_invariants().expect("consistent");
    assert_eq!(w.a.stats().in_use, 0);
    (crossed, w.waits())
}

#[test]
fn k_sessions_on_random_operations_never_reuse_memory_before_its_streams_work_is_done() {
    let (mut crossed, mut waits) = (0, 0);
    for seed in 1..=12 {
        let (c, w) = run(seed, 1500);
        crossed += c;
        waits += w;
    }
    // The attack reaches what it attacks: memory crossed streams, and the device was waited for.
    eprintln!("{crossed} cross-stream reuses, {waits} device-wide waits");
    assert!(crossed > 100, "{crossed}");
    assert!(waits > 0);
}
