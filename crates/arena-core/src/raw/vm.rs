//! The virtual-memory form of a device's memory ([`VirtualMemory`]): reserve a range of
//! addresses once, then back pages of it with memory and hand them back one at a time. What
//! the arena's virtual-memory mode (DESIGN, "Virtual-memory mode") runs on: CUDA's
//! `cuMemAddressReserve` / `cuMemCreate` + `cuMemMap` / `cuMemUnmap` in `cuda-sys-bridge`,
//! `mmap(PROT_NONE)` + commit / decommit on `host`, and counted address space on `virtual`.
//!
//! [`Reservations`] is the bookkeeping the simulated backends share: which ranges are reserved
//! and which granules of them are mapped, so that a wrong call (a double map, an unmap of
//! memory that is not mapped, a release of a range with memory in it) is refused and changes
//! nothing, as a driver would refuse it.

use crate::error::{ArenaError, Result};
use crate::memory_info::MemoryInfo;
use std::collections::BTreeMap;

/// Reserved address ranges whose pages are backed with memory on demand. Implementations
/// are thread-safe; the arena calls them under its own lock, off its common path.
///
/// Mapped bytes count as the device's raw bytes outstanding ([`super::RawStats`]), one map
/// call as one raw allocation and one unmap call as one raw free, so `deviceStats` shows
/// what the device holds whichever mode an arena uses.
pub trait VirtualMemory: Send + Sync + std::fmt::Debug {
    /// The smallest unit that can be mapped, a power of two: addresses and lengths given to
    /// [`VirtualMemory::map`] and [`VirtualMemory::unmap`] are multiples of it.
    fn granularity(&self) -> u64;

    /// Bytes of memory the device has in all: the default size of a reservation.
    fn total_memory(&self) -> u64;

    /// Reserves `size` bytes of address space (a multiple of the granularity), aligned to the
    /// granularity, with no memory behind it. Running out of address space is
    /// [`ArenaError::OutOfMemory`].
    fn reserve(&self, size: u64) -> Result<u64>;

    /// Gives back a range from [`VirtualMemory::reserve`] (same base and size) with nothing
    /// mapped in it.
    fn release(&self, base: u64, size: u64) -> Result<()>;

    /// Backs `[addr, addr + len)` with memory: granularity-aligned, inside one reservation,
    /// nothing in it mapped. A refusal for lack of memory is [`ArenaError::OutOfMemory`] and
    /// maps nothing.
    fn map(&self, addr: u64, len: u64) -> Result<()>;

    /// Hands the memory behind `[addr, addr + len)` back: granularity-aligned, all of it
    /// mapped (by one or more [`VirtualMemory::map`] calls).
    fn unmap(&self, addr: u64, len: u64) -> Result<()>;

    /// Bytes mapped now.
    fn mapped_bytes(&self) -> u64;

    /// The memory this serves.
    fn info(&self) -> MemoryInfo;

    /// Copies `data` to `addr`. The caller has checked the range lies in one live allocation.
    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        let _ = (addr, data);
        Err(super::no_memory_behind(self.info()))
    }

    /// Copies from `addr` into `out`. The caller has checked the range.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let _ = (addr, out);
        Err(super::no_memory_behind(self.info()))
    }

    /// Sets `len` bytes at `addr` to `byte`. The caller has checked the range.
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        let _ = (addr, byte, len);
        Err(super::no_memory_behind(self.info()))
    }
}

impl<V: VirtualMemory + ?Sized> VirtualMemory for std::sync::Arc<V> {
    fn granularity(&self) -> u64 {
        (**self).granularity()
    }
    fn total_memory(&self) -> u64 {
        (**self).total_memory()
    }
    fn reserve(&self, size: u64) -> Result<u64> {
        (**self).reserve(size)
    }
    fn release(&self, base: u64, size: u64) -> Result<()> {
        (**self).release(base, size)
    }
    fn map(&self, addr: u64, len: u64) -> Result<()> {
        (**self).map(addr, len)
    }
    fn unmap(&self, addr: u64, len: u64) -> Result<()> {
        (**self).unmap(addr, len)
    }
    fn mapped_bytes(&self) -> u64 {
        (**self).mapped_bytes()
    }
    fn info(&self) -> MemoryInfo {
        (**self).info()
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

/// One reserved range: its size and its mapped runs (start → end, adjacent runs merged).
#[derive(Debug, Default)]
struct Range {
    size: u64,
    mapped: BTreeMap<u64, u64>,
}

/// Reserved ranges and what is mapped in them, checked the way a driver checks its calls.
/// Runs rather than a bitmap: a simulated device may have a small granularity and a large
/// range, and the arena maps runs.
#[derive(Debug)]
pub struct Reservations {
    granularity: u64,
    /// base → range.
    ranges: BTreeMap<u64, Range>,
    mapped: u64,
}

impl Reservations {
    /// No ranges, for a device mapping in units of `granularity` (a power of two).
    pub fn new(granularity: u64) -> Self {
        Reservations {
            granularity,
            ranges: BTreeMap::new(),
            mapped: 0,
        }
    }

    /// The mapping unit.
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Bytes mapped in all ranges.
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped
    }

    /// Checks a reservation's size: non-zero and a multiple of the granularity.
    pub fn check_reserve(&self, size: u64) -> Result<()> {
        if size == 0 || !size.is_multiple_of(self.granularity) {
            return Err(ArenaError::invalid_argument(format!(
                "a reservation of {size} bytes is not a non-zero multiple of the granularity {}",
                self.granularity
            )));
        }
        Ok(())
    }

    /// Records a new range at `base`.
    pub fn add(&mut self, base: u64, size: u64) {
        self.ranges.insert(
            base,
            Range {
                size,
                mapped: BTreeMap::new(),
            },
        );
    }

    /// Checks that `base` and `size` name a reserved range with nothing mapped in it.
    pub fn check_release(&self, base: u64, size: u64) -> Result<()> {
        match self.ranges.get(&base) {
            Some(r) if r.size == size && r.mapped.is_empty() => Ok(()),
            Some(r) if r.size != size => Err(ArenaError::unknown_pointer(
                base,
                format!("the range is {} bytes, release was given {size}", r.size),
            )),
            Some(_) => Err(ArenaError::invalid_argument(format!(
                "the range at {base:#x} still has memory mapped in it"
            ))),
            None => Err(ArenaError::unknown_pointer(base, "not a reserved range")),
        }
    }

    /// Forgets the range at `base` (after [`Reservations::check_release`]).
    pub fn remove(&mut self, base: u64) {
        self.ranges.remove(&base);
    }

    /// The range holding all of `[addr, addr + len)`, as `(base, range)`.
    fn range_of(&self, addr: u64, len: u64) -> Option<(u64, &Range)> {
        let (&base, r) = self.ranges.range(..=addr).next_back()?;
        let end = addr.checked_add(len)?;
        (end <= base + r.size).then_some((base, r))
    }

    fn check_aligned(&self, addr: u64, len: u64) -> Result<()> {
        let g = self.granularity;
        if len == 0 || !addr.is_multiple_of(g) || !len.is_multiple_of(g) {
            return Err(ArenaError::invalid_argument(format!(
                "[{addr:#x}, +{len}) is not a non-empty run of {g}-byte granules"
            )));
        }
        Ok(())
    }

    /// Checks that `[addr, addr + len)` can be mapped: aligned, inside one range, and
    /// nothing in it mapped.
    pub fn check_map(&self, addr: u64, len: u64) -> Result<()> {
        self.check_aligned(addr, len)?;
        let (_, r) = self.range_of(addr, len).ok_or_else(|| {
            ArenaError::unknown_pointer(addr, format!("{len} bytes from here are not reserved"))
        })?;
        let end = addr + len;
        let overlaps = r
            .mapped
            .range(..end)
            .next_back()
            .is_some_and(|(_, &run_end)| run_end > addr);
        if overlaps {
            return Err(ArenaError::invalid_argument(format!(
                "[{addr:#x}, {end:#x}) is already mapped in part"
            )));
        }
        Ok(())
    }

    /// Records `[addr, addr + len)` as mapped (after [`Reservations::check_map`]).
    pub fn mark_mapped(&mut self, addr: u64, len: u64) {
        let Some(base) = self.range_of(addr, len).map(|(b, _)| b) else {
            return;
        };
        let Some(r) = self.ranges.get_mut(&base) else {
            return;
        };
        let (mut start, mut end) = (addr, addr + len);
        if let Some((&s, &e)) = r.mapped.range(..start).next_back() {
            if e == start {
                r.mapped.remove(&s);
                start = s;
            }
        }
        if let Some(e) = r.mapped.remove(&end) {
            end = e;
        }
        r.mapped.insert(start, end);
        self.mapped += len;
    }

    /// Whether all of `[addr, addr + len)` lies in one mapped run.
    pub fn is_mapped(&self, addr: u64, len: u64) -> bool {
        let Some((_, r)) = self.range_of(addr, len) else {
            return false;
        };
        r.mapped
            .range(..=addr)
            .next_back()
            .is_some_and(|(_, &end)| addr + len <= end)
    }

    /// Checks that `[addr, addr + len)` can be unmapped: aligned and all of it mapped.
    pub fn check_unmap(&self, addr: u64, len: u64) -> Result<()> {
        self.check_aligned(addr, len)?;
        if !self.is_mapped(addr, len) {
            return Err(ArenaError::unknown_pointer(
                addr,
                format!("{len} bytes from here are not all mapped"),
            ));
        }
        Ok(())
    }

    /// Records `[addr, addr + len)` as unmapped (after [`Reservations::check_unmap`]).
    pub fn mark_unmapped(&mut self, addr: u64, len: u64) {
        let Some(base) = self.range_of(addr, len).map(|(b, _)| b) else {
            return;
        };
        let Some(r) = self.ranges.get_mut(&base) else {
            return;
        };
        let Some((&start, &end)) = r.mapped.range(..=addr).next_back() else {
            return;
        };
        r.mapped.remove(&start);
        if start < addr {
            r.mapped.insert(start, addr);
        }
        if addr + len < end {
            r.mapped.insert(addr + len, end);
        }
        self.mapped -= len;
    }

    /// Every range as `(base, size)`, for teardown.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.ranges.iter().map(|(&b, r)| (b, r.size)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 4096;

    #[test]
    fn runs_merge_on_map_and_split_on_unmap() {
        let mut r = Reservations::new(G);
        r.add(0x10_0000, 16 * G);
        for at in [0, 2, 1] {
            let a = 0x10_0000 + at * G;
            r.check_map(a, G).expect("free");
            r.mark_mapped(a, G);
        }
        assert!(r.is_mapped(0x10_0000, 3 * G));
        assert_eq!(r.mapped_bytes(), 3 * G);
        r.check_unmap(0x10_0000 + G, G).expect("mapped");
        r.mark_unmapped(0x10_0000 + G, G);
        assert!(!r.is_mapped(0x10_0000, 2 * G));
        assert!(r.is_mapped(0x10_0000 + 2 * G, G));
        assert_eq!(r.mapped_bytes(), 2 * G);
    }

    #[test]
    fn wrong_calls_are_refused() {
        let mut r = Reservations::new(G);
        assert!(r.check_reserve(G + 1).is_err());
        r.add(0x10_0000, 4 * G);
        r.mark_mapped(0x10_0000, G);
        assert!(r.check_map(0x10_0000, G).is_err(), "double map");
        assert!(r.check_map(0x10_0000 + G, G + 1).is_err(), "unaligned");
        assert!(
            r.check_map(0x10_0000 + 3 * G, 2 * G).is_err(),
            "past the range"
        );
        assert!(r.check_unmap(0x10_0000 + G, G).is_err(), "not mapped");
        assert!(r.check_release(0x10_0000, 4 * G).is_err(), "memory in it");
        r.mark_unmapped(0x10_0000, G);
        assert!(r.check_release(0x10_0000, 2 * G).is_err(), "wrong size");
        r.check_release(0x10_0000, 4 * G).expect("empty range");
    }
}
