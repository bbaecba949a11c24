//! The `virtual` backend's raw allocator, named for what it holds: addresses from a private
//! address space, no memory behind them (not to be confused with the arena's virtual-memory
//! mode, which either backend serves). For replaying large allocation traces on any machine. Its virtual-memory form reserves
//! ranges from the same address space and counts mapped bytes against the device's limits,
//! so what a virtual-memory arena holds is exact and the same on every machine.

use super::sim_device::SimDevice;
use super::vm::{Reservations, VirtualMemory};
use super::{DeviceLimits, RawAllocator, RawStats, DEFAULT_VIRTUAL_TOTAL_MEMORY};
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::{MemoryInfo, MemoryKind};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Each allocator gets its own 16 TiB window, so addresses from two simulated devices never
/// coincide.
const SPACE_BITS: u32 = 44;
static NEXT_SPACE: AtomicU64 = AtomicU64::new(1);

/// Default mapping granularity of the virtual-memory form: 2 MiB, CUDA's on an H100.
pub const DEFAULT_ADDRESS_SPACE_GRANULARITY: u64 = 2 << 20;

#[derive(Debug)]
struct Space {
    ledger: SimDevice,
    /// Free address ranges: start → length; adjacent ranges are always merged.
    holes: BTreeMap<u64, u64>,
    /// Ranges reserved by the virtual-memory form, and what is mapped in them.
    vm: Reservations,
    /// Unmaps that would have waited for the device ([`VirtualMemory::unmap`] rather than
    /// [`VirtualMemory::unmap_idle`]): none here, but counted as CUDA's would wait.
    waiting_unmaps: u64,
    /// [`VirtualMemory::synchronize`] calls: nothing to wait for here, but counted.
    synchronizations: u64,
}

impl Space {
    /// Takes `span` bytes (a multiple of `align`, a power of two) of address space, aligned
    /// to `align`; the first hole that fits.
    fn carve(&mut self, span: u64, align: u64) -> Option<u64> {
        let (start, len, at) = self.holes.iter().find_map(|(&a, &l)| {
            let at = a.checked_add(align - 1)? & !(align - 1);
            (at.checked_add(span)? <= a + l).then_some((a, l, at))
        })?;
        self.holes.remove(&start);
        if at > start {
            self.holes.insert(start, at - start);
        }
        if at + span < start + len {
            self.holes.insert(at + span, start + len - at - span);
        }
        Some(at)
    }

    /// Returns `[start, start + len)` to the holes, merging with its neighbours.
    fn give_back(&mut self, start: u64, len: u64) {
        let (mut start, mut len) = (start, len);
        if let Some((&a, &l)) = self.holes.range(..start).next_back() {
            if a + l == start {
                self.holes.remove(&a);
                start = a;
                len += l;
            }
        }
        if let Some(&l) = self.holes.get(&(start + len)) {
            self.holes.remove(&(start + len));
            len += l;
        }
        self.holes.insert(start, len);
    }
}

/// A simulated device that hands out addresses only. Cloning shares the device.
#[derive(Debug, Clone)]
pub struct AddressSpaceAllocator {
    space: Arc<Mutex<Space>>,
    info: MemoryInfo,
}

impl Default for AddressSpaceAllocator {
    fn default() -> Self {
        Self::new(DeviceLimits::with_total(DEFAULT_VIRTUAL_TOTAL_MEMORY))
    }
}

impl AddressSpaceAllocator {
    /// A device with `limits`, serving `Cuda` memory of device 0.
    pub fn new(limits: DeviceLimits) -> Self {
        let window =
            NEXT_SPACE.fetch_add(1, Ordering::Relaxed) % ((1 << (64 - SPACE_BITS)) - 1) + 1;
        let mut holes = BTreeMap::new();
        holes.insert(window << SPACE_BITS, (1u64 << SPACE_BITS) - 256);
        let space = Space {
            ledger: SimDevice::new(limits),
            holes,
            vm: Reservations::new(DEFAULT_ADDRESS_SPACE_GRANULARITY),
            waiting_unmaps: 0,
            synchronizations: 0,
        };
        AddressSpaceAllocator {
            space: Arc::new(Mutex::new(space)),
            info: MemoryInfo::new(MemoryKind::Cuda, 0),
        }
    }

    /// The same device, reporting `info`.
    pub fn with_info(mut self, info: MemoryInfo) -> Self {
        self.info = info;
        self
    }

    /// The same device, mapping in units of `granularity` bytes (a power of two, at least
    /// 256; others are ignored) in its virtual-memory form; call before reserving anything.
    /// Default 2 MiB.
    pub fn with_granularity(self, granularity: u64) -> Self {
        if granularity.is_power_of_two() && granularity >= 256 {
            let mut space = self.space.lock();
            if space.vm.ranges().is_empty() {
                space.vm = Reservations::new(granularity);
            }
        }
        self
    }
}

impl RawAllocator for AddressSpaceAllocator {
    fn alloc(&self, size: u64) -> Result<u64> {
        let mut space = self.space.lock();
        space.ledger.admit(size)?;
        // Place blocks on 256-byte boundaries.
        let span = size.div_ceil(256) * 256;
        let Some(start) = space.carve(span, 256) else {
            return Err(space
                .ledger
                .refuse(size, "the address space is exhausted".into()));
        };
        space.ledger.record_alloc(start, size);
        Ok(start)
    }

    fn free(&self, addr: u64, size: u64) -> Result<()> {
        let mut space = self.space.lock();
        space.ledger.check_free(addr, size)?;
        space.ledger.record_free(addr, size);
        space.give_back(addr, size.div_ceil(256) * 256);
        Ok(())
    }

    fn info(&self) -> MemoryInfo {
        self.info
    }

    fn raw_stats(&self) -> RawStats {
        let space = self.space.lock();
        RawStats {
            device_waits: space.waiting_unmaps + space.synchronizations,
            ..space.ledger.stats()
        }
    }
}

/// The virtual-memory form of a [`AddressSpaceAllocator`]'s device ([`AddressSpaceAllocator::vm`]):
/// shares its address space, limits and counters.
#[derive(Debug, Clone)]
pub struct AddressSpaceVm {
    space: Arc<Mutex<Space>>,
    info: MemoryInfo,
}

impl AddressSpaceAllocator {
    /// The device's virtual-memory form (same address space, limits and counters),
    /// reporting the same info.
    pub fn vm(&self) -> AddressSpaceVm {
        AddressSpaceVm {
            space: self.space.clone(),
            info: self.info,
        }
    }
}

impl AddressSpaceVm {
    /// Unmaps so far that would have waited for the device, as CUDA's `unmap` does: those the
    /// arena could not show no queued work used (the rest came through
    /// [`VirtualMemory::unmap_idle`]).
    pub fn waiting_unmaps(&self) -> u64 {
        self.space.lock().waiting_unmaps
    }
}

impl VirtualMemory for AddressSpaceVm {
    fn granularity(&self) -> u64 {
        self.space.lock().vm.granularity()
    }

    fn total_memory(&self) -> u64 {
        self.space.lock().ledger.total_memory()
    }

    fn reserve(&self, size: u64) -> Result<u64> {
        let mut space = self.space.lock();
        space.vm.check_reserve(size)?;
        let g = space.vm.granularity();
        let base = space.carve(size, g).ok_or_else(|| {
            ArenaError::oom(size, "the address space has no room for the reservation")
        })?;
        space.vm.add(base, size);
        Ok(base)
    }

    fn release(&self, base: u64, size: u64) -> Result<()> {
        let mut space = self.space.lock();
        space.vm.check_release(base, size)?;
        space.vm.remove(base);
        space.give_back(base, size);
        Ok(())
    }

    fn map(&self, addr: u64, len: u64) -> Result<()> {
        let mut space = self.space.lock();
        space.vm.check_map(addr, len)?;
        space.ledger.admit_mapped(len)?;
        space.vm.mark_mapped(addr, len);
        space.ledger.record_map(len);
        Ok(())
    }

    fn unmap(&self, addr: u64, len: u64) -> Result<()> {
        self.unmap_idle(addr, len)?;
        self.space.lock().waiting_unmaps += 1;
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        self.space.lock().synchronizations += 1;
        Ok(())
    }

    fn synchronizations(&self) -> u64 {
        self.space.lock().synchronizations
    }

    fn unmap_idle(&self, addr: u64, len: u64) -> Result<()> {
        let mut space = self.space.lock();
        space.vm.check_unmap(addr, len)?;
        space.vm.mark_unmapped(addr, len);
        space.ledger.record_unmap(len);
        Ok(())
    }

    fn mapped_bytes(&self) -> u64 {
        self.space.lock().vm.mapped_bytes()
    }

    fn mappings(&self) -> Vec<(u64, u64)> {
        self.space.lock().vm.mappings()
    }

    fn info(&self) -> MemoryInfo {
        self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_space_is_reused_and_merged() {
        let v = AddressSpaceAllocator::new(DeviceLimits::with_total(1 << 20));
        let a = v.alloc(1000).expect("fits");
        let b = v.alloc(256).expect("fits");
        assert_eq!(a % 256, 0);
        assert_eq!(b, a + 1024);
        v.free(a, 1000).expect("live");
        v.free(b, 256).expect("live");
        assert_eq!(v.alloc(1280).expect("fits"), a);
    }

    #[test]
    fn limits_refuse_and_count() {
        let v = AddressSpaceAllocator::new(DeviceLimits {
            total_memory: 4096,
            max_allocation: 2048,
        });
        assert_eq!(
            v.alloc(4096).map_err(|e| e.code()),
            Err("ERR_ARENA_OUT_OF_MEMORY")
        );
        let a = v.alloc(2048).expect("fits");
        let _b = v.alloc(2048).expect("fits");
        assert!(matches!(v.alloc(256), Err(ArenaError::OutOfMemory { .. })));
        let s = v.raw_stats();
        assert_eq!(
            (s.raw_allocs, s.raw_failures, s.raw_bytes_outstanding),
            (2, 2, 4096)
        );
        assert_eq!(s.free, Some(0));
        assert!(v.free(a, 1024).is_err(), "wrong size is refused");
        assert!(
            v.free(a + 256, 2048).is_err(),
            "interior address is refused"
        );
        assert_eq!(v.raw_stats().raw_frees, 0);
    }

    #[test]
    fn mapped_bytes_count_against_the_device_and_reservations_do_not() {
        let raw =
            AddressSpaceAllocator::new(DeviceLimits::with_total(8 << 20)).with_granularity(1 << 20);
        let v = raw.vm();
        let base = v.reserve(64 << 20).expect("address space is plentiful");
        assert_eq!(base % (1 << 20), 0);
        assert_eq!(raw.raw_stats().raw_bytes_outstanding, 0);
        // Three mappings, so that the middle one can be unmapped on its own.
        v.map(base, 2 << 20).expect("fits");
        v.map(base + (2 << 20), 1 << 20).expect("fits");
        v.map(base + (3 << 20), 3 << 20).expect("fits");
        let block = raw.alloc(2 << 20).expect("the rest fits");
        assert!(block >= base + (64 << 20) || block + (2 << 20) <= base);
        assert!(matches!(
            v.map(base + (6 << 20), 1 << 20),
            Err(ArenaError::OutOfMemory { .. })
        ));
        let s = raw.raw_stats();
        assert_eq!(
            (s.raw_bytes_outstanding, s.raw_allocs, s.raw_failures),
            (8 << 20, 4, 1)
        );
        v.unmap(base + (2 << 20), 1 << 20).expect("mapped");
        assert_eq!(v.mapped_bytes(), 5 << 20);
        assert!(v.release(base, 64 << 20).is_err(), "memory still mapped");
        v.unmap(base, 2 << 20).expect("mapped");
        v.unmap(base + (3 << 20), 3 << 20).expect("mapped");
        v.release(base, 64 << 20).expect("empty");
        raw.free(block, 2 << 20).expect("live");
        assert_eq!(raw.raw_stats().raw_bytes_outstanding, 0);
    }

    #[test]
    fn two_devices_never_share_addresses() {
        let (x, y) = (
            AddressSpaceAllocator::default(),
            AddressSpaceAllocator::default(),
        );
        let (a, b) = (x.alloc(256).expect("fits"), y.alloc(256).expect("fits"));
        assert_ne!(a >> SPACE_BITS, b >> SPACE_BITS);
    }
}
