//! The `arena_ops` target: bytes decoded into an allocator (the BFC arena, in its region or
//! its virtual-memory mode, the arena without streams, the memory-pool stand-in or the plain
//! allocator) over the `virtual` or `host` raw allocator with small limits, and a sequence of
//! operations on it, each checked against a shadow model of what must hold. In
//! virtual-memory mode (issue 14) also: chunks in use lie in mapped pages and the backend
//! counts what the arena mapped (the arena's own invariants), a shrink leaves no wholly free
//! page mapped, nothing is mapped once everything is freed and shrunk, and on `host` the bytes
//! of live allocations survive the unmapping of the pages around them.

use super::Bytes;
use crate::arena::bins::round_up_256;
use crate::{
    Allocator, AllocatorStats, Arena, ArenaConfig, ArenaError, DeviceLimits, HostAllocator,
    MemoryLog, PlainAllocator, PoolAllocator, RawAllocator, Stream, VirtualAllocator,
    VirtualMemory,
};
use std::sync::Arc;

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

/// Picks from `table` with one byte, or, for bytes from 0xF0, takes the next four bytes.
fn pick(r: &mut Bytes<'_>, table: &[u64]) -> u64 {
    let b = r.byte();
    if b >= 0xF0 {
        u64::from(r.u32())
    } else {
        table[usize::from(b) % table.len()]
    }
}

const INT32_MAX: u64 = i32::MAX as u64;

fn decode_setup(r: &mut Bytes<'_>) -> Setup {
    let b = r.byte();
    let kind = match b % 8 {
        0..=3 => Kind::Arena,
        4 => Kind::ArenaWithoutStreams,
        5 | 6 => Kind::Pool,
        _ => Kind::Plain,
    };
    let backend = if b & 0x80 != 0 {
        Backend::Host
    } else {
        Backend::Virtual
    };
    let retire = b & 0x40 != 0;
    let sizes = [
        1 << 20,
        2 << 20,
        256,
        4096,
        65536,
        1,
        255,
        257,
        1000,
        3 << 20,
    ];
    let int32 = |r: &mut Bytes<'_>| pick(r, &sizes).clamp(1, INT32_MAX).to_string();
    let mut pairs = vec![
        ("arena.extend_strategy", (r.byte() & 1).to_string()),
        ("arena.initial_chunk_size_bytes", int32(r)),
        ("arena.max_dead_bytes_per_chunk", int32(r)),
        ("arena.initial_growth_chunk_size_bytes", int32(r)),
        (
            "arena.max_power_of_two_extend_bytes",
            pick(
                r,
                &[
                    1 << 30,
                    1 << 20,
                    2 << 20,
                    4 << 20,
                    256,
                    1,
                    65536,
                    i64::MAX as u64,
                    1000,
                ],
            )
            .max(1)
            .to_string(),
        ),
        (
            "arena.max_mem",
            pick(
                r,
                &[
                    0,
                    1 << 20,
                    4 << 20,
                    16 << 20,
                    300_000,
                    256,
                    64 << 20,
                    3 << 20,
                ],
            )
            .to_string(),
        ),
    ];
    if kind == Kind::Pool {
        pairs.push(("arena.use_cuda_mempool", "1".into()));
        let threshold = r.byte();
        if !threshold.is_multiple_of(4) {
            pairs.push((
                "arena.cuda_mempool_release_threshold",
                pick(r, &[0, 1 << 20, 4 << 20, u64::MAX, 4096]).to_string(),
            ));
        }
        pairs.push((
            "arena.cuda_mempool_bytes_to_keep_on_shrink",
            pick(r, &[0, 1 << 20, 4 << 20, u64::MAX]).to_string(),
        ));
    }
    let mut total_memory = pick(
        r,
        &[
            1 << 20,
            4 << 20,
            16 << 20,
            64 << 20,
            3 << 20,
            300_000,
            1 << 30,
            80 << 30,
        ],
    );
    if backend == Backend::Host {
        total_memory = total_memory.min(HOST_TOTAL_MAX);
    }
    // Bit 0x20 of the first byte: the arena in virtual-memory mode.
    let vm_granularity = (b & 0x20 != 0 && matches!(kind, Kind::Arena | Kind::ArenaWithoutStreams))
        .then(|| decode_vm(r, &mut pairs, backend, total_memory));
    let max_allocation = pick(
        r,
        &[
            u64::MAX,
            1 << 20,
            2 << 20,
            4 << 20,
            16 << 20,
            65536,
            (2 << 20) + 256,
        ],
    );
    Setup {
        kind,
        backend,
        pairs: pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        limits: DeviceLimits {
            total_memory,
            max_allocation,
        },
        retire,
        vm_granularity,
    }
}

/// The virtual-memory keys of an input: pages of 1 to 4 granules, a range of the device's
/// size or of a few pages (so requests need new ranges), a headroom that asks for pages back
/// at once, soon or never, and no threshold or a small one. Returns the granularity.
fn decode_vm(
    r: &mut Bytes<'_>,
    pairs: &mut Vec<(&'static str, String)>,
    backend: Backend,
    total_memory: u64,
) -> u64 {
    let granularity = match backend {
        // The host's pages.
        Backend::Host => crate::raw::HostAllocator::default().vm().granularity(),
        Backend::Virtual => pick(r, &[4096, 65536, 8192, 1 << 20]).clamp(4096, 2 << 20),
    };
    let granularity = if granularity.is_power_of_two() {
        granularity
    } else {
        4096
    };
    let page = granularity << (r.byte() % 3);
    let mut reserve = pick(r, &[0, 1 << 20, 4 << 20, 65536, 300_000]).min(1 << 30);
    if reserve == 0 && total_memory / page > 1 << 16 {
        // The range defaults to the device's size: keep its page table small.
        reserve = page << 12;
    }
    pairs.push(("arena.vm_page_size_bytes", page.to_string()));
    pairs.push(("arena.vm_reserve_bytes", reserve.to_string()));
    pairs.push((
        "arena.vm_peak_headroom_percent",
        pick(r, &[2, 0, 10, 1000]).min(1000).to_string(),
    ));
    pairs.push((
        "arena.vm_churn_headroom_percent",
        pick(r, &[30, 0, 5, 1000]).min(1000).to_string(),
    ));
    // One page, a few pages, and the default (64 MiB, often past the whole range here).
    pairs.push((
        "arena.vm_map_unit_bytes",
        pick(r, &[0, page * 4, 64 << 20, page * 2]).to_string(),
    ));
    let threshold = r.byte();
    if !threshold.is_multiple_of(3) {
        pairs.push((
            "arena.vm_unmap_threshold_bytes",
            pick(r, &[0, 65536, 1 << 20, 300_000]).to_string(),
        ));
    }
    granularity
}

/// Sizes: zero, small, medium, powers of two and their neighbours, sizes at the device's
/// limits and at `max_mem`, sizes whose rounding overflows, and sizes used just before.
fn decode_size(r: &mut Bytes<'_>, setup: &Setup, recent: &mut [u64; 4]) -> u64 {
    let max_mem = setup
        .pairs
        .iter()
        .find(|(k, _)| k == "arena.max_mem")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .filter(|&m| m != 0)
        .unwrap_or(u64::MAX);
    let class = r.byte();
    let size = match class % 16 {
        0 => 0,
        1..=4 => 1 + u64::from(r.byte()) * (1 + u64::from(r.byte() % 16)),
        5..=7 => 1 + u64::from(r.u16()),
        8 | 9 => (1 + u64::from(r.u16())) * 256,
        10 => {
            let p = 1u64 << (8 + r.byte() % 24);
            (p + u64::from(r.byte() % 3)).saturating_sub(1)
        }
        11 => setup
            .limits
            .total_memory
            .saturating_sub(u64::from(r.byte()) * 256),
        12 => max_mem.saturating_sub(255) + u64::from(r.byte() % 255),
        13 => u64::MAX - u64::from(r.byte()),
        _ => recent[usize::from(r.byte() % 4)],
    };
    recent.rotate_right(1);
    recent[0] = size;
    size
}

/// An input as a setup and at most [`MAX_OPS`] operations. Total: every byte string decodes.
pub fn decode_ops(data: &[u8]) -> (Setup, Vec<Op>) {
    let mut r = Bytes::new(data);
    let setup = decode_setup(&mut r);
    let mut recent = [256, 4096, 1 << 20, 1];
    let mut ops = Vec::new();
    while !r.is_empty() && ops.len() < MAX_OPS {
        let code = r.byte();
        let stream = |r: &mut Bytes<'_>| usize::from(r.byte()) % STREAMS;
        let op = match code % 16 {
            0..=4 => {
                let size = decode_size(&mut r, &setup, &mut recent);
                let s = r.byte() % 4;
                Op::Alloc {
                    size,
                    stream: (s < 3).then_some(usize::from(s)),
                }
            }
            5 => Op::Reserve(decode_size(&mut r, &setup, &mut recent)),
            6..=8 => Op::Free(usize::from(r.byte())),
            9 => Op::FreeBogus {
                pick: usize::from(r.u16()),
                kind: r.byte() % 4,
            },
            10 => Op::Shrink,
            11 => Op::Sync {
                from: stream(&mut r),
                to: stream(&mut r),
            },
            12 => Op::Reset(stream(&mut r)),
            13 => Op::ReleaseStream(stream(&mut r)),
            _ => Op::Access {
                pick: usize::from(r.byte()),
                kind: r.byte() % 4,
            },
        };
        ops.push(op);
    }
    (setup, ops)
}

/// Runs `ops` on the allocator `setup` describes, checking the model after every one, then
/// frees everything (or retires the allocator) and checks every byte went back.
pub fn run_ops(setup: &Setup, ops: &[Op]) -> Result<OpsTally, String> {
    let mut model = Model::new(setup)?;
    for (i, op) in ops.iter().enumerate() {
        model.apply(op).map_err(|e| format!("op {i} {op:?}: {e}"))?;
    }
    model.finish().map_err(|e| format!("at the end: {e}"))
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
    subject: Subject,
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
    fn new(setup: &Setup) -> Result<Self, String> {
        let config =
            ArenaConfig::from_pairs(setup.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| format!("the decoded config is rejected: {e}"))?;
        let (raw, vm): (Raw, Option<Arc<dyn VirtualMemory>>) = match setup.backend {
            Backend::Virtual => {
                let v = VirtualAllocator::new(setup.limits)
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
            subject,
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
        matches!(self.subject, Subject::Arena(_))
    }

    fn a(&self) -> &dyn Allocator {
        self.subject.get()
    }

    fn outstanding(&self) -> u64 {
        self.raw.raw_stats().raw_bytes_outstanding
    }

    /// The arena's rule: a chunk last used by stream `f.stream` goes to `consumer` only if
    /// that is the same stream, no stream, or one that has waited past the chunk's sync id.
    /// The pool's: the same stream or no stream.
    fn may_reuse(&self, consumer: usize, f: &Freed) -> bool {
        if f.stream == consumer || f.stream == 0 {
            return true;
        }
        self.is_arena()
            && consumer != 0
            && f.sync_id
                < self.streams[consumer - 1].last_wait_sync_id(self.streams[f.stream - 1].id())
    }

    /// Virtual-memory mode: forgets freed records (or their parts) in pages no longer mapped
    /// (that memory went back to the device), and counts the bytes unmapped since `before`.
    fn drop_unmapped(&mut self, before: &MemoryLog, log: &MemoryLog) {
        if self.vm.is_none() {
            return;
        }
        self.tally.vm_bytes_unmapped += before
            .stats
            .total_allocated
            .saturating_sub(log.stats.total_allocated);
        let mut kept = Vec::with_capacity(self.freed.len());
        for f in std::mem::take(&mut self.freed) {
            for r in &log.regions {
                let (s, e) = (f.start.max(r.base), f.end.min(r.base + r.size));
                if s < e {
                    kept.push(Freed {
                        start: s,
                        end: e,
                        ..f
                    });
                }
            }
        }
        self.freed = kept;
    }

    /// Virtual-memory mode: every mapping (what one map call mapped; only whole ones can be
    /// unmapped) has a chunk in use on one of its pages, and the mappings are the memory
    /// log's extents.
    fn no_free_mapping_mapped(&self, log: &MemoryLog) -> Result<(), String> {
        let Some(vm) = self.vm.as_ref() else {
            return Ok(());
        };
        let mappings = vm.mappings();
        let mut covered = 0;
        for &(at, len) in &mappings {
            let Some(r) = log
                .regions
                .iter()
                .find(|r| r.base <= at && at + len <= r.base + r.size)
            else {
                return Err(format!(
                    "the mapping at {at:#x} (+{len}) is in no extent of the memory log"
                ));
            };
            covered += len;
            let used = r
                .chunks
                .iter()
                .any(|c| c.in_use && c.addr < at + len && at < c.addr + c.size);
            if !used {
                return Err(format!(
                    "the free mapping at {at:#x} (+{len}) is still mapped"
                ));
            }
        }
        let extents: u64 = log.regions.iter().map(|r| r.size).sum();
        if covered != extents {
            return Err(format!(
                "the mappings hold {covered} bytes, the memory log's extents {extents}"
            ));
        }
        Ok(())
    }

    /// Virtual-memory mode: a call that failed (or a shrink) may have unmapped wholly free
    /// pages, and changed nothing else.
    fn check_only_unmapped(&self, before: &MemoryLog, after: &MemoryLog) -> Result<bool, String> {
        if after.live_chunks() != before.live_chunks() || after.reserves != before.reserves {
            return Err("a call that must not change live memory did".into());
        }
        let (b, a) = (before.stats, after.stats);
        let same = |s: AllocatorStats| {
            (
                s.in_use,
                s.requested_in_use,
                s.num_allocs,
                s.num_reserves,
                s.max_in_use,
                s.reserved_bytes,
            )
        };
        if same(b) != same(a) || a.total_allocated > b.total_allocated {
            return Err(format!(
                "stats changed beyond unmapping free pages: {b:?} → {a:?}"
            ));
        }
        if a.num_arena_extensions != after.regions.len() as u64 {
            return Err("NumArenaExtensions is not the number of mapped extents".into());
        }
        if a.total_allocated < b.total_allocated {
            if a.num_arena_shrinkages <= b.num_arena_shrinkages {
                return Err("pages went back without a shrinkage counted".into());
            }
            return Ok(true);
        }
        if before != after {
            return Err("a call that must change nothing changed the arena".into());
        }
        Ok(false)
    }

    /// Forgets freed records inside regions that went back to the raw allocator.
    fn drop_released(&mut self, released: &[(u64, u64, u64)]) {
        self.freed.retain(|f| {
            !released
                .iter()
                .any(|&(_, base, size)| f.start >= base && f.end <= base + size)
        });
    }

    /// The arena handed `[addr, addr+len)` to `consumer`: every freed piece of it must have
    /// been `consumer`'s to take.
    fn claim(&mut self, addr: u64, len: u64, consumer: usize) -> Result<(), String> {
        let end = addr + len;
        let mut kept = Vec::with_capacity(self.freed.len());
        for f in std::mem::take(&mut self.freed) {
            if f.end <= addr || f.start >= end {
                kept.push(f);
                continue;
            }
            if !self.may_reuse(consumer, &f) {
                return Err(format!(
                    "stream {consumer} got [{addr:#x}, {end:#x}) overlapping {f:?} without a wait"
                ));
            }
            if f.stream != consumer && f.stream != 0 {
                self.tally.cross_stream_reuse += 1;
            }
            if f.start < addr {
                kept.push(Freed { end: addr, ..f });
            }
            if f.end > end {
                kept.push(Freed { start: end, ..f });
            }
        }
        self.freed = kept;
        Ok(())
    }

    /// The pool handed out `addr`: fresh from the raw allocator (what was freed there went
    /// back to it), or a cached block of exactly this size that `consumer` may take.
    fn pool_take(
        &mut self,
        addr: u64,
        size: u64,
        consumer: usize,
        fresh: bool,
    ) -> Result<(), String> {
        if fresh {
            self.freed
                .retain(|f| f.end <= addr || f.start >= addr + size);
            return Ok(());
        }
        let i = self
            .freed
            .iter()
            .position(|f| f.start == addr)
            .ok_or_else(|| format!("the pool handed out {addr:#x}, neither fresh nor freed"))?;
        let f = self.freed.swap_remove(i);
        if f.end - f.start != size {
            return Err(format!("the pool reused {f:?} for {size} bytes"));
        }
        if !self.may_reuse(consumer, &f) {
            return Err(format!("stream {consumer} got the pool's block {f:?}"));
        }
        self.tally.pool_reuse += 1;
        Ok(())
    }

    /// Checks a failed call left everything as it was, but for decision 7's release of
    /// wholly free regions (arena only).
    fn check_unchanged(&mut self, before: &MemoryLog, after: &MemoryLog) -> Result<(), String> {
        if self.vm.is_some() {
            if self.check_only_unmapped(before, after)? {
                self.tally.released_on_failure += 1;
            }
            return Ok(());
        }
        let removed = regions_removed(before, after);
        if removed.is_empty() {
            return if before == after {
                Ok(())
            } else {
                Err(format!(
                    "a call that must change nothing changed the allocator: {:?} → {:?}",
                    before.stats, after.stats
                ))
            };
        }
        for &(id, _, _) in &removed {
            let r = before.regions.iter().find(|r| r.id == id);
            if r.is_some_and(|r| r.chunks.iter().any(|c| c.in_use)) {
                return Err(format!(
                    "a failed call released region {id} with live chunks"
                ));
            }
        }
        if after
            .regions
            .iter()
            .any(|a| !before.regions.iter().any(|b| b == a))
        {
            return Err("a failed call left a new or changed region".into());
        }
        let k = removed.len() as u64;
        let bytes: u64 = removed.iter().map(|r| r.2).sum();
        let mut expect = before.stats;
        expect.num_arena_extensions -= k;
        expect.num_arena_shrinkages += k;
        expect.total_allocated -= bytes;
        if after.stats != expect || after.reserves != before.reserves {
            return Err(format!(
                "a failed call changed stats beyond releasing regions: {:?} vs {expect:?}",
                after.stats
            ));
        }
        self.tally.released_on_failure += 1;
        Ok(())
    }

    fn expected_limit(&self) -> i64 {
        match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams => {
                AllocatorStats::with_limit(self.config.max_mem).limit
            }
            Kind::Pool => 0,
            Kind::Plain => -1,
        }
    }

    fn pattern_ends(l: &Live) -> [(u64, u64); 2] {
        let n = l.requested.min(PATTERN);
        [(0, n), (l.requested - n, n)]
    }

    fn write_pattern(&self, l: &Live) -> Result<(), String> {
        for (offset, n) in Self::pattern_ends(l) {
            self.a()
                .write(l.addr + offset, &pattern(l.tag, offset, n))
                .map_err(|e| format!("write into live {l:?}: {e}"))?;
        }
        Ok(())
    }

    fn verify_pattern(&self, l: &Live) -> Result<(), String> {
        for (offset, n) in Self::pattern_ends(l) {
            let mut buf = vec![0; n as usize];
            self.a()
                .read(l.addr + offset, &mut buf)
                .map_err(|e| format!("read of live {l:?}: {e}"))?;
            if buf != pattern(l.tag, offset, n) {
                return Err(format!(
                    "the bytes at offset {offset} of {l:?} changed: {buf:?}"
                ));
            }
        }
        Ok(())
    }

    fn check(&self, log: &MemoryLog) -> Result<(), String> {
        if let Subject::Arena(arena) = &self.subject {
            arena.check_invariants()?;
        }
        let a = self.a();
        let (mut in_use, mut requested, mut reserved) = (0u64, 0u64, 0u64);
        let mut spans = Vec::with_capacity(self.live.len());
        for l in &self.live {
            let allocated = a
                .allocated_size(l.addr)
                .map_err(|e| format!("live {l:?}: {e}"))?;
            let req = a
                .requested_size(l.addr)
                .map_err(|e| format!("live {l:?}: {e}"))?;
            if allocated != l.allocated || req != l.requested {
                return Err(format!(
                    "{l:?} now has allocated size {allocated}, requested size {req}"
                ));
            }
            if !l.addr.is_multiple_of(256) {
                return Err(format!("{l:?} is not 256-aligned"));
            }
            if self.is_arena()
                && !l.reserve
                && !log
                    .regions
                    .iter()
                    .any(|r| l.addr >= r.base && l.addr + allocated <= r.base + r.size)
            {
                return Err(format!("{l:?} lies outside every region"));
            }
            spans.push((l.addr, allocated));
            in_use += allocated;
            requested += l.requested;
            if l.reserve && self.kind != Kind::Pool {
                reserved += l.requested;
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!(
                    "allocations {:#x}+{} and {:#x} overlap",
                    w[0].0, w[0].1, w[1].0
                ));
            }
        }
        let s = log.stats;
        let outstanding = self.outstanding();
        let want = [
            ("InUse", s.in_use, in_use),
            ("RequestedInUse", s.requested_in_use, requested),
            ("ReservedBytes", s.reserved_bytes, reserved),
            ("TotalAllocated", s.total_allocated, outstanding),
            ("NumAllocs", s.num_allocs, self.expect.num_allocs),
            ("NumReserves", s.num_reserves, self.expect.num_reserves),
            ("MaxInUse", s.max_in_use, self.expect.max_in_use),
            ("MaxAllocSize", s.max_alloc_size, self.expect.max_alloc_size),
        ];
        for (what, got, model) in want {
            if got != model {
                return Err(format!("{what} is {got}, the model says {model}"));
            }
        }
        if s.limit != self.expected_limit() {
            return Err(format!("Limit is {}", s.limit));
        }
        let mut blocks: Vec<(u64, u64)> = self
            .live
            .iter()
            .filter(|l| !self.is_arena() || l.reserve)
            .map(|l| (l.addr, l.allocated))
            .collect();
        blocks.sort_unstable();
        let logged: Vec<(u64, u64)> = log.reserves.iter().map(|r| (r.addr, r.size)).collect();
        if blocks != logged {
            return Err("the memory log's blocks differ from the model's".into());
        }
        if self.is_arena() {
            let mut chunks: Vec<(u64, u64)> = self
                .live
                .iter()
                .filter(|l| !l.reserve)
                .map(|l| (l.addr, l.requested))
                .collect();
            chunks.sort_unstable();
            let logged: Vec<(u64, u64)> =
                log.live_chunks().iter().map(|&(a, _, r)| (a, r)).collect();
            if chunks != logged {
                return Err("the memory log's live chunks differ from the model's".into());
            }
        }
        if self.kind == Kind::Pool {
            let cached = outstanding.checked_sub(in_use).ok_or_else(|| {
                format!("the pool holds {outstanding} raw bytes, less than the {in_use} in use")
            })?;
            let threshold = self
                .config
                .cuda_mempool_release_threshold
                .unwrap_or(u64::MAX);
            if cached > threshold {
                return Err(format!(
                    "the pool caches {cached} bytes, over its release threshold {threshold}"
                ));
            }
        }
        if self.host {
            for l in &self.live {
                self.verify_pattern(l)?;
            }
        }
        Ok(())
    }

    /// Bookkeeping for an address handed out by a call that succeeded, after which the
    /// regions `released` were gone (decision 7).
    fn handed_out(
        &mut self,
        addr: u64,
        size: u64,
        reserve: bool,
        consumer: usize,
        released: &[(u64, u64, u64)],
        raw_allocs_before: u64,
    ) -> Result<(), String> {
        let a = self.a();
        let allocated = a.allocated_size(addr).map_err(|e| e.to_string())?;
        let fresh = self.raw.raw_stats().raw_allocs > raw_allocs_before;
        if self.is_arena() && !reserve {
            let rounded = round_up_256(size).ok_or("a size past rounding was handed out")?;
            let max_dead = self.config.max_dead_bytes_per_chunk;
            let whole_ok = allocated > rounded && allocated / 2 < rounded;
            // ORT's split rule: a chunk is cut to the rounded size unless it is under twice
            // that and wastes less than max_dead_bytes_per_chunk. The virtual-memory mode cuts
            // every chunk but while the dead bytes of all live chunks stay within 1/2048 of
            // the chunk bytes in use, and none where memory is held strictly (churn ceiling
            // at or below the peak headroom).
            let allowed = if self.vm.is_some() {
                let (mut chunk_bytes, mut dead) = (allocated, allocated - rounded.min(allocated));
                for l in self.live.iter().filter(|l| !l.reserve) {
                    chunk_bytes += l.allocated;
                    dead += l.allocated - round_up_256(l.requested).unwrap_or(l.allocated);
                }
                whole_ok
                    && self.config.vm_churn_headroom_percent > self.config.vm_peak_headroom_percent
                    && dead <= chunk_bytes >> 11
            } else {
                whole_ok && allocated - rounded < max_dead
            };
            if allocated != rounded && !allowed {
                return Err(format!(
                    "a {size}-byte request got a chunk of {allocated} bytes"
                ));
            }
        } else if allocated != size {
            return Err(format!("a {size}-byte block reports {allocated} bytes"));
        }
        if !released.is_empty() {
            self.tally.released_then_succeeded += 1;
        }
        self.drop_released(released);
        match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams if !reserve => {
                self.claim(addr, allocated, consumer)?
            }
            Kind::Pool => self.pool_take(addr, size, consumer, fresh)?,
            Kind::Plain if !fresh => {
                return Err("the plain allocator handed out memory without a raw allocation".into())
            }
            _ => {}
        }
        let sync_id = if consumer == 0 {
            0
        } else {
            self.streams[consumer - 1].sync_id()
        };
        let l = Live {
            addr,
            requested: size,
            allocated,
            reserve,
            stream: consumer,
            sync_id,
            tag: self.next_tag,
        };
        self.next_tag = self.next_tag.wrapping_add(1);
        if self.host {
            self.write_pattern(&l)?;
        }
        self.live.push(l);
        self.expect.num_allocs += 1;
        if reserve && self.kind != Kind::Pool {
            self.expect.num_reserves += 1;
        }
        let in_use: u64 = self.live.iter().map(|l| l.allocated).sum();
        self.expect.max_in_use = self.expect.max_in_use.max(in_use);
        self.expect.max_alloc_size = self.expect.max_alloc_size.max(allocated);
        self.tally.allocs += 1;
        Ok(())
    }

    /// Runs an alloc, alloc_on_stream or reserve and checks its outcome.
    fn allocate(&mut self, size: u64, stream: Option<usize>, reserve: bool) -> Result<(), String> {
        let before = self.a().memory_log();
        let raw_allocs = self.raw.raw_stats().raw_allocs;
        let result = match (reserve, stream) {
            (true, _) => self.a().reserve(size),
            (false, Some(s)) => self.a().alloc_on_stream(size, &self.streams[s]),
            (false, None) => self.a().alloc(size),
        };
        let after = self.a().memory_log();
        // The pool serves a reserve as a plain allocation.
        let consumer = match stream {
            Some(s) if !reserve => s + 1,
            _ => 0,
        };
        let not_stream_aware = stream.is_some() && !reserve && !self.a().is_stream_aware();
        match result {
            Err(e) if not_stream_aware && e.code() == "ERR_ARENA_INVALID_ARGUMENT" => {
                self.check_unchanged(&before, &after)?
            }
            _ if not_stream_aware => {
                return Err(format!(
                    "alloc_on_stream on an allocator without streams gave {result:?}"
                ))
            }
            Ok(None) if size == 0 => self.check_unchanged(&before, &after)?,
            Ok(Some(addr)) if size > 0 => {
                if self.vm.is_some() {
                    self.handed_out(addr, size, reserve, consumer, &[], raw_allocs)?;
                    if after.stats.num_arena_shrinkages > before.stats.num_arena_shrinkages {
                        self.tally.released_then_succeeded += 1;
                    }
                    self.drop_unmapped(&before, &after);
                } else {
                    let released = regions_removed(&before, &after);
                    self.handed_out(addr, size, reserve, consumer, &released, raw_allocs)?
                }
            }
            Err(e) if e.code() == "ERR_ARENA_OUT_OF_MEMORY" => {
                self.tally.out_of_memory += 1;
                self.check_unchanged(&before, &after)?;
                if self.vm.is_some() {
                    self.drop_unmapped(&before, &after);
                } else {
                    self.drop_released(&regions_removed(&before, &after));
                }
            }
            other => return Err(format!("gave {other:?}")),
        }
        self.check(&after)
    }

    fn free(&mut self, pick: usize) -> Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let l = self.live.swap_remove(pick % self.live.len());
        if self.host {
            self.verify_pattern(&l)?;
        }
        let before = self.a().memory_log();
        self.a()
            .free(l.addr)
            .map_err(|e| format!("free of live {l:?}: {e}"))?;
        let keeps_memory = match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams => !l.reserve,
            Kind::Pool => true,
            Kind::Plain => false,
        };
        if keeps_memory {
            self.freed.push(Freed {
                start: l.addr,
                end: l.addr + l.allocated,
                stream: l.stream,
                sync_id: l.sync_id,
            });
        }
        let log = self.a().memory_log();
        self.drop_unmapped(&before, &log);
        self.check(&log)
    }

    fn free_bogus(&mut self, pick: usize, kind: u8) -> Result<(), String> {
        let addr = match (kind, self.live.is_empty()) {
            (0, false) => {
                let l = self.live[pick % self.live.len()];
                l.addr + 1 + (pick as u64 % 255)
            }
            (1, _) => match self.freed.get(pick % self.freed.len().max(1)) {
                Some(f) if !self.live.iter().any(|l| l.addr == f.start) => f.start,
                _ => 0x1000,
            },
            (3, _) => (u64::MAX - (pick as u64 % 4096) * 256) & !255,
            _ => 0x1000 + (pick as u64 % 1000) * 256,
        };
        let before = self.a().memory_log();
        let result = self.a().free(addr);
        if code_of(&result) != Some("ERR_ARENA_UNKNOWN_POINTER") {
            return Err(format!("free({addr:#x}) of a bad address gave {result:?}"));
        }
        self.tally.refused_frees += 1;
        let after = self.a().memory_log();
        if before != after {
            return Err(format!("a refused free({addr:#x}) changed the allocator"));
        }
        self.check(&after)
    }

    fn shrink(&mut self) -> Result<(), String> {
        let before = self.a().memory_log();
        self.a().shrink().map_err(|e| e.to_string())?;
        let after = self.a().memory_log();
        let in_use: u64 = self.live.iter().map(|l| l.allocated).sum();
        match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams if self.vm.is_some() => {
                self.no_free_mapping_mapped(&after)?;
                self.check_only_unmapped(&before, &after)?;
                self.drop_unmapped(&before, &after);
            }
            Kind::Arena | Kind::ArenaWithoutStreams => {
                if after
                    .regions
                    .iter()
                    .any(|r| r.chunks.iter().all(|c| !c.in_use))
                {
                    return Err("shrink left a wholly free region".into());
                }
                if after.live_chunks() != before.live_chunks() {
                    return Err("shrink changed live chunks".into());
                }
                let removed = regions_removed(&before, &after);
                let mut expect = before.stats;
                expect.num_arena_extensions -= removed.len() as u64;
                expect.num_arena_shrinkages += removed.len() as u64;
                expect.total_allocated -= removed.iter().map(|r| r.2).sum::<u64>();
                if after.stats != expect {
                    return Err(format!("shrink changed stats to {:?}", after.stats));
                }
                self.drop_released(&removed);
            }
            Kind::Pool => {
                let keep = self.config.cuda_mempool_bytes_to_keep_on_shrink;
                let cached = self.outstanding().saturating_sub(in_use);
                if cached > keep {
                    return Err(format!(
                        "the pool keeps {cached} bytes after shrinking to {keep}"
                    ));
                }
                if after.stats.num_arena_shrinkages != before.stats.num_arena_shrinkages + 1 {
                    return Err("a pool shrink is not counted".into());
                }
            }
            Kind::Plain => {
                if before != after {
                    return Err("shrink changed the plain allocator".into());
                }
            }
        }
        self.check(&after)
    }

    /// The allocator forgot stream `s` (reset or released): its memory is anyone's now.
    fn forget_stream(&mut self, before: &MemoryLog) -> Result<MemoryLog, String> {
        let after = self.a().memory_log();
        if after.live_chunks() != before.live_chunks()
            || after.stats != before.stats
            || after.reserves != before.reserves
        {
            return Err("forgetting a stream changed live memory or stats".into());
        }
        Ok(after)
    }

    fn untag(&mut self, s: usize) {
        for l in self.live.iter_mut().filter(|l| l.stream == s + 1) {
            l.stream = 0;
        }
        for f in self.freed.iter_mut().filter(|f| f.stream == s + 1) {
            f.stream = 0;
        }
    }

    fn access(&mut self, pick: usize, kind: u8) -> Result<(), String> {
        if self.live.is_empty() {
            return Ok(());
        }
        let i = pick % self.live.len();
        let l = self.live[i];
        let before = self.a().memory_log();
        let in_range_code = if self.host {
            None
        } else {
            Some("ERR_ARENA_INVALID_ARGUMENT")
        };
        match kind {
            0 => {
                let n = l.requested.min(PATTERN);
                let mut buf = vec![0; n as usize];
                let r = self.a().read(l.addr, &mut buf);
                if code_of(&r) != in_range_code {
                    return Err(format!("read of live {l:?} gave {r:?}"));
                }
                if self.host {
                    if buf != pattern(l.tag, 0, n) {
                        return Err(format!("{l:?} reads back {buf:?}"));
                    }
                    self.tally.host_read_backs += 1;
                }
            }
            1 => {
                let end = l.addr + l.requested;
                let w = self.a().write(end - 1, &[0xEE, 0xEE]);
                let f = self.a().fill(l.addr, 0xEE, u64::MAX - pick as u64);
                let mut buf = [0u8; 2];
                let r = self.a().read(end - 1, &mut buf);
                for (what, code) in [
                    ("write", code_of(&w)),
                    ("fill", code_of(&f)),
                    ("read", code_of(&r)),
                ] {
                    if code != Some("ERR_ARENA_UNKNOWN_POINTER") {
                        return Err(format!("a {what} past the end of {l:?} gave {code:?}"));
                    }
                }
                self.tally.refused_accesses += 1;
            }
            2 => {
                let renewed = Live {
                    tag: self.next_tag,
                    ..l
                };
                self.next_tag = self.next_tag.wrapping_add(1);
                if self.host {
                    self.write_pattern(&renewed)?;
                    self.live[i] = renewed;
                } else {
                    let w = self.a().write(l.addr, &pattern(renewed.tag, 0, 1));
                    if code_of(&w) != in_range_code {
                        return Err(format!("a write into virtual memory gave {w:?}"));
                    }
                }
            }
            _ => {
                let len = l.requested.min(4096);
                let r = self.a().fill(l.addr, 0xA5, len);
                if code_of(&r) != in_range_code {
                    return Err(format!("fill of live {l:?} gave {r:?}"));
                }
                if self.host {
                    let mut buf = vec![0; len as usize];
                    self.a().read(l.addr, &mut buf).map_err(|e| e.to_string())?;
                    if buf.iter().any(|&b| b != 0xA5) {
                        return Err(format!("a fill of {l:?} did not take"));
                    }
                    self.write_pattern(&l)?;
                }
            }
        }
        let after = self.a().memory_log();
        if before != after {
            return Err("a copy changed the allocator".into());
        }
        self.check(&after)
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        self.tally.ops += 1;
        match *op {
            Op::Alloc { size, stream } => self.allocate(size, stream, false),
            Op::Reserve(size) => self.allocate(size, None, true),
            Op::Free(pick) => self.free(pick),
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
        let raw = self.raw.clone();
        drop(self.subject);
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
            self.free(i)?;
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
            self.free(0)?;
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
