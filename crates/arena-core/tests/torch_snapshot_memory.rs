//! Issue 26, item 1: reading a PyTorch memory snapshot takes memory for what the replay keeps
//! (its events and operations), not for what else the file holds. Measured with a counting
//! global allocator: the peak of bytes allocated while a snapshot is read, against the
//! bytes of the operations read. (Before the reader was its own, a snapshot padded with 40 MB
//! of `None`s took 1.3 GB: 65 bytes per byte of file.)

use cuda_arena_core::trace::torch_snapshot::read_snapshot_from;
use cuda_arena_core::trace::TraceOp;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufReader, Cursor, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = NOW.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is passed to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            NOW.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// One measurement at a time: the counter is the process's.
static ONE: Mutex<()> = Mutex::new(());

/// The most bytes allocated at once while `f` runs, beyond what was allocated before.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = NOW.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

fn short_str(v: &str) -> Vec<u8> {
    let mut p = vec![0x8c, v.len() as u8];
    p.extend_from_slice(v.as_bytes());
    p
}

/// An event dict as CPython pickles one, with a stack trace of `frames` frames.
fn event(action: &str, addr: u64, size: u32, frames: usize) -> Vec<u8> {
    let mut p = vec![b'}', 0x94, b'('];
    p.extend(short_str("action"));
    p.extend(short_str(action));
    p.extend(short_str("addr"));
    p.extend_from_slice(&[0x8a, 8]);
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend(short_str("size"));
    p.push(b'J');
    p.extend_from_slice(&size.to_le_bytes());
    p.extend(short_str("stream"));
    p.extend_from_slice(&[b'K', 0]);
    p.extend(short_str("frames"));
    p.extend_from_slice(&[b']', 0x94]);
    if frames > 0 {
        p.push(b'(');
        for line in 0..frames {
            p.extend_from_slice(&[b'}', 0x94, b'(']);
            p.extend(short_str("filename"));
            p.extend(short_str(
                "/opt/torch/site-packages/torch/nn/modules/module.py",
            ));
            p.extend(short_str("line"));
            p.extend_from_slice(&[b'M', line as u8, 1]);
            p.extend(short_str("name"));
            p.extend(short_str("_call_impl"));
            p.push(b'u');
        }
        p.push(b'e');
    }
    p.push(b'u');
    p
}

/// `"device_traces": [[...]]`: `pairs` alloc/free pairs on 64 addresses.
fn device_traces(pairs: usize, frames: usize) -> Vec<u8> {
    let mut p = short_str("device_traces");
    p.extend_from_slice(&[b']', 0x94, b']', 0x94]);
    for batch in (0..pairs).collect::<Vec<_>>().chunks(500) {
        p.push(b'(');
        for &i in batch {
            let addr = 0x7f00_0000_0000 + (i as u64 % 64) * 4096;
            let size = 512 * (1 + i as u32 % 7);
            p.extend(event("alloc", addr, size, frames));
            p.extend(event("free_requested", addr, size, frames));
        }
        p.push(b'e');
    }
    p.push(b'a');
    p
}

/// `segments` as a list of `nones` Nones, in CPython's batches of 1,000: made as it is read,
/// so the test holds none of it.
struct Nones {
    left: u64,
    at: usize,
}

const BATCH: usize = 1002; // MARK, 1,000 Nones, APPENDS

impl Read for Nones {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < out.len() && self.left > 0 {
            out[n] = match self.at {
                0 => b'(',
                a if a == BATCH - 1 => b'e',
                _ => b'N',
            };
            self.at = (self.at + 1) % BATCH;
            if self.at == 0 {
                self.left -= 1;
            }
            n += 1;
        }
        Ok(n)
    }
}

/// A snapshot of `pairs` events padded with `megabytes` of Nones in `segments`, as a stream.
fn padded(megabytes: u64, pairs: usize) -> impl Read {
    let mut head = vec![0x80, 4, b'}', 0x94, b'('];
    head.extend(short_str("segments"));
    head.extend_from_slice(&[b']', 0x94]);
    let mut tail = device_traces(pairs, 0);
    tail.extend_from_slice(b"u.");
    let batches = megabytes * 1_000_000 / BATCH as u64;
    Cursor::new(head)
        .chain(Nones {
            left: batches,
            at: 0,
        })
        .chain(Cursor::new(tail))
}

#[test]
fn a_snapshot_padded_with_40_and_200_mb_of_nones_reads_in_what_its_events_take() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    for megabytes in [40, 200] {
        let (t, peak) =
            peak_of(|| read_snapshot_from(BufReader::new(padded(megabytes, 1000)), None));
        let t = t.expect("a snapshot");
        eprintln!("{megabytes} MB of Nones: peak {peak} bytes");
        assert_eq!(t.ops.len(), 2000);
        // The 2,000 events and operations take ~0.2 MB; a 64 KiB stack of the file's Nones,
        // the read buffer and the memo add little. 1 MiB, whatever the padding.
        assert!(peak < 1 << 20, "{megabytes} MB: peak {peak} bytes");
    }
}

#[test]
fn a_snapshot_with_stack_traces_reads_in_a_small_multiple_of_its_operations() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut p = vec![0x80, 4, b'}', 0x94, b'('];
    p.extend(device_traces(100_000, 4));
    p.extend_from_slice(b"u.");
    let (t, peak) = peak_of(|| read_snapshot_from(&p[..], None));
    let t = t.expect("a snapshot");
    assert_eq!(t.ops.len(), 200_000);
    let ops_bytes = t.ops.len() * std::mem::size_of::<TraceOp>();
    eprintln!(
        "{} bytes of file: peak {peak} bytes, {ops_bytes} bytes of operations",
        p.len()
    );
    // Events (32 bytes each, in a vector that doubles) and the operations made of them:
    // 2.7x the operations' bytes measured, against the file's 90 MB.
    assert!(
        peak < 5 * ops_bytes,
        "peak {peak} bytes for {ops_bytes} bytes of operations ({} bytes of file)",
        p.len()
    );
}
