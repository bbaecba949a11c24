//! `CudaBackend`: arena-core's `Backend` over the GPUs of this machine.

use crate::availability::ensure_cuda;
use crate::device::{device_count, DeviceContext, DeviceInfo};
use crate::events::CudaEvents;
use crate::pool::CudaPoolAllocator;
use crate::raw::{device_stats, CudaRawAllocator, DeviceBlocks};
use crate::stream::CudaStream;
use cuda_arena_core::devices::backend::{SharedRaw, SharedVm};
use cuda_arena_core::{
    Allocator, ArenaConfig, ArenaError, Backend, HostAllocator, MemoryKind, RawStats, Result,
    StreamEvents,
};
use parking_lot::Mutex;
use std::sync::Arc;

#[derive(Debug)]
struct Gpu {
    ctx: Arc<DeviceContext>,
    ledger: Arc<Mutex<DeviceBlocks>>,
    info: DeviceInfo,
    /// Pooled events for the streams the host owns (issue 13).
    events: Arc<CudaEvents>,
}

/// Every GPU of the machine, each with its primary context retained.
#[derive(Debug)]
pub struct CudaBackend {
    gpus: Vec<Gpu>,
    cpu: SharedRaw,
}

impl CudaBackend {
    /// Opens every device; `ERR_NO_CUDA` without a usable driver.
    pub fn new() -> Result<Self> {
        ensure_cuda()?;
        let gpus = (0..device_count())
            .map(|i| {
                let ctx = DeviceContext::open(i)?;
                let info = ctx.info()?;
                Ok(Gpu {
                    events: Arc::new(CudaEvents::new(ctx.clone())),
                    ctx,
                    ledger: Arc::new(Mutex::new(DeviceBlocks::default())),
                    info,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(CudaBackend {
            gpus,
            cpu: Arc::new(HostAllocator::default()),
        })
    }

    fn gpu(&self, device: u32) -> Result<&Gpu> {
        self.gpus
            .get(device as usize)
            .ok_or_else(|| self.no_device(device))
    }

    /// What the driver says of device `device`.
    pub fn device_info(&self, device: u32) -> Result<DeviceInfo> {
        self.gpu(device)?.ctx.info()
    }

    /// The pooled events of device `device`.
    pub fn events(&self, device: u32) -> Result<Arc<CudaEvents>> {
        Ok(self.gpu(device)?.events.clone())
    }

    /// A new stream on device `device`.
    pub fn create_stream(&self, device: u32) -> Result<CudaStream> {
        let g = self.gpu(device)?;
        CudaStream::new(g.ctx.clone(), g.events.clone())
    }

    /// A memory-pool allocator of its own on `device` (what `arena.use_cuda_mempool=1`
    /// selects), outside any factory: for tests and benchmarks.
    pub fn memory_pool(&self, device: u32, config: &ArenaConfig) -> Result<CudaPoolAllocator> {
        CudaPoolAllocator::new(self.gpu(device)?.ctx.clone(), config)
    }

    /// `cuMemAllocAsync` on `device`'s default pool, for baselines.
    pub fn default_pool(&self, device: u32) -> Result<crate::DefaultPoolAllocator> {
        crate::DefaultPoolAllocator::new(self.gpu(device)?.ctx.clone())
    }

    /// The virtual-memory form of `device`'s memory (what `arena.use_virtual_memory=1`
    /// builds its arena on), outside any factory: for tests and benchmarks.
    /// [`ArenaError::Unsupported`] on a device without virtual-memory management.
    pub fn virtual_memory_of(&self, device: u32) -> Result<crate::CudaVirtualMemory> {
        let g = self.gpu(device)?;
        crate::CudaVirtualMemory::new(g.ctx.clone(), g.ledger.clone())
    }

    /// The raw device-memory allocator of `device`, for baselines.
    pub fn device_memory(&self, device: u32) -> Result<CudaRawAllocator> {
        let g = self.gpu(device)?;
        Ok(CudaRawAllocator::new(
            g.ctx.clone(),
            MemoryKind::Cuda,
            g.ledger.clone(),
        ))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> u32 {
        self.gpus.len() as u32
    }

    fn raw(&self, kind: MemoryKind, device: u32) -> Result<SharedRaw> {
        if kind == MemoryKind::Cpu {
            return Ok(self.cpu.clone());
        }
        let g = self.gpu(device)?;
        Ok(Arc::new(CudaRawAllocator::new(
            g.ctx.clone(),
            kind,
            g.ledger.clone(),
        )))
    }

    fn mempool(&self, device: u32, config: &ArenaConfig) -> Result<Arc<dyn Allocator>> {
        let g = self.gpu(device)?;
        if !g.info.memory_pools_supported {
            return Err(ArenaError::unsupported(format!(
                "device {device} ({}) has no memory pools",
                g.info.name
            )));
        }
        Ok(Arc::new(CudaPoolAllocator::new(g.ctx.clone(), config)?))
    }

    fn device_stats(&self, device: u32) -> Result<RawStats> {
        let g = self.gpu(device)?;
        device_stats(&g.ctx, &g.ledger)
    }

    fn virtual_memory(&self, device: u32) -> Result<SharedVm> {
        let g = self.gpu(device)?;
        Ok(Arc::new(crate::CudaVirtualMemory::new(
            g.ctx.clone(),
            g.ledger.clone(),
        )?))
    }

    fn stream_events(&self, device: u32) -> Option<Arc<dyn StreamEvents>> {
        let events: Arc<dyn StreamEvents> = self.gpu(device).ok()?.events.clone();
        Some(events)
    }
}
