//! The virtual-memory form of a device's memory ([`VirtualMemory`]): reserve a range of
//! addresses once, then back pages of it with memory and hand them back one at a time. What
//! the arena's virtual-memory mode (DESIGN, "Virtual-memory mode") runs on: CUDA's
//! `cuMemAddressReserve` / `cuMemCreate` + `cuMemMap` / `cuMemUnmap` in `cuda-sys-bridge`,
//! `mmap(PROT_NONE)` + commit / decommit on `host`, and counted address space on `virtual`.
//!
//! [`Reservations`] is the bookkeeping the backends share: which ranges are reserved and
//! what each map call mapped in them, so that a wrong call (a double map, an unmap of memory
//! that is not mapped or of part of what one map call mapped, a release of a range with
//! memory in it) is refused and changes nothing, as a driver would refuse it.

use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::MemoryInfo;
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
    /// maps nothing. What one call maps is one mapping, which only a whole unmap hands back
    /// (CUDA's form backs it with one physical allocation: one call for many pages costs
    /// about what one page does).
    fn map(&self, addr: u64, len: u64) -> Result<()>;

    /// Hands the memory behind `[addr, addr + len)` back: whole mappings, each made by one
    /// [`VirtualMemory::map`] call, adjacent; a range that cuts through a mapping is refused
    /// and changes nothing.
    fn unmap(&self, addr: u64, len: u64) -> Result<()>;

    /// As [`VirtualMemory::unmap`], for pages the caller knows no queued work uses (every
    /// stream that used them is known past its last use, issue 25): a backend whose `unmap`
    /// waits for the device first (CUDA's does, as queued work may still use the pages) skips
    /// that wait here. The default is `unmap`: a backend with no asynchronous work has
    /// nothing to wait for.
    fn unmap_idle(&self, addr: u64, len: u64) -> Result<()> {
        self.unmap(addr, len)
    }

    /// Waits until no work queued on the device before this call is running: what
    /// [`VirtualMemory::unmap`] does first. The arena calls it to hand a free chunk of one
    /// stream to another where it would otherwise unmap pages and map others (issue 25). The
    /// default does nothing: a backend with no asynchronous work has nothing to wait for.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    /// How many [`VirtualMemory::synchronize`] calls have returned so far: for checks (a
    /// model of stream reuse counts a wait for the device as every stream's wait). 0 from a
    /// backend that does not count them.
    fn synchronizations(&self) -> u64 {
        0
    }

    /// Bytes mapped now.
    fn mapped_bytes(&self) -> u64;

    /// Every mapping now, as `(address, length)`, lowest first within each range: what each
    /// [`VirtualMemory::map`] call mapped that is still mapped. For checks and diagnostics;
    /// empty from a backend that does not keep them.
    fn mappings(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }

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
    fn unmap_idle(&self, addr: u64, len: u64) -> Result<()> {
        (**self).unmap_idle(addr, len)
    }
    fn synchronize(&self) -> Result<()> {
        (**self).synchronize()
    }
    fn synchronizations(&self) -> u64 {
        (**self).synchronizations()
    }
    fn mapped_bytes(&self) -> u64 {
        (**self).mapped_bytes()
    }
    fn mappings(&self) -> Vec<(u64, u64)> {
        (**self).mappings()
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

/// One reserved range: its size and its mappings (start → end, one per map call).
#[derive(Debug, Default)]
struct Range {
    size: u64,
    mapped: BTreeMap<u64, u64>,
}

/// Reserved ranges and what is mapped in them, checked the way a driver checks its calls.
/// Mappings rather than a bitmap: a simulated device may have a small granularity and a
/// large range, and the arena maps runs.
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

    /// Records `[addr, addr + len)` as one mapping (after [`Reservations::check_map`]).
    pub fn mark_mapped(&mut self, addr: u64, len: u64) {
        let Some(base) = self.range_of(addr, len).map(|(b, _)| b) else {
            return;
        };
        let Some(r) = self.ranges.get_mut(&base) else {
            return;
        };
        r.mapped.insert(addr, addr + len);
        self.mapped += len;
    }

    /// The mappings `(start, end)` that cover `[addr, addr + len)` without a gap, lowest
    /// first, or `None` when some of it is not mapped.
    fn cover(&self, addr: u64, len: u64) -> Option<Vec<(u64, u64)>> {
        let (_, r) = self.range_of(addr, len)?;
        let end = addr + len;
        let (&first, _) = r.mapped.range(..=addr).next_back()?;
        let mut out = Vec::new();
        let mut at = first;
        for (&s, &e) in r.mapped.range(first..end) {
            if s != at {
                return None;
            }
            out.push((s, e));
            at = e;
        }
        (at >= end).then_some(out)
    }

    /// Whether all of `[addr, addr + len)` is mapped (by one or more adjacent mappings).
    pub fn is_mapped(&self, addr: u64, len: u64) -> bool {
        self.cover(addr, len).is_some()
    }

    /// The mappings `[addr, addr + len)` consists of, as `(address, length)`: for a backend
    /// that hands them back one by one.
    pub fn mappings_in(&self, addr: u64, len: u64) -> Vec<(u64, u64)> {
        self.cover(addr, len)
            .unwrap_or_default()
            .into_iter()
            .map(|(s, e)| (s, e - s))
            .collect()
    }

    /// Checks that `[addr, addr + len)` can be unmapped: aligned, all of it mapped, and
    /// whole mappings (no mapping starts before it or ends after it).
    pub fn check_unmap(&self, addr: u64, len: u64) -> Result<()> {
        self.check_aligned(addr, len)?;
        let Some(cover) = self.cover(addr, len) else {
            return Err(ArenaError::unknown_pointer(
                addr,
                format!("{len} bytes from here are not all mapped"),
            ));
        };
        let whole = cover.first().is_some_and(|m| m.0 == addr)
            && cover.last().is_some_and(|m| m.1 == addr + len);
        if !whole {
            return Err(ArenaError::invalid_argument(format!(
                "[{addr:#x}, +{len}) cuts through a mapping: only whole mappings (what one map call mapped) can be unmapped"
            )));
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
        let gone: Vec<u64> = r.mapped.range(addr..addr + len).map(|(&s, _)| s).collect();
        for s in gone {
            r.mapped.remove(&s);
        }
        self.mapped -= len;
    }

    /// Every mapping as `(address, length)`, by range, lowest first.
    pub fn mappings(&self) -> Vec<(u64, u64)> {
        self.ranges
            .values()
            .flat_map(|r| r.mapped.iter().map(|(&s, &e)| (s, e - s)))
            .collect()
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
    fn only_whole_mappings_can_be_unmapped() {
        let mut r = Reservations::new(G);
        r.add(0x10_0000, 16 * G);
        r.mark_mapped(0x10_0000, 4 * G);
        r.mark_mapped(0x10_0000 + 4 * G, 2 * G);
        assert!(r.is_mapped(0x10_0000 + 3 * G, 2 * G), "across two mappings");
        assert!(r.check_unmap(0x10_0000, 2 * G).is_err(), "the start of one");
        assert!(
            r.check_unmap(0x10_0000 + G, 5 * G).is_err(),
            "the end of one and the next"
        );
        assert!(
            r.check_unmap(0x10_0000, 5 * G).is_err(),
            "one and part of the next"
        );
        assert_eq!(
            r.mappings_in(0x10_0000, 6 * G),
            vec![(0x10_0000, 4 * G), (0x10_0000 + 4 * G, 2 * G)]
        );
        r.check_unmap(0x10_0000, 6 * G).expect("two whole mappings");
        r.mark_unmapped(0x10_0000, 6 * G);
        assert_eq!(r.mapped_bytes(), 0);
        r.check_release(0x10_0000, 16 * G).expect("empty");
    }

    #[test]
    fn one_granule_mappings_are_unmapped_one_by_one() {
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
