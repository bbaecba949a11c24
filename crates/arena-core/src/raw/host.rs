//! The `host` backend: real host memory from the system allocator, 256-byte aligned, so
//! tests can write and read what the arena hands out.
//!
//! Its virtual-memory form reserves address space with `mmap(PROT_NONE, MAP_NORESERVE)`,
//! commits pages with `mprotect(PROT_READ | PROT_WRITE)` (the kernel backs them on first
//! touch) and decommits them by mapping fresh `PROT_NONE` pages over them (`MAP_FIXED`),
//! which drops their memory at once; `munmap` gives the range back. Reads and writes of
//! pages that are not mapped are refused before they fault.
#![allow(unsafe_code)]

use super::sim_device::SimDevice;
use super::vm::{Reservations, VirtualMemory};
use super::{DeviceLimits, RawAllocator, RawStats, DEFAULT_HOST_TOTAL_MEMORY};
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::{MemoryInfo, MemoryKind};
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
struct HostLedger(Mutex<HostState>);

#[derive(Debug)]
struct HostState {
    ledger: SimDevice,
    /// Ranges reserved by the virtual-memory form.
    vm: Reservations,
    /// [`VirtualMemory::synchronize`] calls (nothing runs asynchronously here to wait for).
    synchronizations: u64,
    /// [`VirtualMemory::unmap`] calls, which CUDA's would wait for the device in (not
    /// [`VirtualMemory::unmap_idle`]'s).
    waiting_unmaps: u64,
}

impl Drop for HostLedger {
    fn drop(&mut self) {
        let state = self.0.get_mut();
        for (addr, size) in state.ledger.blocks() {
            if let Ok(layout) = layout(size) {
                // SAFETY: every block in the ledger came from `alloc` with this layout and
                // has not been freed (frees remove it from the ledger).
                unsafe { dealloc(addr as usize as *mut u8, layout) };
            }
        }
        for (base, size) in state.vm.ranges() {
            // Unmapping the whole range drops its committed pages too.
            let _ = os::release(base, size);
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
            ledger: Arc::new(HostLedger(Mutex::new(HostState {
                ledger: SimDevice::new(limits),
                vm: Reservations::new(os::page_size()),
                synchronizations: 0,
                waiting_unmaps: 0,
            }))),
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
        let mut state = self.ledger.0.lock();
        let ledger = &mut state.ledger;
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
        let mut state = self.ledger.0.lock();
        let ledger = &mut state.ledger;
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
        let state = self.ledger.0.lock();
        RawStats {
            device_waits: state.synchronizations + state.waiting_unmaps,
            ..state.ledger.stats()
        }
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let state = self.ledger.0.lock();
        state.ledger.check_range(addr, data.len() as u64)?;
        // SAFETY: the range lies inside a live block we allocated (checked just above, under
        // the lock that frees also take), and `data` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len())
        };
        Ok(())
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let state = self.ledger.0.lock();
        state.ledger.check_range(addr, out.len() as u64)?;
        // SAFETY: as in `write`; `out` is a distinct, writable Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let state = self.ledger.0.lock();
        state.ledger.check_range(addr, len)?;
        // SAFETY: the range lies inside a live block (checked above); `len` fits in usize
        // because the block does.
        unsafe { std::ptr::write_bytes(addr as usize as *mut u8, byte, len as usize) };
        Ok(())
    }
}

impl HostState {
    /// Checks that `[addr, addr + len)` is mapped memory of a reservation.
    fn check_mapped(&self, addr: u64, len: u64) -> Result<()> {
        if len == 0 || self.vm.is_mapped(addr, len) {
            Ok(())
        } else {
            Err(ArenaError::unknown_pointer(
                addr,
                format!("{len} bytes from here are not mapped memory"),
            ))
        }
    }
}

/// The virtual-memory form of a [`HostAllocator`]'s device ([`HostAllocator::vm`]): shares its
/// limits and counters.
#[derive(Debug, Clone)]
pub struct HostVm {
    ledger: Arc<HostLedger>,
    info: MemoryInfo,
}

impl HostAllocator {
    /// The device's virtual-memory form (same limits and counters), reporting the same info.
    pub fn vm(&self) -> HostVm {
        HostVm {
            ledger: self.ledger.clone(),
            info: self.info,
        }
    }
}

impl VirtualMemory for HostVm {
    fn granularity(&self) -> u64 {
        self.ledger.0.lock().vm.granularity()
    }

    fn total_memory(&self) -> u64 {
        self.ledger.0.lock().ledger.total_memory()
    }

    fn reserve(&self, size: u64) -> Result<u64> {
        let mut state = self.ledger.0.lock();
        state.vm.check_reserve(size)?;
        let base = os::reserve(size)?;
        state.vm.add(base, size);
        Ok(base)
    }

    fn synchronize(&self) -> Result<()> {
        self.ledger.0.lock().synchronizations += 1;
        Ok(())
    }

    fn synchronizations(&self) -> u64 {
        self.ledger.0.lock().synchronizations
    }

    fn release(&self, base: u64, size: u64) -> Result<()> {
        let mut state = self.ledger.0.lock();
        state.vm.check_release(base, size)?;
        os::release(base, size)?;
        state.vm.remove(base);
        Ok(())
    }

    fn map(&self, addr: u64, len: u64) -> Result<()> {
        let mut state = self.ledger.0.lock();
        state.vm.check_map(addr, len)?;
        state.ledger.admit_mapped(len)?;
        // SAFETY: `[addr, addr + len)` lies inside a range this allocator reserved and has
        // nothing mapped in it (checked above), so no Rust object lives there.
        unsafe { os::commit(addr, len) }.map_err(|e| state.ledger.refuse(len, e))?;
        state.vm.mark_mapped(addr, len);
        state.ledger.record_map(len);
        Ok(())
    }

    fn unmap(&self, addr: u64, len: u64) -> Result<()> {
        self.unmap_idle(addr, len)?;
        self.ledger.0.lock().waiting_unmaps += 1;
        Ok(())
    }

    fn unmap_idle(&self, addr: u64, len: u64) -> Result<()> {
        let mut state = self.ledger.0.lock();
        state.vm.check_unmap(addr, len)?;
        // SAFETY: the range is mapped memory of a reservation (checked above); the arena
        // unmaps only pages with no live allocation in them, and reads and writes check
        // under this lock that their range is mapped.
        unsafe { os::decommit(addr, len) }?;
        state.vm.mark_unmapped(addr, len);
        state.ledger.record_unmap(len);
        Ok(())
    }

    fn mapped_bytes(&self) -> u64 {
        self.ledger.0.lock().vm.mapped_bytes()
    }

    fn mappings(&self) -> Vec<(u64, u64)> {
        self.ledger.0.lock().vm.mappings()
    }

    fn info(&self) -> MemoryInfo {
        self.info
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let state = self.ledger.0.lock();
        state.check_mapped(addr, data.len() as u64)?;
        // SAFETY: the range is committed, readable and writable memory (checked above, under
        // the lock that unmaps also take), and `data` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len())
        };
        Ok(())
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let state = self.ledger.0.lock();
        state.check_mapped(addr, out.len() as u64)?;
        // SAFETY: as in `write`; `out` is a distinct, writable Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let state = self.ledger.0.lock();
        state.check_mapped(addr, len)?;
        // SAFETY: the range is committed memory (checked above); `len` fits in usize because
        // the reservation does.
        unsafe { std::ptr::write_bytes(addr as usize as *mut u8, byte, len as usize) };
        Ok(())
    }
}

/// The system calls of the virtual-memory form, through `libc`.
mod os {
    use crate::types::error::{ArenaError, Result};

    /// The system's page size: the mapping granularity.
    pub(super) fn page_size() -> u64 {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(n)
            .ok()
            .filter(|n| n.is_power_of_two())
            .unwrap_or(4096)
    }

    fn last_error(call: &str) -> String {
        format!("{call}: {}", std::io::Error::last_os_error())
    }

    /// Address space with nothing behind it: `mmap(PROT_NONE, MAP_NORESERVE)`.
    pub(super) fn reserve(size: u64) -> Result<u64> {
        let len = usize::try_from(size)
            .map_err(|_| ArenaError::oom(size, "larger than the host address space"))?;
        // SAFETY: a new private anonymous mapping at an address the kernel picks; it touches
        // no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ArenaError::oom(size, last_error("mmap")));
        }
        Ok(p as usize as u64)
    }

    /// Unmaps a whole reservation (`munmap`).
    pub(super) fn release(base: u64, size: u64) -> Result<()> {
        // SAFETY: `[base, base + size)` is a reservation this allocator made with `reserve`
        // and gives back once; nothing in it is referenced any more.
        let rc = unsafe { libc::munmap(base as usize as *mut libc::c_void, size as usize) };
        if rc != 0 {
            return Err(ArenaError::invalid_argument(last_error("munmap")));
        }
        Ok(())
    }

    /// Makes reserved pages readable and writable; the kernel backs them on first touch.
    ///
    /// # Safety
    /// `[addr, addr + len)` must lie inside a reservation made by `reserve`, with nothing
    /// mapped in it.
    pub(super) unsafe fn commit(addr: u64, len: u64) -> std::result::Result<(), String> {
        // SAFETY: the caller guarantees the range is one of our PROT_NONE reservations.
        let rc = unsafe {
            libc::mprotect(
                addr as usize as *mut libc::c_void,
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(last_error("mprotect"));
        }
        Ok(())
    }

    /// Drops the memory behind committed pages: fresh `PROT_NONE` pages mapped over them
    /// (`MAP_FIXED` replaces the old pages and frees what backed them).
    ///
    /// # Safety
    /// `[addr, addr + len)` must be committed pages of a reservation made by `reserve` that
    /// nothing refers to any more.
    pub(super) unsafe fn decommit(addr: u64, len: u64) -> Result<()> {
        // SAFETY: the caller guarantees the range is ours and unused; MAP_FIXED over it
        // replaces only those pages.
        let p = unsafe {
            libc::mmap(
                addr as usize as *mut libc::c_void,
                len as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ArenaError::invalid_argument(last_error("mmap(MAP_FIXED)")));
        }
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
    fn mapped_pages_hold_data_and_unmapped_ones_refuse_access() {
        let host = HostAllocator::new(DeviceLimits::with_total(1 << 20));
        let h = host.vm();
        let g = h.granularity();
        let base = h.reserve(64 * g).expect("address space");
        h.map(base, g).expect("fits");
        h.map(base + g, g).expect("fits");
        h.map(base + 3 * g, g).expect("fits");
        h.write(base + g - 2, &[1, 2, 3, 4])
            .expect("mapped, across two pages");
        h.write(base + 3 * g, &[9]).expect("mapped");
        h.unmap(base, g).expect("mapped");
        let mut out = [0u8; 2];
        h.read(base + g, &mut out).expect("still mapped");
        assert_eq!(out, [3, 4]);
        assert!(
            h.read(base + g - 2, &mut out).is_err(),
            "half of it unmapped"
        );
        assert!(h.write(base + 2 * g, &[0]).is_err(), "never mapped");
        h.map(base, g).expect("fits again");
        h.read(base + g - 2, &mut out).expect("mapped again");
        assert_eq!(out, [0, 0], "a page mapped again starts zeroed");
        assert_eq!(h.mapped_bytes(), 3 * g);
        assert_eq!(host.raw_stats().raw_bytes_outstanding, 3 * g);
        assert!(
            h.map(base + 4 * g, (1 << 20) - 2 * g).is_err(),
            "past the device's total"
        );
        h.unmap(base, 2 * g).expect("mapped");
        h.unmap(base + 3 * g, g).expect("mapped");
        h.release(base, 64 * g).expect("empty");
        assert_eq!(host.raw_stats().raw_bytes_outstanding, 0);
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
