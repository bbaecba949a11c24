//! Regions: the blocks obtained from the raw allocator, each tiled by chunks.

/// One raw allocation the arena carves into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// Regions by slot; slots of released regions are reused.
#[derive(Debug, Default)]
pub struct RegionSet {
    slots: Vec<Option<Region>>,
    len: usize,
}

impl RegionSet {
    /// Stores `region`, returning its slot.
    pub fn insert(&mut self, region: Region) -> u32 {
        self.len += 1;
        if let Some(i) = self.slots.iter().position(Option::is_none) {
            self.slots[i] = Some(region);
            i as u32
        } else {
            self.slots.push(Some(region));
            (self.slots.len() - 1) as u32
        }
    }

    /// Drops the region in `slot`, returning it.
    pub fn remove(&mut self, slot: u32) -> Option<Region> {
        let r = self.slots.get_mut(slot as usize).and_then(Option::take);
        if r.is_some() {
            self.len -= 1;
        }
        r
    }

    /// The region in `slot`; panics if the slot is empty (an arena bug).
    #[inline]
    pub fn get_mut(&mut self, slot: u32) -> &mut Region {
        self.slots[slot as usize]
            .as_mut()
            .expect("chunk points at a released region")
    }

    /// `(slot, region)` for every region held, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Region)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i as u32, r)))
    }

    /// Number of regions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots of regions with no chunk in use.
    pub fn idle_slots(&self) -> Vec<u32> {
        self.iter()
            .filter(|(_, r)| r.in_use_chunks == 0)
            .map(|(s, _)| s)
            .collect()
    }
}
