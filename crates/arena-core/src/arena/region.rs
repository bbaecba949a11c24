//! Regions: the blocks obtained from the raw allocator, each tiled by chunks, indexed by
//! slot and by address.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// One raw allocation the arena carves into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Ordinal of the extension that created it (ORT's region id).
    pub id: u64,
    /// First byte.
    pub base: u64,
    /// Bytes, a multiple of 256.
    pub size: u64,
    /// The chunk at `base`. Never merged away: merges keep the lower chunk's id.
    pub first_chunk: u32,
}

/// Regions by slot, plus an index by address; slots of released regions are reused, lowest
/// first. Insert, remove and find are O(log regions), get O(1): with `arena.extend_strategy=1`
/// each allocation that fits no free chunk is a region of its own, so a caller can hold
/// hundreds of thousands.
#[derive(Debug, Default)]
pub struct RegionSet {
    slots: Vec<Option<Region>>,
    /// The empty slots of `slots`.
    vacant: BinaryHeap<Reverse<u32>>,
    /// `base -> (end, slot)` of every region.
    by_addr: BTreeMap<u64, (u64, u32)>,
}

impl RegionSet {
    /// Stores `region`, returning its slot.
    pub fn insert(&mut self, region: Region) -> u32 {
        let (base, end) = (region.base, region.base + region.size);
        let slot = match self.vacant.pop() {
            Some(Reverse(i)) => {
                self.slots[i as usize] = Some(region);
                i
            }
            None => {
                self.slots.push(Some(region));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_addr.insert(base, (end, slot));
        slot
    }

    /// Drops the region in `slot`, returning it.
    pub fn remove(&mut self, slot: u32) -> Option<Region> {
        let r = self.slots.get_mut(slot as usize).and_then(Option::take)?;
        self.by_addr.remove(&r.base);
        self.vacant.push(Reverse(slot));
        Some(r)
    }

    /// The region in `slot`; panics if the slot is empty (an arena bug).
    #[inline]
    pub fn get(&self, slot: u32) -> &Region {
        self.slots[slot as usize]
            .as_ref()
            .expect("chunk points at a released region")
    }

    /// The region in `slot`, mutably; panics if the slot is empty (an arena bug).
    #[inline]
    pub fn get_mut(&mut self, slot: u32) -> &mut Region {
        self.slots[slot as usize]
            .as_mut()
            .expect("chunk points at a released region")
    }

    /// The slot of the region containing `addr`.
    pub fn find(&self, addr: u64) -> Option<u32> {
        let (_, &(end, slot)) = self.by_addr.range(..=addr).next_back()?;
        (addr < end).then_some(slot)
    }

    /// `(slot, region)` for every region held, ascending by address.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Region)> {
        self.by_addr
            .values()
            .map(|&(_, slot)| (slot, self.get(slot)))
    }

    /// Number of regions held.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(base: u64, size: u64) -> Region {
        Region {
            id: base,
            base,
            size,
            first_chunk: 0,
        }
    }

    #[test]
    fn find_names_the_region_holding_an_address_and_none_in_the_gaps() {
        let mut set = RegionSet::default();
        let a = set.insert(region(0x3000, 0x1000));
        let b = set.insert(region(0x1000, 0x1000));
        assert_eq!(set.find(0x1000), Some(b));
        assert_eq!(set.find(0x1fff), Some(b));
        assert_eq!(set.find(0x2000), None, "the gap between them");
        assert_eq!(set.find(0x3000), Some(a));
        assert_eq!(set.find(0x3fff), Some(a));
        assert_eq!(set.find(0x4000), None, "past the last");
        assert_eq!(set.find(0xfff), None, "below the first");
        assert_eq!(set.find(u64::MAX), None);
    }

    #[test]
    fn iter_ascends_by_address_whatever_the_order_of_insertion() {
        let mut set = RegionSet::default();
        for base in [0x5000, 0x1000, 0x9000, 0x3000] {
            set.insert(region(base, 0x1000));
        }
        let bases: Vec<u64> = set.iter().map(|(_, r)| r.base).collect();
        assert_eq!(bases, [0x1000, 0x3000, 0x5000, 0x9000]);
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn a_released_slot_is_reused_lowest_first_and_its_address_is_forgotten() {
        let mut set = RegionSet::default();
        let slots: Vec<u32> = (0..4)
            .map(|i| set.insert(region(0x1000 * (i + 1), 0x1000)))
            .collect();
        assert_eq!(slots, [0, 1, 2, 3]);
        assert_eq!(set.remove(2).map(|r| r.base), Some(0x3000));
        assert_eq!(set.remove(1).map(|r| r.base), Some(0x2000));
        assert_eq!(set.remove(1), None, "already released");
        assert_eq!(set.remove(99), None, "never held");
        assert_eq!(set.find(0x2800), None);
        assert_eq!(set.len(), 2);
        assert_eq!(set.insert(region(0x8000, 0x1000)), 1);
        assert_eq!(set.insert(region(0x9000, 0x1000)), 2);
        assert_eq!(set.insert(region(0xa000, 0x1000)), 4);
        assert_eq!(set.find(0x8000), Some(1));
    }
}
