//! The arena's allocation and reserve paths in virtual-memory mode: on sub-arena 0, which
//! every thread shares there, pages mapped under its lock and the global one.

use super::super::*;

impl<R: RawAllocator> Arena<R> {
    /// The slow path in virtual-memory mode, on sub-arena 0 (which every thread shares there)
    /// as the arena was before sub-arenas: pages are mapped under its lock (and the global
    /// lock, so the quota is charged at once), the budget follows what the sub-arena holds.
    #[cold]
    #[inline(never)]
    pub(in crate::arena::bfc) fn allocate_vm(
        &self,
        vm: &dyn VirtualMemory,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
    ) -> Result<Option<u64>> {
        let consumer = stream.map_or(0, Stream::id);
        let sub = self.subs.get_or_make(0);
        let mut waited = Waited::Nothing;
        loop {
            let mut global = Some(self.subs.global());
            let mut st = sub.lock();
            let id = match st.find(rounded, consumer, stream) {
                Some(id) => id,
                None => {
                    let reaped = st.reap_orphans();
                    if !reaped.is_empty() {
                        drop(st);
                        drop(global);
                        // Their events go back with no lock held; then search again.
                        drop(reaped);
                        continue;
                    }
                    let others = if waited == Waited::Nothing {
                        st.hosted_holding_back(rounded, consumer)
                    } else {
                        Vec::new()
                    };
                    if !others.is_empty() {
                        drop(st);
                        drop(global);
                        // Driver calls (event record, query) with no lock held.
                        for f in &others {
                            f.advance();
                        }
                        waited = Waited::Polled;
                        continue;
                    }
                    st.check_live()?;
                    let before = st.held();
                    let clock = stream.map(Stream::clock);
                    let grown = st.vm_grow_and_find(
                        vm,
                        &self.config,
                        rounded,
                        size,
                        consumer,
                        clock.as_deref(),
                    );
                    drop(clock);
                    self.subs.follow_budget(before, st.held());
                    match grown {
                        Ok(id) => id,
                        Err(e @ ArenaError::OutOfMemory { .. }) if waited != Waited::Finished => {
                            let others = st.hosted_waiting(consumer);
                            if others.is_empty() {
                                return Err(e);
                            }
                            drop(st);
                            drop(global);
                            for f in &others {
                                f.finish();
                            }
                            waited = Waited::Finished;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let chunk_size = st.chunks.get(id).size;
            let split = st.splits(chunk_size, rounded, self.split_waste);
            let charge = if split { rounded } else { chunk_size };
            let frozen = match self.subs.admit(&mut global, 0, &mut st, charge) {
                Admit::Fits(frozen) => frozen,
                // Not with the global lock held; search again if it were.
                Admit::Retry => continue,
            };
            let sync_id = stream.map_or(0, Stream::sync_id);
            let addr = st.take(id, rounded, size, consumer, sync_id, split);
            drop(frozen);
            drop(global);
            if let Some(stream) = stream {
                self.tag_with(&mut st, stream);
            }
            return Ok(Some(addr));
        }
    }

    /// A reserve in virtual-memory mode: from the raw allocator under sub-arena 0's lock (and
    /// the global lock), so that mapping pages and reserves share one budget exactly; out of
    /// memory, the wholly free pages are unmapped and it is tried once more (decision 7).
    pub(in crate::arena::bfc) fn reserve_vm(
        &self,
        vm: &dyn VirtualMemory,
        size: u64,
    ) -> Result<Option<u64>> {
        let sub = self.subs.get_or_make(0);
        let mut global = Some(self.subs.global());
        let mut st = sub.lock();
        st.check_live()?;
        let addr = match self.raw_reserve(size) {
            Err(e @ ArenaError::OutOfMemory { .. }) => {
                let before = st.held();
                let (released, _) = st.vm_release_all_free(vm);
                self.subs.follow_budget(before, st.held());
                if released == 0 {
                    return Err(e);
                }
                st.reset_growth(&self.config);
                self.raw_reserve(size)?
            }
            other => other?,
        };
        let frozen = match self.subs.admit(&mut global, 0, &mut st, size) {
            Admit::Fits(frozen) => frozen,
            Admit::Retry => {
                // Not with the global lock held; give the memory back if it were.
                drop(st);
                let _ = self.raw.free(addr, size);
                self.subs.return_budget(size);
                return Err(ArenaError::oom(size, "the arena could not account for it"));
            }
        };
        st.reserves.insert(addr, size);
        st.stats.add_in_use(size, size);
        st.stats.num_reserves += 1;
        st.stats.reserved_bytes += size;
        st.stats.total_allocated += size;
        drop(frozen);
        drop(global);
        self.subs.directory.insert(addr, size, 0);
        Ok(Some(addr))
    }
}
