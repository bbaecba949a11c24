//! Devices: what `devices()` reports, and each device's primary context, made current on
//! whatever thread calls (libuv workers included).

use crate::availability::ensure_cuda;
use crate::driver::{self, CUdevice};
use cuda_arena_core::Result;
use cudarc::driver::sys::CUdevice_attribute as Attr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A GPU as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Bytes of device memory.
    pub total_memory: u64,
    /// Bytes free now.
    pub free_memory: u64,
    /// PCI bus id, e.g. `0000:65:00.0`.
    pub pci_bus_id: String,
    /// UUID, `GPU-xxxxxxxx-...` as nvidia-smi prints it.
    pub uuid: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Whether memory pools (`cuMemPoolCreate`) are supported.
    pub memory_pools_supported: bool,
}

/// A retained primary context of one device; released when the last holder drops it.
#[derive(Debug)]
pub(crate) struct DeviceContext {
    pub(crate) ordinal: u32,
    pub(crate) dev: CUdevice,
    /// The `CUcontext`, kept as an integer so the type is `Send + Sync` (the driver's
    /// contexts may be used from any thread).
    ctx: usize,
    /// Synchronizations of this context the allocators of this device made (`deviceWaits`).
    device_waits: AtomicU64,
    /// Waits for one stream's event they made (`streamWaits`).
    stream_waits: AtomicU64,
}

impl DeviceContext {
    /// Retains device `ordinal`'s primary context.
    pub(crate) fn open(ordinal: u32) -> Result<Arc<Self>> {
        ensure_cuda()?;
        let dev = driver::device(ordinal)?;
        let ctx = driver::primary_ctx_retain(dev)? as usize;
        Ok(Arc::new(DeviceContext {
            ordinal,
            dev,
            ctx,
            device_waits: AtomicU64::new(0),
            stream_waits: AtomicU64::new(0),
        }))
    }

    /// Waits for all work queued on this context (`cuCtxSynchronize`), counted as one of the
    /// device's waits. The context must be current.
    pub(crate) fn synchronize(&self) -> Result<()> {
        driver::ctx_synchronize()?;
        self.device_waits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Counts a wait for one stream's event.
    pub(crate) fn count_stream_wait(&self) {
        self.stream_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// The synchronizations and the stream waits counted so far.
    pub(crate) fn waits(&self) -> (u64, u64) {
        (
            self.device_waits.load(Ordering::Relaxed),
            self.stream_waits.load(Ordering::Relaxed),
        )
    }

    /// Makes this device's context current on the calling thread until the guard is dropped.
    /// The thread's context is asked each time (another library on the thread, PyTorch for
    /// one, may have changed it since), and the one another library had made current is made
    /// current again when the guard goes: a free PyTorch calls for a tensor of device 1 while
    /// device 0 is current must leave device 0 current. A thread with no context keeps ours.
    pub(crate) fn make_current(&self) -> Result<CurrentGuard> {
        let prev = driver::ctx_get_current()?;
        if prev as usize == self.ctx {
            return Ok(CurrentGuard { restore: None });
        }
        driver::set_current(self.ctx as driver::CUcontext)?;
        Ok(CurrentGuard {
            restore: (!prev.is_null()).then_some(prev as usize),
        })
    }

    /// (free, total) bytes of device memory.
    pub(crate) fn mem_info(&self) -> Result<(u64, u64)> {
        let _current = self.make_current()?;
        driver::mem_get_info()
    }

    pub(crate) fn info(&self) -> Result<DeviceInfo> {
        let dev = self.dev;
        let (free_memory, _) = self.mem_info()?;
        let uuid = driver::device_uuid(dev)?;
        let hex: Vec<String> = uuid.iter().map(|b| format!("{b:02x}")).collect();
        let h = hex.concat();
        Ok(DeviceInfo {
            ordinal: self.ordinal,
            name: driver::device_name(dev)?,
            total_memory: driver::device_total_mem(dev)?,
            free_memory,
            pci_bus_id: driver::device_pci_bus_id(dev)?,
            uuid: format!(
                "GPU-{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            ),
            compute_capability: (
                driver::device_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                driver::device_attribute(dev, Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            memory_pools_supported: driver::device_attribute(
                dev,
                Attr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            )? != 0,
        })
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        // The driver may already be shut down at process exit; nothing to report from a drop.
        let _ = driver::primary_ctx_release(self.dev);
    }
}

/// While alive, a device's context is current on this thread (see
/// [`DeviceContext::make_current`]).
#[derive(Debug)]
#[must_use = "the context is current only while the guard lives"]
pub(crate) struct CurrentGuard {
    /// The context another library had made current, made current again on drop.
    restore: Option<usize>,
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        if let Some(prev) = self.restore {
            // Nothing to report from a drop; the caller's context stays as ours then.
            let _ = driver::set_current_or_none(prev as driver::CUcontext);
        }
    }
}

/// Number of CUDA devices; 0 without a driver.
pub(crate) fn device_count() -> u32 {
    if ensure_cuda().is_err() {
        return 0;
    }
    driver::device_count().map_or(0, |n| n.max(0) as u32)
}

/// Every GPU the driver reports; empty without a driver. Never panics.
pub fn devices() -> Vec<DeviceInfo> {
    (0..device_count())
        .filter_map(|i| DeviceContext::open(i).and_then(|c| c.info()).ok())
        .collect()
}
