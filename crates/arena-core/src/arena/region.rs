//! Regions: the blocks obtained from the raw allocator, each tiled by chunks, indexed by
//! slot and by address.

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
        let i = self
            .by_addr
            .partition_point(|r| r.0 <= addr)
            .checked_sub(1)?;
        let (_, end, slot) = self.by_addr[i];
        (addr < end).then_some(slot)
    }

    /// `(slot, region)` for every region held, ascending by address.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Region)> {
        self.by_addr
            .iter()
            .map(|&(_, _, slot)| (slot, self.get(slot)))
    }

    /// Number of regions held.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }
}
