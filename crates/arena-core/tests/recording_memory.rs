//! A recording's memory is bounded whatever the traffic and however slow the disk: measured
//! with a counting global allocator, so this file holds one test (others running beside it
//! in the same process would count too).

use cuda_arena_core::{
    AddressSpaceAllocator, Allocator, Arena, ArenaConfig, Recorder, RecordingAllocator,
    RECORD_BUFFER_BYTES,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The system allocator, counting the bytes live and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A disk much slower than the traffic: every write waits, and the bytes go nowhere.
struct SlowDisk {
    written: Arc<AtomicUsize>,
}

impl Write for SlowDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        self.written.fetch_add(buf.len(), Ordering::Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_recording_to_a_slow_disk_holds_two_buffers_at_most_however_much_it_writes() {
    let a = RecordingAllocator::new(Arc::new(
        Arena::new(AddressSpaceAllocator::default(), ArenaConfig::default()).expect("arena"),
    ));
    let written = Arc::new(AtomicUsize::new(0));
    let sink = SlowDisk {
        written: written.clone(),
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    a.start_recording_with(|| {
        Recorder::with_sink("slow disk", Box::new(sink), RECORD_BUFFER_BYTES)
    })
    .expect("starts");
    for size in (0..500_000u64).map(|i| 256 + i % 4096) {
        let p = a.alloc(size).expect("fits").expect("non-zero");
        a.free(p).expect("live");
    }
    let summary = a.stop_recording().expect("stops");
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(summary.ops, 1_000_000);
    assert_eq!(written.load(Ordering::Relaxed) as u64, summary.bytes);
    // The trace is ~45 MB; the recording held two buffers and small change.
    assert!(summary.bytes > 20 * RECORD_BUFFER_BYTES as u64);
    assert!(
        peak < 2 * RECORD_BUFFER_BYTES + (256 << 10),
        "{peak} bytes held while writing {} bytes",
        summary.bytes
    );
}
