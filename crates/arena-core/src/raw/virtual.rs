//! The `virtual` backend: addresses from a private address space, no memory behind them.
//! For replaying large allocation traces on any machine.

use super::ledger::Ledger;
use super::{DeviceLimits, RawAllocator, RawStats, DEFAULT_VIRTUAL_TOTAL_MEMORY};
use crate::error::Result;
use crate::memory_info::{MemoryInfo, MemoryKind};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Each allocator gets its own 16 TiB window, so addresses from two simulated devices never
/// coincide.
const SPACE_BITS: u32 = 44;
static NEXT_SPACE: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
struct Space {
    ledger: Ledger,
    /// Free address ranges: start → length; adjacent ranges are always merged.
    holes: BTreeMap<u64, u64>,
}

/// A simulated device that hands out addresses only. Cloning shares the device.
#[derive(Debug, Clone)]
pub struct VirtualAllocator {
    space: Arc<Mutex<Space>>,
    info: MemoryInfo,
}

impl Default for VirtualAllocator {
    fn default() -> Self {
        Self::new(DeviceLimits::with_total(DEFAULT_VIRTUAL_TOTAL_MEMORY))
    }
}

impl VirtualAllocator {
    /// A device with `limits`, serving `Cuda` memory of device 0.
    pub fn new(limits: DeviceLimits) -> Self {
        let window =
            NEXT_SPACE.fetch_add(1, Ordering::Relaxed) % ((1 << (64 - SPACE_BITS)) - 1) + 1;
        let mut holes = BTreeMap::new();
        holes.insert(window << SPACE_BITS, (1u64 << SPACE_BITS) - 256);
        let space = Space {
            ledger: Ledger::new(limits),
            holes,
        };
        VirtualAllocator {
            space: Arc::new(Mutex::new(space)),
            info: MemoryInfo::new(MemoryKind::Cuda, 0),
        }
    }

    /// The same device, reporting `info`.
    pub fn with_info(mut self, info: MemoryInfo) -> Self {
        self.info = info;
        self
    }
}

impl RawAllocator for VirtualAllocator {
    fn alloc(&self, size: u64) -> Result<u64> {
        let mut space = self.space.lock();
        space.ledger.admit(size)?;
        // Place blocks on 256-byte boundaries.
        let span = size.div_ceil(256) * 256;
        let hole = space
            .holes
            .iter()
            .find(|(_, &len)| len >= span)
            .map(|(&a, &l)| (a, l));
        let Some((start, len)) = hole else {
            return Err(space
                .ledger
                .refuse(size, "the address space is exhausted".into()));
        };
        space.holes.remove(&start);
        if len > span {
            space.holes.insert(start + span, len - span);
        }
        space.ledger.record_alloc(start, size);
        Ok(start)
    }

    fn free(&self, addr: u64, size: u64) -> Result<()> {
        let mut space = self.space.lock();
        space.ledger.check_free(addr, size)?;
        space.ledger.record_free(addr, size);
        let (mut start, mut len) = (addr, size.div_ceil(256) * 256);
        if let Some((&a, &l)) = space.holes.range(..start).next_back() {
            if a + l == start {
                space.holes.remove(&a);
                start = a;
                len += l;
            }
        }
        if let Some(&l) = space.holes.get(&(start + len)) {
            space.holes.remove(&(start + len));
            len += l;
        }
        space.holes.insert(start, len);
        Ok(())
    }

    fn info(&self) -> MemoryInfo {
        self.info
    }

    fn raw_stats(&self) -> RawStats {
        self.space.lock().ledger.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ArenaError;

    #[test]
    fn freed_space_is_reused_and_merged() {
        let v = VirtualAllocator::new(DeviceLimits::with_total(1 << 20));
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
        let v = VirtualAllocator::new(DeviceLimits {
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
    fn two_devices_never_share_addresses() {
        let (x, y) = (VirtualAllocator::default(), VirtualAllocator::default());
        let (a, b) = (x.alloc(256).expect("fits"), y.alloc(256).expect("fits"));
        assert_ne!(a >> SPACE_BITS, b >> SPACE_BITS);
    }
}
