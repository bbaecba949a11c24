//! Finding what an address belongs to: the sub-arena whose region or reserve holds it (frees
//! from another thread, reserves, unknown addresses) and the live chunk a copy's range lies
//! in, so the copy runs under the lock that keeps the chunk from being freed under it.

use super::*;

impl<R: RawAllocator, S: Source> Core<R, S> {
    /// Frees what is not an in-use chunk of `st`: a reserve, or an unknown address (an error).
    #[cold]
    #[inline(never)]
    pub(super) fn free_other(&self, st: &mut State<S>, addr: u64) -> Result<()> {
        st.check_live()?;
        if let Some(&size) = st.reserves.get(&addr) {
            // Under the sub-arena's lock, so no second free races it; reserves are rare. Out
            // of the directory first: once freed, the address may come back for another
            // sub-arena's region, which must not find this entry.
            self.subs.directory.remove(addr);
            if let Err(e) = self.raw.free(addr, size) {
                self.subs.directory.insert(addr, size, st.index());
                return Err(e);
            }
            st.reserves.remove(&addr);
            st.stats.remove_in_use(size, size);
            st.stats.reserved_bytes -= size;
            st.stats.total_allocated -= size;
            self.subs.return_budget(size);
            return Ok(());
        }
        Err(ArenaError::unknown_pointer(addr, st.describe_unknown(addr)))
    }

    /// A free that is not of a chunk this thread's sub-arena handed out.
    #[cold]
    #[inline(never)]
    pub(super) fn free_elsewhere(&self, addr: u64) -> Result<()> {
        self.with_owner(addr, |st| match st.live.remove(addr) {
            Some(id) => {
                st.mark_hosted_free(id);
                st.release_chunk(id);
                self.after_free(st);
                Ok(())
            }
            None => self.free_other(st, addr),
        })
    }

    /// Runs `op` on the locked sub-arena whose region or reserve holds `addr`; an address no
    /// sub-arena holds is unknown (`ERR_ARENA_RELEASED` once retired).
    pub(super) fn with_owner<T>(
        &self,
        addr: u64,
        op: impl FnOnce(&mut State<S>) -> Result<T>,
    ) -> Result<T> {
        match self
            .subs
            .directory
            .owner(addr)
            .and_then(|t| self.subs.get(t as usize))
        {
            Some(sub) => op(&mut sub.lock()),
            None => {
                if self.subs.is_retired() {
                    return Err(crate::allocators::allocator::retired());
                }
                Err(ArenaError::unknown_pointer(
                    addr,
                    "was not allocated by this allocator",
                ))
            }
        }
    }

    /// Runs `op` on the memory behind `[addr, addr+len)` with the owning sub-arena's lock held
    /// once the range is known to lie inside one live allocation (its requested size), so no
    /// free can race the copy: the raw allocator for a reserve or a region's chunk, the
    /// virtual-memory form for a chunk in virtual-memory mode.
    pub(super) fn in_range<T>(
        &self,
        addr: u64,
        len: u64,
        op: impl FnOnce(Memory<'_, R>) -> Result<T>,
    ) -> Result<T> {
        self.check_live()?;
        // The sub-arena whose region or reserve holds `addr`; an empty range may also sit at
        // the very end of an allocation, which the byte before names.
        let mut owners = [self.subs.directory.owner(addr), None];
        if len == 0 && addr > 0 {
            owners[1] = self
                .subs
                .directory
                .owner(addr - 1)
                .filter(|&t| Some(t) != owners[0]);
        }
        for t in owners.into_iter().flatten() {
            let Some(sub) = self.subs.get(t as usize) else {
                continue;
            };
            let st = sub.lock();
            st.check_live()?;
            match (st.contains_range(addr, len), &self.vm) {
                // A chunk's pages in virtual-memory mode.
                (Some(false), Some(vm)) => return op(Memory::Vm(&**vm)),
                (Some(_), _) => return op(Memory::Raw(&self.raw)),
                (None, _) => {}
            }
        }
        Err(out_of_range(addr, len, "this allocator"))
    }
}

impl<S: Source> State<S> {
    /// The in-use chunk containing `addr`, if any.
    pub(super) fn chunk_containing(&self, addr: u64) -> Option<&Chunk> {
        let mut id = self.regions.get(self.regions.find(addr)?).first_chunk;
        while id != NIL {
            let c = self.chunks.get(id);
            if addr < c.addr + c.size {
                return Some(c);
            }
            id = c.next;
        }
        None
    }

    /// Whether `[addr, addr + len)` lies inside one live allocation: `Some(true)` a reserve,
    /// `Some(false)` a chunk, `None` neither. Costs O(1) at an allocation's first byte or a
    /// few KiB past it, where reads and writes mostly go, however many chunks there are.
    pub(super) fn contains_range(&self, addr: u64, len: u64) -> Option<bool> {
        if let Some(&size) = self.reserves.get(&addr) {
            if range_inside(addr, len, addr, size) {
                return Some(true);
            }
        }
        // An empty range may also sit at the very end of an allocation, which the byte before
        // names (the byte at `addr` may be another chunk's, or no region's).
        let before = if len == 0 { addr.checked_sub(1) } else { None };
        for at in std::iter::once(addr).chain(before) {
            let holds = self.regions.find(at).and_then(|slot| {
                self.in_use_chunk_holding(slot, at)
                    .filter(|c| range_inside(addr, len, c.addr, c.requested_size))
            });
            if holds.is_some() {
                return Some(false);
            }
        }
        self.reserves
            .iter()
            .any(|(&base, &size)| range_inside(addr, len, base, size))
            .then_some(true)
    }

    /// The in-use chunk of region `slot` whose bytes hold `addr`. Chunks start on 256-byte
    /// granules of their region, and the in-use ones are in `live`: the first in-use start
    /// found stepping down from `addr` either holds it or ends below it (then `addr` is in
    /// free memory). Past [`HOLDING_PROBES`] granules, walks the region's chunks instead.
    pub(super) fn in_use_chunk_holding(&self, slot: u32, addr: u64) -> Option<&Chunk> {
        let base = self.regions.get(slot).base;
        let mut start = addr - (addr - base) % MIN_ALLOCATION_SIZE;
        for _ in 0..HOLDING_PROBES {
            if let Some(id) = self.live.get(start) {
                let c = self.chunks.get(id);
                return (addr - c.addr < c.size).then_some(c);
            }
            if start == base {
                return None;
            }
            start -= MIN_ALLOCATION_SIZE;
        }
        self.chunk_containing(addr).filter(|c| c.in_use)
    }

    /// Why `addr` is not a live allocation, for the error message.
    pub(super) fn describe_unknown(&self, addr: u64) -> String {
        match self.chunk_containing(addr) {
            Some(c) if c.addr == addr => "already freed".to_string(),
            Some(c) if c.in_use => format!("points inside the allocation at {:#x}", c.addr),
            Some(_) => "points inside free memory of this arena".to_string(),
            None => "was not allocated by this allocator".to_string(),
        }
    }

    pub(super) fn live_chunk(&self, addr: u64) -> Result<&Chunk> {
        match self.live.get(addr) {
            Some(id) => Ok(self.chunks.get(id)),
            None => {
                self.check_live()?;
                Err(ArenaError::unknown_pointer(
                    addr,
                    self.describe_unknown(addr),
                ))
            }
        }
    }
}
