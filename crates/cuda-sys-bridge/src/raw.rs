//! Raw allocators over the driver: device memory (`cuMemAlloc`) and pinned host memory
//! (`cuMemHostAlloc`, portable, not write-combined), with a ledger of live blocks so a wrong
//! free is refused and `deviceStats` has its counters.

use crate::device::DeviceContext;
use crate::driver;
use cuda_arena_core::{ArenaError, MemoryInfo, MemoryKind, RawAllocator, RawStats, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Live blocks and counters of one device, shared by its device and pinned allocators.
#[derive(Debug, Default)]
pub(crate) struct DeviceBlocks {
    live: HashMap<u64, (u64, MemoryKind)>,
    stats: RawStats,
}

impl DeviceBlocks {
    /// Counts a map of `len` bytes by the virtual-memory form: one raw allocation.
    pub(crate) fn record_map(&mut self, len: u64) {
        self.stats.count_map(len);
    }

    /// Counts an unmap of `len` bytes: one raw free.
    pub(crate) fn record_unmap(&mut self, len: u64) {
        self.stats.count_unmap(len);
    }

    /// Counts a refused request.
    pub(crate) fn record_failure(&mut self) {
        self.stats.raw_failures += 1;
    }
}

/// A raw allocator for device or pinned memory of one GPU.
#[derive(Debug, Clone)]
pub struct CudaRawAllocator {
    ctx: Arc<DeviceContext>,
    kind: MemoryKind,
    ledger: Arc<Mutex<DeviceBlocks>>,
}

impl CudaRawAllocator {
    pub(crate) fn new(
        ctx: Arc<DeviceContext>,
        kind: MemoryKind,
        ledger: Arc<Mutex<DeviceBlocks>>,
    ) -> Self {
        CudaRawAllocator { ctx, kind, ledger }
    }

    fn check_range(&self, ledger: &DeviceBlocks, addr: u64, len: u64) -> Result<()> {
        let inside = ledger.live.iter().any(|(&b, &(s, k))| {
            k == self.kind && addr >= b && addr.checked_add(len).is_some_and(|e| e <= b + s)
        });
        if inside {
            Ok(())
        } else {
            Err(ArenaError::UnknownPointer {
                addr,
                reason: format!("{len} bytes from here are not inside one live raw block"),
            })
        }
    }
}

/// Counters of a device's raw calls, with the driver's free and total memory.
pub(crate) fn device_stats(ctx: &DeviceContext, ledger: &Mutex<DeviceBlocks>) -> Result<RawStats> {
    let (free, total) = ctx.mem_info()?;
    let (device_waits, stream_waits) = ctx.waits();
    Ok(RawStats {
        free: Some(free),
        total: Some(total),
        device_waits,
        stream_waits,
        ..ledger.lock().stats
    })
}

impl RawAllocator for CudaRawAllocator {
    fn alloc(&self, size: u64) -> Result<u64> {
        let _current = self.ctx.make_current()?;
        let mut ledger = self.ledger.lock();
        let got = match self.kind {
            MemoryKind::CudaPinned | MemoryKind::Cpu => driver::host_alloc(size),
            MemoryKind::Cuda => driver::mem_alloc(size),
        };
        match got {
            Ok(addr) => {
                ledger.live.insert(addr, (size, self.kind));
                ledger.stats.raw_allocs += 1;
                ledger.stats.raw_bytes_outstanding += size;
                Ok(addr)
            }
            Err(e) => {
                ledger.stats.raw_failures += 1;
                Err(e)
            }
        }
    }

    fn free(&self, addr: u64, size: u64) -> Result<()> {
        let mut ledger = self.ledger.lock();
        match ledger.live.get(&addr) {
            Some(&(s, k)) if s == size && k == self.kind => {}
            _ => {
                return Err(ArenaError::UnknownPointer {
                    addr,
                    reason: "not a live raw block of this allocator".into(),
                })
            }
        }
        let _current = self.ctx.make_current()?;
        let freed = match self.kind {
            MemoryKind::CudaPinned | MemoryKind::Cpu => driver::host_free(addr),
            MemoryKind::Cuda => driver::mem_free(addr),
        };
        match freed {
            // At process exit the driver may be gone already: the memory went with it.
            Err(e) if !driver::is_shutdown(&e) => return Err(e),
            _ => {}
        }
        ledger.live.remove(&addr);
        ledger.stats.raw_frees += 1;
        ledger.stats.raw_bytes_outstanding -= size;
        Ok(())
    }

    fn info(&self) -> MemoryInfo {
        MemoryInfo::new(self.kind, self.ctx.ordinal)
    }

    fn raw_stats(&self) -> RawStats {
        let (device_waits, stream_waits) = self.ctx.waits();
        let stats = RawStats {
            device_waits,
            stream_waits,
            ..self.ledger.lock().stats
        };
        match self.ctx.mem_info() {
            Ok((free, total)) => RawStats {
                free: Some(free),
                total: Some(total),
                ..stats
            },
            Err(_) => stats,
        }
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let ledger = self.ledger.lock();
        self.check_range(&ledger, addr, data.len() as u64)?;
        let _current = self.ctx.make_current()?;
        driver::copy_htod(addr, data)
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let ledger = self.ledger.lock();
        self.check_range(&ledger, addr, out.len() as u64)?;
        let _current = self.ctx.make_current()?;
        driver::copy_dtoh(out, addr)
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let ledger = self.ledger.lock();
        self.check_range(&ledger, addr, len)?;
        let _current = self.ctx.make_current()?;
        driver::memset(addr, byte, len)
    }
}
