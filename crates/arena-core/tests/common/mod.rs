//! Helpers shared by the integration tests.
#![allow(dead_code)]

use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, ArenaError, DeviceLimits, HostAllocator,
    MemoryLog, Stream,
};
use std::sync::mpsc::{channel, Sender};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// `size` bytes on stream `s`; panics unless the allocation gives an address.
pub fn on(a: &(impl Allocator + ?Sized), s: &Stream, size: u64) -> u64 {
    a.alloc_on_stream(size, s)
        .expect("alloc succeeds")
        .expect("an address")
}

pub fn config(pairs: &[(&str, &str)]) -> ArenaConfig {
    ArenaConfig::from_pairs(pairs.iter().copied()).expect("test config is valid")
}

/// A virtual device of `total` bytes mapping in `page`-byte granules, and an arena in
/// virtual-memory mode over it.
pub fn vm_arena(total: u64, page: u64, pairs: &[(&str, &str)]) -> Arena<AddressSpaceAllocator> {
    let raw = AddressSpaceAllocator::new(DeviceLimits::with_total(total)).with_granularity(page);
    let vm: std::sync::Arc<dyn cuda_arena_core::VirtualMemory> = std::sync::Arc::new(raw.vm());
    Arena::with_virtual_memory(raw, vm, config(pairs)).expect("arena")
}

/// Bytes the arena's virtual memory has mapped.
pub fn mapped(a: &Arena<AddressSpaceAllocator>) -> u64 {
    a.virtual_memory()
        .expect("virtual-memory mode")
        .mapped_bytes()
}

/// Driver allocations (mappings) made so far.
pub fn map_calls(a: &Arena<AddressSpaceAllocator>) -> u64 {
    use cuda_arena_core::RawAllocator;
    a.raw().raw_stats().raw_allocs
}

/// An arena over an 80 GiB virtual device.
pub fn virtual_arena(pairs: &[(&str, &str)]) -> Arena<AddressSpaceAllocator> {
    Arena::new(AddressSpaceAllocator::default(), config(pairs)).expect("arena")
}

/// An arena in virtual-memory mode over an 80 GiB virtual device with 2 MiB pages (CUDA's
/// granularity).
pub fn virtual_vm_arena(pairs: &[(&str, &str)]) -> Arena<AddressSpaceAllocator> {
    let raw = AddressSpaceAllocator::default().with_granularity(2 * MIB);
    let vm: std::sync::Arc<dyn cuda_arena_core::VirtualMemory> = std::sync::Arc::new(raw.vm());
    Arena::with_virtual_memory(raw, vm, config(pairs)).expect("arena")
}

/// An arena over a virtual device with the given limits.
pub fn limited_arena(limits: DeviceLimits, pairs: &[(&str, &str)]) -> Arena<AddressSpaceAllocator> {
    Arena::new(AddressSpaceAllocator::new(limits), config(pairs)).expect("arena")
}

/// An arena over real host memory (4 GiB simulated device).
pub fn host_arena(pairs: &[(&str, &str)]) -> Arena<HostAllocator> {
    Arena::new(HostAllocator::default(), config(pairs)).expect("arena")
}

pub fn alloc(a: &(impl Allocator + ?Sized), size: u64) -> u64 {
    a.alloc(size)
        .expect("alloc succeeds")
        .expect("non-zero size gives an address")
}

pub fn code<T: std::fmt::Debug>(r: Result<T, ArenaError>) -> &'static str {
    r.expect_err("call should fail").code()
}

/// Everything observable about an allocator's state, to compare before and after a call.
pub fn snapshot(a: &(impl Allocator + ?Sized)) -> MemoryLog {
    a.memory_log()
}

/// A thread that runs closures sent to it, one at a time, from a sub-arena of its own (as a
/// thread that met another in the shared one): an allocation made through it stays in that
/// thread's sub-arena while the test goes on. [`Worker::shared`] leaves it shared.
pub struct Worker {
    tx: Option<Sender<Box<dyn FnOnce() + Send>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    pub fn new() -> Self {
        Self::start(true)
    }

    /// A worker that allocates from the shared sub-arena until it meets another thread there.
    pub fn shared() -> Self {
        Self::start(false)
    }

    fn start(own: bool) -> Self {
        let (tx, rx) = channel::<Box<dyn FnOnce() + Send>>();
        let handle = std::thread::spawn(move || {
            if own {
                cuda_arena_core::leave_shared_sub_arena();
            }
            while let Ok(job) = rx.recv() {
                job();
            }
        });
        Worker {
            tx: Some(tx),
            handle: Some(handle),
        }
    }

    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (rtx, rrx) = channel();
        self.tx
            .as_ref()
            .expect("running")
            .send(Box::new(move || {
                let _ = rtx.send(f());
            }))
            .expect("worker alive");
        rrx.recv().expect("worker answered")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The next value of the xorshift64 generator whose state is `x` (seeded tests' sizes and
/// choices; `x` must not be 0).
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// One request's working set for pool-thread tests: 300 allocations of 256 B to 1 MiB from a
/// seeded generator, the same for every turn (a model's shapes repeat).
pub fn pool_working_set() -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..300).map(|_| 256 << (xorshift(&mut x) % 13)).collect()
}

/// A pool thread's turn: allocate the working set, then free it.
pub fn pool_turn(a: &(impl Allocator + ?Sized), sizes: &[u64]) {
    let addrs: Vec<u64> = sizes.iter().map(|&s| alloc(a, s)).collect();
    for x in addrs {
        a.free(x).expect("live");
    }
}
