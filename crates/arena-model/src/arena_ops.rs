//! The `arena_ops` target: bytes decoded into an allocator (the BFC arena, in its region or
//! its virtual-memory mode, the arena without streams, the memory-pool stand-in or the plain
//! allocator) over the `virtual` or `host` raw allocator with small limits, and a sequence of
//! operations on it, each checked against a shadow model of what must hold. In
//! virtual-memory mode (issue 14) also: chunks in use lie in mapped pages and the backend
//! counts what the arena mapped (the arena's own invariants), a shrink leaves no wholly free
//! page mapped, nothing is mapped once everything is freed and shrunk, and on `host` the bytes
//! of live allocations survive the unmapping of the pages around them.
//!
//! The same model runs the operations `tests/model.rs` generates, there also with each
//! allocation, reserve and free made on one of a few threads ([`run_ops_on_threads`]), so
//! frees, stream rules, out-of-memory paths and stats cross the arena's per-thread sub-arenas.
//!
//! Here the setup, the operations and the model's state; decoding bytes in
//! `arena_ops/decode.rs`, each operation in `arena_ops/steps.rs`, the checks after each in
//! `arena_ops/checks.rs`, the threads that make calls in `arena_ops/workers.rs`.

use crate::Bytes;
use cuda_arena_core::types::sizes::round_up_256;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, AllocatorStats, Arena, ArenaConfig, ArenaError, DeviceLimits,
    HostAllocator, MemoryLog, PlainAllocator, PoolAllocator, RawAllocator, Stream, VirtualMemory,
};
use std::sync::Arc;
use workers::Worker;

mod checks;
mod decode;
mod steps;
mod workers;

pub use decode::decode_ops;

/// Streams an input can use.
pub const STREAMS: usize = 3;
/// Operations decoded from one input at most, so every input runs in bounded time.
const MAX_OPS: usize = 1024;
/// Bytes of the pattern written at each end of an allocation on `host`.
const PATTERN: u64 = 32;
/// The most real memory a `host` input may hold.
const HOST_TOTAL_MAX: u64 = 64 << 20;

/// Which allocator an input drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The BFC arena.
    Arena,
    /// The BFC arena without `alloc_on_stream` (ORT's pinned arena).
    ArenaWithoutStreams,
    /// The memory-pool stand-in (`arena.use_cuda_mempool=1` without CUDA).
    Pool,
    /// The plain allocator (read-only memory).
    Plain,
}

/// The raw allocator under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Addresses only.
    Virtual,
    /// Real memory, written and read back.
    Host,
}

/// What an input sets up before its operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The allocator.
    pub kind: Kind,
    /// The raw allocator.
    pub backend: Backend,
    /// Its `arena.*` config, as pairs (always valid).
    pub pairs: Vec<(String, String)>,
    /// The simulated device's limits.
    pub limits: DeviceLimits,
    /// End by retiring the allocator with its allocations live, instead of freeing them.
    pub retire: bool,
    /// An arena in virtual-memory mode over a device of this mapping granularity (its
    /// `arena.vm_*` keys are in `pairs`); `None` for the region arena and the others.
    pub vm_granularity: Option<u64>,
}

/// One operation; indices pick among the live allocations or the streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `alloc`, or `alloc_on_stream` on a stream.
    Alloc {
        /// Bytes.
        size: u64,
        /// Stream index.
        stream: Option<usize>,
    },
    /// `reserve`.
    Reserve(u64),
    /// Free a live allocation.
    Free(usize),
    /// A free the allocator must refuse: 0 inside a live allocation, 1 already freed,
    /// 2 never handed out, 3 near the top of the address space.
    FreeBogus {
        /// Which allocation or address.
        pick: usize,
        /// Which kind of bad address.
        kind: u8,
    },
    /// `shrink`.
    Shrink,
    /// Stream `to` waits on an event recorded on `from`.
    Sync {
        /// Producer.
        from: usize,
        /// Waiter.
        to: usize,
    },
    /// `reset_chunks_using_stream`.
    Reset(usize),
    /// Drop a stream (the allocator resets its memory) and make a new one in its place.
    ReleaseStream(usize),
    /// A copy into or out of a live allocation: 0 read back, 1 a range past its end (refused),
    /// 2 write a new pattern, 3 fill.
    Access {
        /// Which allocation.
        pick: usize,
        /// Which access.
        kind: u8,
    },
}

/// What the inputs exercised, so a test can show the target reaches every path it checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpsTally {
    /// Operations run.
    pub ops: u64,
    /// Allocations and reserves that succeeded.
    pub allocs: u64,
    /// Calls refused with `ERR_ARENA_OUT_OF_MEMORY`.
    pub out_of_memory: u64,
    /// Failed calls that handed free regions back first (DESIGN decision 7).
    pub released_on_failure: u64,
    /// Successful calls that handed free regions back first.
    pub released_then_succeeded: u64,
    /// Arena memory freed on one stream and taken by another after a wait.
    pub cross_stream_reuse: u64,
    /// Blocks the pool handed out again from its cache.
    pub pool_reuse: u64,
    /// Bad frees refused.
    pub refused_frees: u64,
    /// Copies past the end of an allocation refused.
    pub refused_accesses: u64,
    /// Patterns read back from host memory.
    pub host_read_backs: u64,
    /// Inputs that ended by retiring the allocator.
    pub retired: u64,
    /// Bytes of pages a virtual-memory arena unmapped (headroom, threshold, shrink, decision 7).
    pub vm_bytes_unmapped: u64,
}

impl OpsTally {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &OpsTally) {
        self.ops += other.ops;
        self.allocs += other.allocs;
        self.out_of_memory += other.out_of_memory;
        self.released_on_failure += other.released_on_failure;
        self.released_then_succeeded += other.released_then_succeeded;
        self.cross_stream_reuse += other.cross_stream_reuse;
        self.pool_reuse += other.pool_reuse;
        self.refused_frees += other.refused_frees;
        self.refused_accesses += other.refused_accesses;
        self.host_read_backs += other.host_read_backs;
        self.retired += other.retired;
        self.vm_bytes_unmapped += other.vm_bytes_unmapped;
    }
}

/// The `arena_ops` target: decodes `data` ([`decode_ops`]) and runs it ([`run_ops`]),
/// panicking with the first broken invariant. Returns what it exercised.
pub fn arena_ops(data: &[u8]) -> OpsTally {
    let (setup, ops) = decode_ops(data);
    match run_ops(&setup, &ops) {
        Ok(tally) => tally,
        Err(e) => panic!("{e}\nsetup: {setup:?}"),
    }
}

/// Runs `ops` on the allocator `setup` describes, checking the model after every one, then
/// frees everything (or retires the allocator) and checks every byte went back. Every call is
/// made on this thread.
pub fn run_ops(setup: &Setup, ops: &[Op]) -> Result<OpsTally, String> {
    let on_this_thread: Vec<(Op, usize)> = ops.iter().map(|&op| (op, 0)).collect();
    run_ops_on_threads(setup, &on_this_thread, 0)
}

/// [`run_ops`] with `threads` threads of their own: each op's allocation, reserve or free is
/// made on thread `t % threads` of its `(op, t)`, one call at a time, and the model and every
/// check stay the same (the arena gives each thread a sub-arena, so memory crosses them).
/// Other calls, and the frees at the end, are made on this thread. `threads` 0 is [`run_ops`].
pub fn run_ops_on_threads(
    setup: &Setup,
    ops: &[(Op, usize)],
    threads: usize,
) -> Result<OpsTally, String> {
    let mut model = Model::new(setup, threads)?;
    let ran = ops.iter().enumerate().try_for_each(|(i, (op, t))| {
        model
            .apply(op, *t)
            .map_err(|e| format!("op {i} {op:?} on thread {t}: {e}"))
    });
    match ran {
        Ok(()) => model.finish().map_err(|e| format!("at the end: {e}")),
        Err(e) => {
            model.stop_workers()?;
            Err(e)
        }
    }
}

type Raw = Arc<dyn RawAllocator>;

#[derive(Debug)]
enum Subject {
    Arena(Arena<Raw>),
    Pool(PoolAllocator<Raw>),
    Plain(PlainAllocator<Raw>),
}

impl Subject {
    fn get(&self) -> &dyn Allocator {
        match self {
            Subject::Arena(a) => a,
            Subject::Pool(p) => p,
            Subject::Plain(p) => p,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Live {
    addr: u64,
    requested: u64,
    allocated: u64,
    reserve: bool,
    /// Stream index + 1 the memory is tagged with, 0 for none.
    stream: usize,
    sync_id: u64,
    /// Seed of the pattern at its ends (host).
    tag: u8,
}

/// Memory freed while tagged with a stream: another stream may only get it back under the
/// allocator's rule.
#[derive(Debug, Clone, Copy)]
struct Freed {
    start: u64,
    end: u64,
    stream: usize,
    sync_id: u64,
}

/// Stats the model predicts exactly.
#[derive(Debug, Default)]
struct Expect {
    num_allocs: u64,
    num_reserves: u64,
    max_in_use: u64,
    max_alloc_size: u64,
}

struct Model {
    /// Shared with the workers, which call it from their threads.
    subject: Arc<Subject>,
    /// Where allocations, reserves and frees are made: none, this thread; else the op's
    /// thread among these.
    workers: Vec<Worker>,
    raw: Raw,
    /// The virtual-memory form under an arena in virtual-memory mode.
    vm: Option<Arc<dyn VirtualMemory>>,
    kind: Kind,
    host: bool,
    retire: bool,
    config: ArenaConfig,
    streams: Vec<Stream>,
    live: Vec<Live>,
    freed: Vec<Freed>,
    expect: Expect,
    next_tag: u8,
    tally: OpsTally,
}

fn regions_removed(before: &MemoryLog, after: &MemoryLog) -> Vec<(u64, u64, u64)> {
    before
        .regions
        .iter()
        .filter(|r| !after.regions.iter().any(|a| a.id == r.id))
        .map(|r| (r.id, r.base, r.size))
        .collect()
}

/// Byte `i` of the pattern with seed `tag` (distinct at each offset, so a shifted or
/// overlapping copy shows).
fn pattern(tag: u8, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len)
        .map(|i| {
            tag.wrapping_mul(31)
                .wrapping_add(i as u8)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

fn code_of<T>(r: &Result<T, ArenaError>) -> Option<&'static str> {
    r.as_ref().err().map(ArenaError::code)
}

impl Model {
    fn new(setup: &Setup, threads: usize) -> Result<Self, String> {
        let config =
            ArenaConfig::from_pairs(setup.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| format!("the decoded config is rejected: {e}"))?;
        let (raw, vm): (Raw, Option<Arc<dyn VirtualMemory>>) = match setup.backend {
            Backend::Virtual => {
                let v = AddressSpaceAllocator::new(setup.limits)
                    .with_granularity(setup.vm_granularity.unwrap_or(4096));
                let vm: Arc<dyn VirtualMemory> = Arc::new(v.vm());
                (Arc::new(v), Some(vm))
            }
            Backend::Host => {
                let h = HostAllocator::new(setup.limits);
                let vm: Arc<dyn VirtualMemory> = Arc::new(h.vm());
                (Arc::new(h), Some(vm))
            }
        };
        let vm = vm.filter(|_| setup.vm_granularity.is_some());
        let subject = match setup.kind {
            Kind::Arena | Kind::ArenaWithoutStreams => {
                let a = match &vm {
                    Some(vm) => Arena::with_virtual_memory(raw.clone(), vm.clone(), config.clone()),
                    None => Arena::new(raw.clone(), config.clone()),
                }
                .map_err(|e| e.to_string())?;
                Subject::Arena(if setup.kind == Kind::Arena {
                    a
                } else {
                    a.without_streams()
                })
            }
            Kind::Pool => Subject::Pool(PoolAllocator::new(raw.clone(), &config)),
            Kind::Plain => Subject::Plain(PlainAllocator::new(raw.clone())),
        };
        Ok(Model {
            subject: Arc::new(subject),
            workers: (0..threads).map(|_| Worker::new()).collect(),
            raw,
            vm,
            kind: setup.kind,
            host: setup.backend == Backend::Host,
            retire: setup.retire,
            config,
            streams: (0..STREAMS).map(|_| Stream::new()).collect(),
            live: Vec::new(),
            freed: Vec::new(),
            expect: Expect::default(),
            next_tag: 1,
            tally: OpsTally::default(),
        })
    }

    fn is_arena(&self) -> bool {
        matches!(*self.subject, Subject::Arena(_))
    }

    fn a(&self) -> &dyn Allocator {
        self.subject.get()
    }

    fn outstanding(&self) -> u64 {
        self.raw.raw_stats().raw_bytes_outstanding
    }

    /// Applies `op`, its allocator call made on `thread` where it is one a worker makes.
    fn apply(&mut self, op: &Op, thread: usize) -> Result<(), String> {
        self.tally.ops += 1;
        match *op {
            Op::Alloc { size, stream } => self.allocate(size, stream, false, thread),
            Op::Reserve(size) => self.allocate(size, None, true, thread),
            Op::Free(pick) => self.free(pick, thread),
            Op::FreeBogus { pick, kind } => self.free_bogus(pick, kind),
            Op::Shrink => self.shrink(),
            Op::Sync { from, to } => {
                let before = self.a().memory_log();
                let ev = self.streams[from].record();
                self.streams[to].wait(&ev);
                if self.a().memory_log() != before {
                    return Err("a stream sync changed the allocator".into());
                }
                Ok(())
            }
            Op::Reset(s) => {
                let before = self.a().memory_log();
                self.a()
                    .reset_chunks_using_stream(&self.streams[s])
                    .map_err(|e| e.to_string())?;
                let after = self.forget_stream(&before)?;
                self.untag(s);
                self.check(&after)
            }
            Op::ReleaseStream(s) => {
                let before = self.a().memory_log();
                self.streams[s] = Stream::new();
                let after = self.forget_stream(&before)?;
                self.untag(s);
                self.check(&after)
            }
            Op::Access { pick, kind } => self.access(pick, kind),
        }
    }

    fn finish(mut self) -> Result<OpsTally, String> {
        if self.retire {
            self.finish_retired()?;
        } else {
            self.finish_freed()?;
        }
        // A worker may still hold the allocator for a moment after answering: join them all,
        // so that this is its last owner and dropping it gives every byte back.
        self.stop_workers()?;
        let raw = self.raw.clone();
        let Ok(subject) = Arc::try_unwrap(self.subject) else {
            return Err("the allocator is still shared once the workers are gone".into());
        };
        drop(subject);
        let left = raw.raw_stats().raw_bytes_outstanding;
        if left != 0 {
            return Err(format!(
                "{left} bytes outstanding once the allocator is dropped"
            ));
        }
        Ok(self.tally)
    }

    /// Frees every allocation, reserves last, shrinking in between: everything goes back.
    fn finish_freed(&mut self) -> Result<(), String> {
        while let Some(i) = self.live.iter().position(|l| !l.reserve) {
            self.free(i, 0)?;
        }
        self.shrink()?;
        let reserved: u64 = self.live.iter().map(|l| l.requested).sum();
        if self.is_arena()
            && (self.outstanding() != reserved || self.a().stats().num_arena_extensions != 0)
        {
            return Err(format!(
                "after freeing all and shrinking {} bytes are outstanding, reserves are {reserved}",
                self.outstanding()
            ));
        }
        if let Some(vm) = &self.vm {
            if vm.mapped_bytes() != 0 {
                return Err(format!(
                    "{} bytes mapped after freeing all and shrinking",
                    vm.mapped_bytes()
                ));
            }
        }
        while !self.live.is_empty() {
            self.free(0, 0)?;
        }
        self.shrink()?;
        let s = self.a().stats();
        if s.in_use != 0 || s.requested_in_use != 0 || s.reserved_bytes != 0 {
            return Err(format!("stats once everything is freed: {s:?}"));
        }
        let left = self.outstanding();
        let keep = match self.kind {
            Kind::Pool => self.config.cuda_mempool_bytes_to_keep_on_shrink,
            _ => 0,
        };
        if left > keep {
            return Err(format!(
                "{left} bytes outstanding once everything is freed and shrunk"
            ));
        }
        Ok(())
    }

    /// Retires the allocator with allocations live: every byte goes back at once, and every
    /// later call is `ERR_ARENA_RELEASED`.
    fn finish_retired(&mut self) -> Result<(), String> {
        self.a().retire();
        self.tally.retired += 1;
        if self.outstanding() != 0 {
            return Err(format!(
                "{} bytes outstanding after retire",
                self.outstanding()
            ));
        }
        let s = self.a().stats();
        if s.in_use != 0 || s.total_allocated != 0 || s.limit != self.expected_limit() {
            return Err(format!("stats after retire: {s:?}"));
        }
        let addr = self.live.first().map_or(0x1000, |l| l.addr);
        let free = self.a().free(addr);
        let reserve = self.a().reserve(1);
        if code_of(&free) != Some("ERR_ARENA_RELEASED")
            || code_of(&reserve) != Some("ERR_ARENA_RELEASED")
        {
            return Err(format!(
                "after retire: free gave {free:?}, reserve {reserve:?}"
            ));
        }
        self.a().retire();
        self.live.clear();
        Ok(())
    }
}
