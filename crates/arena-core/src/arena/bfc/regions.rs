//! A sub-arena's regions in the region mode: how big the next one is (ORT's `Extend`, with
//! its back-off), adding one, and taking idle ones out to give back (shrink) or to move.

use super::*;

/// ORT's back-off: asks `raw` for `size` bytes, then for 90% of that and so on while it stays
/// at least `rounded` and [`BACKOFF_MIN_BYTES`]; `shrunk(by)` hears of each smaller request.
/// Returns the region's base and size.
pub(super) fn alloc_region<R: RawAllocator>(
    raw: &R,
    mut size: u64,
    rounded: u64,
    requested: u64,
    mut shrunk: impl FnMut(u64),
) -> Result<(u64, u64)> {
    loop {
        match raw.alloc(size) {
            Ok(base) => return Ok((base, size)),
            Err(ArenaError::OutOfMemory { reason, .. }) => {
                let smaller = ((size as f32) * BACKOFF_FACTOR) as u64;
                let smaller = round_up_256(smaller).unwrap_or(u64::MAX);
                if smaller >= size || smaller < rounded || smaller < BACKOFF_MIN_BYTES {
                    return Err(ArenaError::oom(
                        requested,
                        format!("the raw allocator refused a region for {rounded} bytes, even after backing off to {size}: {reason}"),
                    ));
                }
                shrunk(size - smaller);
                size = smaller;
            }
            Err(e) => return Err(e),
        }
    }
}

impl<S: Source> State<S> {
    /// The region ORT's `Extend` asks for to hold `rounded` bytes, with `available` bytes (a
    /// multiple of 256) left under `arena.max_mem` and `held` held by the whole arena, and the
    /// growth size after it; an error when the budget is too small. Changes nothing.
    pub(crate) fn plan_extend(
        &self,
        config: &ArenaConfig,
        rounded: u64,
        requested: u64,
        available: u64,
        held: u64,
    ) -> Result<(u64, u64)> {
        if rounded > available {
            return Err(ArenaError::oom(
                requested,
                format!(
                    "available memory of {available} bytes is smaller than the {rounded} bytes needed \
                     (arena.max_mem {}, {held} bytes held)",
                    crate::types::config::MaxMem(config.max_mem)
                ),
            ));
        }
        // Regions this sub-arena grew are out with threads that still use them, and come home
        // when they are done: a region of the present size, not one that doubles the next, so
        // that what stays on then stays small (issue 25).
        if !self.lent.is_empty() {
            return Ok((rounded.max(self.growth).min(available), self.growth));
        }
        Ok(match config.extend_strategy {
            ExtendStrategy::SameAsRequested => (rounded, self.growth),
            ExtendStrategy::NextPowerOfTwo => {
                let mut cur = self.growth;
                let mut increased = false;
                while rounded > cur {
                    cur = cur.checked_mul(2).unwrap_or(rounded);
                    increased = true;
                }
                let size = cur.min(available);
                // The next region doubles, up to the cap; one that had to grow past the cap
                // for this request does not double again.
                let cap = config.max_power_of_two_extend_bytes;
                if !increased {
                    cur = if cur < cap / 2 { cur * 2 } else { cap };
                }
                (size, cur)
            }
        })
    }

    /// Adds the region the raw allocator gave for a [`State::plan_extend`], and takes its
    /// growth size.
    pub(crate) fn commit_extend(&mut self, base: u64, size: u64, growth: u64, id: u64) {
        self.growth = growth;
        self.add_region(base, size, id);
    }

    pub(super) fn add_region(&mut self, base: u64, size: u64, id: u64) {
        self.insert_region(base, size, id);
        self.stats.total_allocated += size;
        self.stats.num_arena_extensions += 1;
    }

    /// A region `[base, base + size)` (id `id`) tiled by one free chunk; returns its slot.
    /// Counts nothing: a raw region counts as held, a reserved range does not.
    pub(super) fn insert_region(&mut self, base: u64, size: u64, id: u64) -> u32 {
        let region = Region {
            id,
            base,
            size,
            first_chunk: NIL,
        };
        let slot = self.regions.insert(region);
        let chunk = Chunk {
            addr: base,
            size,
            requested_size: 0,
            prev: NIL,
            next: NIL,
            region: slot,
            in_use: false,
            stream: 0,
            sync_id: 0,
            alloc_id: 0,
            foreign: false,
        };
        let id = self.chunks.insert(chunk);
        self.regions.get_mut(slot).first_chunk = id;
        self.bins.insert(id, size, base);
        slot
    }

    /// Takes every region with no chunk in use out of the sub-arena, for the caller to hand
    /// back to the raw allocator with no lock held ([`State::restore_region`] if that fails).
    pub(crate) fn detach_idle_regions(&mut self) -> Vec<Detached> {
        let mut out = Vec::new();
        for slot in self.idle_regions() {
            let Some(d) = self.detach_region(slot) else {
                continue;
            };
            self.stats.num_arena_extensions -= 1;
            self.stats.num_arena_shrinkages += 1;
            out.push(d);
        }
        out
    }

    /// Takes region `slot` and its chunks out, with the bytes it holds.
    pub(super) fn detach_region(&mut self, slot: u32) -> Option<Detached> {
        let region = self.regions.remove(slot)?;
        let mut chunks = Vec::new();
        let mut id = region.first_chunk;
        while id != NIL {
            let c = *self.chunks.get(id);
            self.bins.remove(id);
            self.chunks.remove(id);
            chunks.push(c);
            id = c.next;
        }
        self.stats.total_allocated -= region.size;
        Some(Detached { region, chunks })
    }

    /// Puts back a region the raw allocator would not take back, as it was.
    pub(crate) fn restore_region(&mut self, d: Detached) {
        self.attach_region(d);
        self.stats.num_arena_extensions += 1;
        self.stats.num_arena_shrinkages -= 1;
    }

    /// Puts a detached region and its chunks in, with the bytes it holds.
    pub(super) fn attach_region(&mut self, d: Detached) {
        let slot = self.regions.insert(Region {
            first_chunk: NIL,
            ..d.region
        });
        let mut prev = NIL;
        for c in d.chunks {
            let id = self.chunks.insert(Chunk {
                prev,
                next: NIL,
                region: slot,
                ..c
            });
            if prev == NIL {
                self.regions.get_mut(slot).first_chunk = id;
            } else {
                self.chunks.get_mut(prev).next = id;
            }
            let class = self.class_of(slot);
            self.bins.insert_class(id, c.size, c.addr, class);
            prev = id;
        }
        self.stats.total_allocated += d.region.size;
    }

    /// Whether no chunk of `r` is in use.
    pub(super) fn region_is_free(&self, r: &Region) -> bool {
        let mut id = r.first_chunk;
        while id != NIL {
            let c = self.chunks.get(id);
            if c.in_use {
                return false;
            }
            id = c.next;
        }
        true
    }

    /// Slots of regions with no chunk in use. Walks every chunk: only shrinking needs it.
    pub(super) fn idle_regions(&self) -> Vec<u32> {
        self.regions
            .iter()
            .filter(|(_, r)| self.region_is_free(r))
            .map(|(slot, _)| slot)
            .collect()
    }

    /// After a shrink the next region is `initial_growth_chunk_size_bytes` again (ORT C).
    pub(crate) fn reset_growth(&mut self, config: &ArenaConfig) {
        let g = config.initial_growth_chunk_size_bytes;
        self.growth = round_up_256(g).unwrap_or(g);
    }

    pub(super) fn region_firsts(&self) -> Vec<u32> {
        self.regions.iter().map(|(_, r)| r.first_chunk).collect()
    }
}
