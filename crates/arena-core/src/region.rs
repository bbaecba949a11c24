//! Regions: the blocks obtained from the raw allocator, each tiled by chunks, and the
//! address lookup that finds the in-use chunk starting at an address.
//!
//! Each region keeps one slot per 256-byte granule (ONNX Runtime keeps the same table): the
//! id of the in-use chunk starting there, plus one, or 0. A lookup is a search over the few
//! regions and an index, a few nanoseconds where a hash map insert and remove cost twenty;
//! the table costs 4 bytes of host memory per 256 bytes of region, allocated zeroed, so
//! pages no allocation starts in are never touched.

use crate::bins::MIN_ALLOCATION_BITS;

/// One raw allocation the arena carves into chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Ordinal of the extension that created it (ORT's region id).
    pub id: u64,
    /// First byte.
    pub base: u64,
    /// Bytes, a multiple of 256.
    pub size: u64,
    /// The chunk at `base`. Never merged away: merges keep the lower chunk.
    pub first_chunk: u32,
    /// Chunks of this region currently handed out; 0 means the region can be released.
    pub in_use_chunks: u32,
    /// Per granule: id + 1 of the in-use chunk starting there, or 0.
    handles: Vec<u32>,
}

impl Region {
    /// A region of `size` bytes at `base` (both multiples of 256) with no chunk in use.
    pub fn new(id: u64, base: u64, size: u64, first_chunk: u32) -> Self {
        let granules = (size >> MIN_ALLOCATION_BITS) as usize;
        Region { id, base, size, first_chunk, in_use_chunks: 0, handles: vec![0; granules] }
    }

    #[inline]
    fn granule(&self, addr: u64) -> usize {
        ((addr - self.base) >> MIN_ALLOCATION_BITS) as usize
    }
}

/// Regions by slot, plus an index by address; slots of released regions are reused.
#[derive(Debug, Default)]
pub struct RegionSet {
    slots: Vec<Option<Region>>,
    /// `(base, end, slot)` of every region, ascending by base.
    by_addr: Vec<(u64, u64, u32)>,
}

impl RegionSet {
    /// Stores `region`, returning its slot.
    pub fn insert(&mut self, region: Region) -> u32 {
        let (base, end) = (region.base, region.base + region.size);
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(region);
                i as u32
            }
            None => {
                self.slots.push(Some(region));
                (self.slots.len() - 1) as u32
            }
        };
        let at = self.by_addr.partition_point(|r| r.0 < base);
        self.by_addr.insert(at, (base, end, slot));
        slot
    }

    /// Drops the region in `slot`, returning it.
    pub fn remove(&mut self, slot: u32) -> Option<Region> {
        let r = self.slots.get_mut(slot as usize).and_then(Option::take);
        self.by_addr.retain(|e| e.2 != slot);
        r
    }

    /// The region in `slot`; panics if the slot is empty (an arena bug).
    #[inline]
    pub fn get(&self, slot: u32) -> &Region {
        self.slots[slot as usize].as_ref().expect("chunk points at a released region")
    }

    /// The region in `slot`, mutably; panics if the slot is empty (an arena bug).
    #[inline]
    pub fn get_mut(&mut self, slot: u32) -> &mut Region {
        self.slots[slot as usize].as_mut().expect("chunk points at a released region")
    }

    /// The slot of the region containing `addr`.
    #[inline]
    pub fn find(&self, addr: u64) -> Option<u32> {
        if let [(base, end, slot)] = self.by_addr[..] {
            return (addr >= base && addr < end).then_some(slot);
        }
        let i = self.by_addr.partition_point(|r| r.0 <= addr).checked_sub(1)?;
        let (_, end, slot) = self.by_addr[i];
        (addr < end).then_some(slot)
    }

    /// The id of the in-use chunk starting exactly at `addr`.
    #[inline]
    pub fn live_chunk_at(&self, addr: u64) -> Option<u32> {
        let r = self.get(self.find(addr)?);
        if (addr - r.base) & ((1 << MIN_ALLOCATION_BITS) - 1) != 0 {
            return None;
        }
        r.handles[r.granule(addr)].checked_sub(1)
    }

    /// Records chunk `id`, starting at `addr` in region `slot`, as in use.
    #[inline]
    pub fn mark_live(&mut self, slot: u32, addr: u64, id: u32) {
        let r = self.get_mut(slot);
        let g = r.granule(addr);
        r.handles[g] = id + 1;
        r.in_use_chunks += 1;
    }

    /// Forgets the in-use chunk starting at `addr` in region `slot`.
    #[inline]
    pub fn mark_free(&mut self, slot: u32, addr: u64) {
        let r = self.get_mut(slot);
        let g = r.granule(addr);
        r.handles[g] = 0;
        r.in_use_chunks -= 1;
    }

    /// `(slot, region)` for every region held, ascending by address.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Region)> {
        self.by_addr.iter().map(|&(_, _, slot)| (slot, self.get(slot)))
    }

    /// Number of regions held.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// Slots of regions with no chunk in use.
    pub fn idle_slots(&self) -> Vec<u32> {
        self.iter().filter(|(_, r)| r.in_use_chunks == 0).map(|(s, _)| s).collect()
    }
}
