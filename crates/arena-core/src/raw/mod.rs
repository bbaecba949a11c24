//! Raw allocators: where an arena's regions and reserves come from.
//!
//! A [`RawAllocator`] serves one device. The two shipped here need no GPU: [`HostAllocator`]
//! hands out real, 256-byte aligned host memory; [`AddressSpaceAllocator`] hands out addresses
//! from a private address space and touches no memory. Both enforce [`DeviceLimits`] and
//! count their calls ([`RawStats`]), which is how tests reach every out-of-memory path.
//! Both also have a virtual-memory form ([`VirtualMemory`]: reserve a range, map and unmap
//! pages of it), which the arena's virtual-memory mode runs on.

mod address_space;
mod host;
mod sim_device;
mod vm;

pub use address_space::{AddressSpaceAllocator, AddressSpaceVm, DEFAULT_ADDRESS_SPACE_GRANULARITY};
pub use host::{HostAllocator, HostVm};
pub use vm::{Reservations, VirtualMemory};

use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::MemoryInfo;

/// Default simulated device size of the `host` backend: 4 GiB.
pub const DEFAULT_HOST_TOTAL_MEMORY: u64 = 4 << 30;
/// Default simulated device size of the `virtual` backend: 80 GiB (an H100).
pub const DEFAULT_VIRTUAL_TOTAL_MEMORY: u64 = 80 << 30;

/// Per-device limits of a simulated device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// A raw request fails once outstanding bytes would pass this.
    pub total_memory: u64,
    /// A single raw request larger than this fails.
    pub max_allocation: u64,
}

impl DeviceLimits {
    /// `total_memory` bytes, no per-allocation limit.
    pub fn with_total(total_memory: u64) -> Self {
        DeviceLimits {
            total_memory,
            max_allocation: u64::MAX,
        }
    }
}

/// Counters of the calls that reached a raw allocator (what `deviceStats` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RawStats {
    /// Successful raw allocations.
    pub raw_allocs: u64,
    /// Successful raw frees.
    pub raw_frees: u64,
    /// Refused raw allocations.
    pub raw_failures: u64,
    /// Bytes allocated and not yet freed.
    pub raw_bytes_outstanding: u64,
    /// Times an allocator waited for all of the device's queued work (CUDA: a synchronization
    /// of the context), before unmapping pages that work might still use or to settle what
    /// streams freed: each stalls the calling thread until the whole GPU is idle (PyTorch
    /// counts the like as `num_sync_all_streams`). The simulated backends have no device to
    /// wait for and count the calls CUDA would wait in.
    pub device_waits: u64,
    /// Times an allocator waited for one stream's work up to an event (so that memory that
    /// stream freed could serve another): a stall until that stream reaches the event.
    pub stream_waits: u64,
    /// Bytes the device has free, where known.
    pub free: Option<u64>,
    /// Bytes the device has in all, where known.
    pub total: Option<u64>,
}

impl RawStats {
    /// Counts a mapping of `len` bytes by a virtual-memory form: one raw allocation.
    pub fn count_map(&mut self, len: u64) {
        self.raw_allocs += 1;
        self.raw_bytes_outstanding += len;
    }

    /// Counts an unmapping of `len` bytes: one raw free.
    pub fn count_unmap(&mut self, len: u64) {
        self.raw_frees += 1;
        self.raw_bytes_outstanding -= len;
    }
}

/// A source of memory for one device. Implementations are thread-safe: the arena calls
/// `alloc` (growth, reserves) and `free` (shrinking) from many threads, with no lock held; a
/// reserve's free and the copies run under the owning sub-arena's lock.
pub trait RawAllocator: Send + Sync + std::fmt::Debug {
    /// Allocates exactly `size` bytes (`size > 0`), aligned to at least 256 bytes.
    /// A refusal for lack of memory is [`ArenaError::OutOfMemory`]; the arena then backs off.
    fn alloc(&self, size: u64) -> Result<u64>;

    /// Returns a block obtained from [`RawAllocator::alloc`] with the same `size`.
    /// An address or size that does not match a live block is
    /// [`ArenaError::UnknownPointer`] and frees nothing.
    fn free(&self, addr: u64, size: u64) -> Result<()>;

    /// The memory this allocator serves.
    fn info(&self) -> MemoryInfo;

    /// Call counters and outstanding bytes.
    fn raw_stats(&self) -> RawStats;

    /// Copies `data` to `addr`. The caller has checked the range lies in one live allocation.
    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let _ = (addr, data);
        Err(no_memory_behind(self.info()))
    }

    /// Copies from `addr` into `out`. The caller has checked the range.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let _ = (addr, out);
        Err(no_memory_behind(self.info()))
    }

    /// Sets `len` bytes at `addr` to `byte`. The caller has checked the range.
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let _ = (addr, byte, len);
        Err(no_memory_behind(self.info()))
    }
}

fn no_memory_behind(info: MemoryInfo) -> ArenaError {
    ArenaError::invalid_argument(format!(
        "the allocator for {info} has no memory behind its addresses (virtual backend): nothing to read or write"
    ))
}

impl<R: RawAllocator + ?Sized> RawAllocator for std::sync::Arc<R> {
    fn alloc(&self, size: u64) -> Result<u64> {
        (**self).alloc(size)
    }
    fn free(&self, addr: u64, size: u64) -> Result<()> {
        (**self).free(addr, size)
    }
    fn info(&self) -> MemoryInfo {
        (**self).info()
    }
    fn raw_stats(&self) -> RawStats {
        (**self).raw_stats()
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        (**self).write(addr, data)
    }
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        (**self).read(addr, out)
    }
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        (**self).fill(addr, byte, len)
    }
}
