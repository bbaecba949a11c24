//! The `host` backend: real host memory from the system allocator, 256-byte aligned, so
//! tests can write and read what the arena hands out.
#![allow(unsafe_code)]

use super::ledger::Ledger;
use super::{DeviceLimits, RawAllocator, RawStats, DEFAULT_HOST_TOTAL_MEMORY};
use crate::error::{ArenaError, Result};
use crate::memory_info::{MemoryInfo, MemoryKind};
use parking_lot::Mutex;
use std::alloc::{alloc, dealloc, Layout};
use std::sync::Arc;

const ALIGN: usize = 256;

/// A simulated device backed by host memory. Cloning shares the device (its limits, counters
/// and blocks); memory still held when the last clone drops is returned then.
#[derive(Debug, Clone)]
pub struct HostAllocator {
    ledger: Arc<HostLedger>,
    info: MemoryInfo,
}

#[derive(Debug)]
struct HostLedger(Mutex<Ledger>);

impl Drop for HostLedger {
    fn drop(&mut self) {
        for (addr, size) in self.0.get_mut().blocks() {
            if let Ok(layout) = layout(size) {
                // SAFETY: every block in the ledger came from `alloc` with this layout and
                // has not been freed (frees remove it from the ledger).
                unsafe { dealloc(addr as usize as *mut u8, layout) };
            }
        }
    }
}

fn layout(size: u64) -> Result<Layout> {
    usize::try_from(size)
        .ok()
        .and_then(|s| Layout::from_size_align(s, ALIGN).ok())
        .ok_or_else(|| ArenaError::oom(size, "larger than the host address space"))
}

impl Default for HostAllocator {
    fn default() -> Self {
        Self::new(DeviceLimits::with_total(DEFAULT_HOST_TOTAL_MEMORY))
    }
}

impl HostAllocator {
    /// A device with `limits`, serving `Cpu` memory.
    pub fn new(limits: DeviceLimits) -> Self {
        HostAllocator {
            ledger: Arc::new(HostLedger(Mutex::new(Ledger::new(limits)))),
            info: MemoryInfo::new(MemoryKind::Cpu, 0),
        }
    }

    /// The same device, reporting `info`.
    pub fn with_info(mut self, info: MemoryInfo) -> Self {
        self.info = info;
        self
    }
}

impl RawAllocator for HostAllocator {
    fn alloc(&self, size: u64) -> Result<u64> {
        let mut ledger = self.ledger.0.lock();
        ledger.admit(size)?;
        let layout = layout(size).map_err(|e| ledger.refuse(size, e.to_string()))?;
        // SAFETY: `layout` has a non-zero size (admit refuses 0) and a power-of-two alignment.
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            return Err(ledger.refuse(size, "the system allocator returned null".into()));
        }
        let addr = p as usize as u64;
        ledger.record_alloc(addr, size);
        Ok(addr)
    }

    fn free(&self, addr: u64, size: u64) -> Result<()> {
        let mut ledger = self.ledger.0.lock();
        ledger.check_free(addr, size)?;
        let layout = layout(size)?;
        // SAFETY: the ledger holds `addr` as a live block of `size` bytes, which `alloc`
        // obtained with exactly this layout.
        unsafe { dealloc(addr as usize as *mut u8, layout) };
        ledger.record_free(addr, size);
        Ok(())
    }

    fn info(&self) -> MemoryInfo {
        self.info
    }

    fn raw_stats(&self) -> RawStats {
        self.ledger.0.lock().stats()
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let ledger = self.ledger.0.lock();
        ledger.check_range(addr, data.len() as u64)?;
        // SAFETY: the range lies inside a live block we allocated (checked just above, under
        // the lock that frees also take), and `data` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len())
        };
        Ok(())
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let ledger = self.ledger.0.lock();
        ledger.check_range(addr, out.len() as u64)?;
        // SAFETY: as in `write`; `out` is a distinct, writable Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let ledger = self.ledger.0.lock();
        ledger.check_range(addr, len)?;
        // SAFETY: the range lies inside a live block (checked above); `len` fits in usize
        // because the block does.
        unsafe { std::ptr::write_bytes(addr as usize as *mut u8, byte, len as usize) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_aligned_writable_and_readable() {
        let h = HostAllocator::new(DeviceLimits::with_total(1 << 20));
        let a = h.alloc(1000).expect("fits");
        assert_eq!(a % 256, 0);
        h.write(a + 10, &[1, 2, 3]).expect("inside");
        let mut out = [0u8; 3];
        h.read(a + 10, &mut out).expect("inside");
        assert_eq!(out, [1, 2, 3]);
        h.fill(a, 7, 1000).expect("inside");
        h.read(a + 997, &mut out).expect("inside");
        assert_eq!(out, [7, 7, 7]);
        h.free(a, 1000).expect("live");
    }

    #[test]
    fn ranges_outside_live_blocks_are_refused() {
        let h = HostAllocator::new(DeviceLimits::with_total(1 << 20));
        let a = h.alloc(512).expect("fits");
        assert!(h.write(a + 510, &[0; 3]).is_err());
        h.free(a, 512).expect("live");
        assert!(h.fill(a, 0, 1).is_err());
    }
}
