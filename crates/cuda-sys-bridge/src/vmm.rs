//! Device memory's virtual-memory form for the arena's virtual-memory mode: address ranges
//! from `cuMemAddressReserve`, backed page by page with `cuMemCreate` + `cuMemMap` +
//! `cuMemSetAccess`, handed back with `cuMemUnmap` (one call per run of pages).
//!
//! Each granule (2 MiB on an H100) is its own physical allocation, so any page can be
//! unmapped on its own; its handle is released right after it is mapped, so unmapping it
//! frees the memory (the mapping holds the only reference). Before unmapping, the context is
//! synchronised: unlike `cuMemFree`, `cuMemUnmap` does not wait for queued work that may still
//! use the memory (PyTorch's expandable segments synchronise for the same reason). The arena
//! unmaps only off its common path. Arena-core's [`Reservations`] checks every call first, so a
//! wrong one is refused before it reaches the driver and changes nothing.

use crate::device::DeviceContext;
use crate::driver;
use crate::raw::Ledger;
use cuda_arena_core::raw::Reservations;
use cuda_arena_core::{ArenaError, MemoryInfo, MemoryKind, Result, VirtualMemory};
use parking_lot::Mutex;
use std::sync::Arc;

/// The virtual-memory form of one GPU's device memory. Counts its maps and unmaps in the
/// device's raw counters (`deviceStats`).
#[derive(Debug)]
pub struct CudaVirtualMemory {
    ctx: Arc<DeviceContext>,
    ledger: Arc<Mutex<Ledger>>,
    granularity: u64,
    total: u64,
    /// Lock order: this, then the ledger.
    ranges: Mutex<Reservations>,
}

impl CudaVirtualMemory {
    /// The form for the device of `ctx`; `ERR_ARENA_INVALID_ARGUMENT` ("not supported") on a
    /// device without virtual-memory management.
    pub(crate) fn new(ctx: Arc<DeviceContext>, ledger: Arc<Mutex<Ledger>>) -> Result<Self> {
        let _current = ctx.make_current()?;
        if !driver::vmm_supported(ctx.dev)? {
            return Err(ArenaError::InvalidArgument {
                reason: format!(
                    "virtual memory management is not supported on device {}",
                    ctx.ordinal
                ),
            });
        }
        let granularity = driver::mem_granularity(ctx.ordinal)?;
        if !granularity.is_power_of_two() || granularity < 256 {
            return Err(ArenaError::InvalidArgument {
                reason: format!(
                    "device {} reports a granularity of {granularity} bytes: not supported",
                    ctx.ordinal
                ),
            });
        }
        let total = driver::device_total_mem(ctx.dev)?;
        Ok(CudaVirtualMemory {
            ctx,
            ledger,
            granularity,
            total,
            ranges: Mutex::new(Reservations::new(granularity)),
        })
    }

    /// Maps `[addr, addr+len)`, one granule per physical allocation; on failure unmaps what
    /// it mapped. The caller has checked the range and made the context current.
    fn map_granules(&self, addr: u64, len: u64) -> Result<()> {
        let g = self.granularity;
        let mut done = 0;
        let undo = |done: u64| {
            let mut at = 0;
            while at < done {
                let _ = driver::mem_unmap(addr + at, g);
                at += g;
            }
        };
        while done < len {
            let handle = match driver::mem_create(g, self.ctx.ordinal) {
                Ok(h) => h,
                Err(e) => {
                    undo(done);
                    return Err(e);
                }
            };
            let mapped = driver::mem_map(addr + done, g, handle);
            // The mapping holds the memory from here on; releasing the handle now means
            // unmapping frees it.
            let released = driver::mem_release(handle);
            if let Err(e) = mapped.and(released) {
                // Mapped or not, this granule is undone (an error means it was not mapped).
                let _ = driver::mem_unmap(addr + done, g);
                undo(done);
                return Err(e);
            }
            done += g;
        }
        if let Err(e) = driver::mem_set_access(addr, len, self.ctx.ordinal) {
            undo(done);
            return Err(e);
        }
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
        if let Err(e) = self.map_granules(addr, len) {
            self.ledger.lock().record_failure();
            return Err(e);
        }
        ranges.mark_mapped(addr, len);
        self.ledger.lock().record_map(len);
        Ok(())
    }

    fn unmap(&self, addr: u64, len: u64) -> Result<()> {
        let mut ranges = self.ranges.lock();
        ranges.check_unmap(addr, len)?;
        let _current = self.ctx.make_current()?;
        // Queued work may still use these pages.
        driver::ctx_synchronize()?;
        // One call for the run: it is whole mappings (one per granule), which one cuMemUnmap
        // may cover, and it costs about half of one call per granule (H100: 20-26 against
        // 36-42 us per 2 MiB page, scripts/gpu/vmm_cost.cpp). Page by page if it is refused.
        if len > self.granularity && driver::mem_unmap(addr, len).is_ok() {
            ranges.mark_unmapped(addr, len);
            self.ledger.lock().record_unmap(len);
            return Ok(());
        }
        let g = self.granularity;
        let mut at = 0;
        while at < len {
            match driver::mem_unmap(addr + at, g) {
                Err(e) if !driver::is_shutdown(&e) => {
                    // What was unmapped so far stays unmapped and counted as such.
                    if at > 0 {
                        ranges.mark_unmapped(addr, at);
                        self.ledger.lock().record_unmap(at);
                    }
                    return Err(e);
                }
                _ => {}
            }
            at += g;
        }
        ranges.mark_unmapped(addr, len);
        self.ledger.lock().record_unmap(len);
        Ok(())
    }

    fn mapped_bytes(&self) -> u64 {
        self.ranges.lock().mapped_bytes()
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
        let _ = driver::ctx_synchronize();
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
