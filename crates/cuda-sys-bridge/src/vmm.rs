//! Device memory's virtual-memory form for the arena's virtual-memory mode: address ranges
//! from `cuMemAddressReserve`, each map call backed by one physical allocation with
//! `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`, handed back with `cuMemUnmap` (one call
//! per run of whole mappings).
//!
//! One allocation per map call, not per granule: the driver's cost is per allocation (an
//! H100: one 2 MiB granule 35-50 us to create, map and give access to, 16 granules in one
//! allocation 60-110 us in all; `scripts/gpu/vmm_cost.cpp`), and CUDA can unmap only whole
//! mappings anyway (nor map part of an allocation at an offset on its own), which the
//! trait's contract and [`Reservations`] carry to every backend. The handle is released
//! right after it is mapped, so unmapping frees the memory (the mapping holds the only
//! reference). Before unmapping, the context is
//! synchronised: unlike `cuMemFree`, `cuMemUnmap` does not wait for queued work that may still
//! use the memory (PyTorch's expandable segments synchronise for the same reason). The arena
//! unmaps only off its common path. Arena-core's [`Reservations`] checks every call first, so a
//! wrong one is refused before it reaches the driver and changes nothing.

use crate::device::DeviceContext;
use crate::driver;
use crate::raw::DeviceBlocks;
use cuda_arena_core::raw::Reservations;
use cuda_arena_core::{ArenaError, MemoryInfo, MemoryKind, Result, VirtualMemory};
use parking_lot::Mutex;
use std::sync::Arc;

/// The virtual-memory form of one GPU's device memory. Counts its maps and unmaps in the
/// device's raw counters (`deviceStats`).
#[derive(Debug)]
pub struct CudaVirtualMemory {
    ctx: Arc<DeviceContext>,
    ledger: Arc<Mutex<DeviceBlocks>>,
    granularity: u64,
    total: u64,
    /// The devices each mapping is made accessible to: this one first, then every peer the
    /// driver allows. Peers too, because memory from `cuMemCreate` belongs to no context: a
    /// copy issued while another device is current on the thread (ONNX Runtime's threads keep
    /// the device they set first) is refused with `invalid argument` unless that device may
    /// access it (seen with two H100s and sessions on both at once).
    access: Vec<u32>,
    /// Lock order: this, then the ledger.
    ranges: Mutex<Reservations>,
    /// [`VirtualMemory::synchronize`] calls that returned.
    synchronizations: std::sync::atomic::AtomicU64,
}

impl CudaVirtualMemory {
    /// The form for the device of `ctx`; [`ArenaError::Unsupported`] on a device without
    /// virtual-memory management.
    pub(crate) fn new(ctx: Arc<DeviceContext>, ledger: Arc<Mutex<DeviceBlocks>>) -> Result<Self> {
        let _current = ctx.make_current()?;
        if !driver::vmm_supported(ctx.dev)? {
            return Err(ArenaError::unsupported(format!(
                "device {} has no virtual-memory management",
                ctx.ordinal
            )));
        }
        let granularity = driver::mem_granularity(ctx.ordinal)?;
        if !granularity.is_power_of_two() || granularity < 256 {
            return Err(ArenaError::unsupported(format!(
                "device {} reports a virtual-memory granularity of {granularity} bytes",
                ctx.ordinal
            )));
        }
        let total = driver::device_total_mem(ctx.dev)?;
        let mut access = vec![ctx.ordinal];
        access.extend(driver::peers_of(ctx.ordinal)?);
        Ok(CudaVirtualMemory {
            ctx,
            ledger,
            granularity,
            total,
            access,
            ranges: Mutex::new(Reservations::new(granularity)),
            synchronizations: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Maps `[addr, addr+len)` as one physical allocation; on failure maps nothing. The
    /// caller has checked the range and made the context current.
    fn map_allocation(&self, addr: u64, len: u64) -> Result<()> {
        let handle = driver::mem_create(len, self.ctx.ordinal)?;
        let mapped = driver::mem_map(addr, len, handle);
        // The mapping holds the memory from here on; releasing the handle now means
        // unmapping frees it.
        let released = driver::mem_release(handle);
        if let Err(e) = mapped.and(released) {
            // Mapped or not, it is undone (an error means it was not mapped).
            let _ = driver::mem_unmap(addr, len);
            return Err(e);
        }
        if let Err(e) = driver::mem_set_access(addr, len, &self.access) {
            let _ = driver::mem_unmap(addr, len);
            return Err(e);
        }
        Ok(())
    }

    /// Unmaps `[addr, addr + len)`, after waiting for the whole device when `wait` (queued
    /// work may still use the pages).
    fn unmap_after(&self, addr: u64, len: u64, wait: bool) -> Result<()> {
        let mut ranges = self.ranges.lock();
        ranges.check_unmap(addr, len)?;
        let _current = self.ctx.make_current()?;
        if wait {
            self.ctx.synchronize()?;
        }
        // One call for the run of whole mappings (one cuMemUnmap may cover several: an H100
        // unmaps 16 one-granule mappings in one call at 17-21 against 29-39 us per granule
        // one by one, scripts/gpu/vmm_cost.cpp); mapping by mapping if that is refused.
        let mappings = ranges.mappings_in(addr, len);
        if mappings.len() > 1 && driver::mem_unmap(addr, len).is_ok() {
            ranges.mark_unmapped(addr, len);
            self.ledger.lock().record_unmap(len);
            return Ok(());
        }
        for (at, n) in mappings {
            match driver::mem_unmap(at, n) {
                Err(e) if !driver::is_shutdown(&e) => {
                    // What was unmapped so far stays unmapped and counted as such.
                    if at > addr {
                        ranges.mark_unmapped(addr, at - addr);
                        self.ledger.lock().record_unmap(at - addr);
                    }
                    return Err(e);
                }
                _ => {}
            }
        }
        ranges.mark_unmapped(addr, len);
        self.ledger.lock().record_unmap(len);
        Ok(())
    }
}

impl VirtualMemory for CudaVirtualMemory {
    fn granularity(&self) -> u64 {
        self.granularity
    }

    fn total_memory(&self) -> u64 {
        self.total
    }

    fn reserve(&self, size: u64) -> Result<u64> {
        let mut ranges = self.ranges.lock();
        ranges.check_reserve(size)?;
        let _current = self.ctx.make_current()?;
        let base = driver::mem_address_reserve(size, self.granularity)?;
        ranges.add(base, size);
        Ok(base)
    }

    fn release(&self, base: u64, size: u64) -> Result<()> {
        let mut ranges = self.ranges.lock();
        ranges.check_release(base, size)?;
        let _current = self.ctx.make_current()?;
        match driver::mem_address_free(base, size) {
            Err(e) if !driver::is_shutdown(&e) => return Err(e),
            _ => {}
        }
        ranges.remove(base);
        Ok(())
    }

    fn map(&self, addr: u64, len: u64) -> Result<()> {
        let mut ranges = self.ranges.lock();
        ranges.check_map(addr, len)?;
        let _current = self.ctx.make_current()?;
        if let Err(e) = self.map_allocation(addr, len) {
            self.ledger.lock().record_failure();
            return Err(e);
        }
        ranges.mark_mapped(addr, len);
        self.ledger.lock().record_map(len);
        Ok(())
    }

    fn unmap(&self, addr: u64, len: u64) -> Result<()> {
        self.unmap_after(addr, len, true)
    }

    fn synchronize(&self) -> Result<()> {
        let _current = self.ctx.make_current()?;
        self.ctx.synchronize()?;
        self.synchronizations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn synchronizations(&self) -> u64 {
        self.synchronizations
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn unmap_idle(&self, addr: u64, len: u64) -> Result<()> {
        // The arena knows every stream that used these pages is past its last use.
        self.unmap_after(addr, len, false)
    }

    fn mapped_bytes(&self) -> u64 {
        self.ranges.lock().mapped_bytes()
    }

    fn mappings(&self) -> Vec<(u64, u64)> {
        self.ranges.lock().mappings()
    }

    fn info(&self) -> MemoryInfo {
        MemoryInfo::new(MemoryKind::Cuda, self.ctx.ordinal)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let ranges = self.ranges.lock();
        check_mapped(&ranges, addr, data.len() as u64)?;
        let _current = self.ctx.make_current()?;
        driver::copy_htod(addr, data)
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let ranges = self.ranges.lock();
        check_mapped(&ranges, addr, out.len() as u64)?;
        let _current = self.ctx.make_current()?;
        driver::copy_dtoh(out, addr)
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let ranges = self.ranges.lock();
        check_mapped(&ranges, addr, len)?;
        let _current = self.ctx.make_current()?;
        driver::memset(addr, byte, len)
    }
}

fn check_mapped(ranges: &Reservations, addr: u64, len: u64) -> Result<()> {
    if len == 0 || ranges.is_mapped(addr, len) {
        Ok(())
    } else {
        Err(ArenaError::UnknownPointer {
            addr,
            reason: format!("{len} bytes from here are not mapped memory"),
        })
    }
}

impl Drop for CudaVirtualMemory {
    fn drop(&mut self) {
        // An arena retires its pages and ranges before it lets go of this; anything left
        // (a failed unmap) goes back now. Errors cannot be reported from here.
        let ranges = self.ranges.get_mut();
        let left = ranges.ranges();
        if left.is_empty() {
            return;
        }
        let Ok(_current) = self.ctx.make_current() else {
            return;
        };
        let _ = self.ctx.synchronize();
        let g = self.granularity;
        for (base, size) in left {
            let mut at = 0;
            while at < size {
                if ranges.is_mapped(base + at, g) {
                    let _ = driver::mem_unmap(base + at, g);
                    ranges.mark_unmapped(base + at, g);
                    self.ledger.lock().record_unmap(g);
                }
                at += g;
            }
            let _ = driver::mem_address_free(base, size);
        }
    }
}
