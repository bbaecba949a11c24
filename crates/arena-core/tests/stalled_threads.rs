//! Issue 25: in virtual-memory mode a thread that maps pages holds its sub-arena's lock through
//! the driver call (35-110 us on an H100, longer when threads call at once), and a thread the
//! scheduler took off its core holds it for a time slice (more threads than cores). A miss on
//! another thread looks at the other sub-arenas' memory; it passes over one whose lock stays
//! held rather than wait for it (eight threads on two cores spent most of their time so).

mod common;
use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, DeviceLimits, MemoryInfo, Result, VirtualMemory,
};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Virtual memory that, once armed, stops in `map` until released: a thread mapping pages
/// (holding its sub-arena's lock) for as long as the test wants.
#[derive(Debug)]
struct GatedVm {
    inner: Arc<dyn VirtualMemory>,
    armed: Mutex<Option<(Sender<()>, Receiver<()>)>>,
}

impl VirtualMemory for GatedVm {
    fn granularity(&self) -> u64 {
        self.inner.granularity()
    }
    fn total_memory(&self) -> u64 {
        self.inner.total_memory()
    }
    fn reserve(&self, size: u64) -> Result<u64> {
        self.inner.reserve(size)
    }
    fn release(&self, base: u64, size: u64) -> Result<()> {
        self.inner.release(base, size)
    }
    fn map(&self, addr: u64, len: u64) -> Result<()> {
        let armed = self.armed.lock().expect("lock").take();
        if let Some((entered, release)) = armed {
            entered.send(()).expect("test waiting");
            // Bounded, so a test that fails does not hang.
            let _ = release.recv_timeout(Duration::from_secs(20));
        }
        self.inner.map(addr, len)
    }
    fn unmap(&self, addr: u64, len: u64) -> Result<()> {
        self.inner.unmap(addr, len)
    }
    fn mapped_bytes(&self) -> u64 {
        self.inner.mapped_bytes()
    }
    fn info(&self) -> MemoryInfo {
        self.inner.info()
    }
}

#[test]
fn a_miss_past_the_headroom_does_not_wait_for_a_thread_mapping_pages() {
    let raw =
        AddressSpaceAllocator::new(DeviceLimits::with_total(8 << 30)).with_granularity(2 * MIB);
    let gated = Arc::new(GatedVm {
        inner: Arc::new(raw.vm()),
        armed: Mutex::new(None),
    });
    let vm: Arc<dyn VirtualMemory> = gated.clone();
    let a = Arc::new(Arena::with_virtual_memory(raw, vm, config(&[])).expect("arena"));
    // Thread A: 64 MiB mapped, free but for a small chunk it keeps (so it is busy, and its free
    // pages are what a miss past the headroom unmaps).
    let wa = Worker::new();
    let a1 = a.clone();
    let kept = wa.run(move || {
        let big = alloc(&*a1, 64 * MIB);
        let small = alloc(&*a1, 4096);
        a1.free(big).expect("live");
        small
    });
    // Thread B maps pages for a request of its own and stops inside the driver call.
    let (entered_tx, entered_rx) = channel();
    let (release_tx, release_rx) = channel();
    *gated.armed.lock().expect("lock") = Some((entered_tx, release_rx));
    let wb = Worker::new();
    let a2 = a.clone();
    let mapping = std::thread::spawn(move || wb.run(move || alloc(&*a2, 2 * MIB)));
    entered_rx.recv().expect("B reached the driver");
    // Thread C misses past the headroom (64 MiB more than the peak allows): it may take A's
    // memory or unmap it and map its own, but not wait for B.
    let (done_tx, done_rx) = channel();
    let a3 = a.clone();
    std::thread::spawn(move || {
        let wc = Worker::new();
        let p = wc.run(move || alloc(&*a3, 64 * MIB));
        let _ = done_tx.send(p);
    });
    let done = done_rx.recv_timeout(Duration::from_secs(10));
    release_tx.send(()).expect("B waiting");
    let p = done.expect("C's allocation finished while B was mapping pages");
    let q = mapping.join().expect("B");
    for x in [p, q, kept] {
        a.free(x).expect("live");
    }
    a.check_invariants().expect("consistent");
}
