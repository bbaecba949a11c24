//! The arena as an [`Allocator`]: the public face over the allocation paths of `bfc.rs`, with
//! retiring, the stats summed over sub-arenas, shrink and the memory log.

use super::*;

impl<R: RawAllocator, S: Source> Core<R, S> {
    /// The arena as it is when nothing else runs: `ERR_ARENA_RELEASED` once retired.
    pub(super) fn check_live(&self) -> Result<()> {
        if self.subs.is_retired() {
            return Err(crate::allocators::allocator::retired());
        }
        Ok(())
    }

    /// Hands everything back to the raw allocator for good (retire and drop).
    pub(super) fn retire_all(&self) {
        let mut f = self.subs.freeze();
        if f.global.retired {
            return;
        }
        // Out of the directory before any memory goes back (it may come back to another arena).
        self.subs.directory.clear();
        let mut hosted = Vec::new();
        for (_, st) in &mut f.subs {
            let held = st.held();
            hosted.push(st.retire(&self.raw, self.vm.as_deref()));
            self.subs.return_budget(held);
        }
        self.subs.mark_retired(&mut f.global);
        f.global.ledger.clear();
        drop(f);
        // Outside the locks: the last references hand their events back to the backend.
        drop(hosted);
    }

    /// The arena's stats at the instant `f` holds: each sub-arena's summed, `MaxInUse` the
    /// ledger's.
    pub(super) fn stats_of(&self, f: &Frozen<'_, S>) -> AllocatorStats {
        let mut s = AllocatorStats::with_limit(self.config.max_mem);
        for (_, st) in &f.subs {
            let t = &st.stats;
            s.in_use += t.in_use;
            s.requested_in_use += t.requested_in_use;
            s.total_allocated += t.total_allocated;
            s.reserved_bytes += t.reserved_bytes;
            s.num_allocs += t.num_allocs;
            s.num_reserves += t.num_reserves;
            s.num_arena_extensions += t.num_arena_extensions;
            s.num_arena_shrinkages += t.num_arena_shrinkages;
            s.max_alloc_size = s.max_alloc_size.max(t.max_alloc_size);
        }
        s.max_in_use = f.global.ledger.max_in_use;
        s
    }
}

impl<R: RawAllocator, S: Source> Drop for Core<R, S> {
    fn drop(&mut self) {
        // A stream being released on another thread may still hold the sub-arenas for a moment
        // (to reset its chunks); retiring under their locks leaves it nothing to touch.
        self.retire_all();
    }
}

impl<R: RawAllocator, S: Source> Allocator for Core<R, S> {
    #[inline]
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, None)
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        // The common case: a chunk this thread's own sub-arena handed out.
        if let Some(sub) = self.subs.get(self.me()) {
            let mut st = sub.lock_for_use();
            if let Some(id) = st.live.remove(addr) {
                st.mark_hosted_free(id);
                st.release_chunk(id);
                self.after_free(&mut st);
                return Ok(());
            }
        }
        self.free_elsewhere(addr)
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        if let Some(vm) = &self.vm {
            return self.reserve_vm(&**vm, size);
        }
        let me = self.me();
        let sub = self.subs.get_or_make(me);
        sub.lock().check_live()?;
        let addr = match self.raw_reserve(size) {
            Err(ArenaError::OutOfMemory { .. }) if self.subs.release_idle(&self.raw).0 > 0 => {
                // Decision 7.
                sub.lock().reset_growth(&self.config);
                self.raw_reserve(size)?
            }
            other => other?,
        };
        let mut global = None;
        loop {
            let mut st = sub.lock();
            if let Err(e) = st.check_live() {
                drop(st);
                let _ = self.raw.free(addr, size);
                self.subs.return_budget(size);
                return Err(e);
            }
            let frozen = match self.subs.admit(&mut global, me, &mut st, size) {
                Admit::Fits(frozen) => frozen,
                Admit::Retry => {
                    drop(st);
                    global = Some(self.subs.global());
                    continue;
                }
            };
            st.reserves.insert(addr, size);
            st.stats.add_in_use(size, size);
            st.stats.num_reserves += 1;
            st.stats.reserved_bytes += size;
            st.stats.total_allocated += size;
            drop(frozen);
            drop(global);
            self.subs.directory.insert(addr, size, me as u32);
            return Ok(Some(addr));
        }
    }

    fn is_stream_aware(&self) -> bool {
        self.stream_aware
    }

    fn alloc_on_stream(&self, size: u64, stream: &Stream) -> Result<Option<u64>> {
        if !self.stream_aware {
            return Err(ArenaError::invalid_argument(format!(
                "the arena for {} is not stream-aware",
                self.raw.info()
            )));
        }
        self.allocate(size, Some(stream))
    }

    fn reset_chunks_using_stream(&self, stream: &Stream) -> Result<()> {
        self.check_live()?;
        let hosted = self.subs.reset_stream(stream.id());
        drop(hosted);
        Ok(())
    }

    fn retire(&self) {
        self.retire_all();
    }

    fn info(&self) -> MemoryInfo {
        self.raw.info()
    }

    fn stats(&self) -> AllocatorStats {
        self.stats_of(&self.subs.freeze())
    }

    fn can_shrink(&self) -> bool {
        true
    }

    fn chunks_from(&self, addr: u64) -> Option<Vec<ChunkLog>> {
        let sub = self.subs.get(self.subs.directory.owner(addr)? as usize)?;
        let st = sub.lock();
        st.chunks_from(addr)
    }

    fn layout_changes(&self) -> u64 {
        self.subs
            .used()
            .filter_map(|t| self.subs.get(t).map(|s| s.lock().layout_changes()))
            .sum()
    }

    fn shrink(&self) -> Result<()> {
        self.check_live()?;
        let (_, err) = match &self.vm {
            Some(vm) => {
                // Under the global lock, as mappings are: the arena-wide peak restarts too.
                let mut g = self.subs.global();
                let r = self.vm_release_everywhere(&**vm);
                g.vm_peak = 0;
                r
            }
            None => self.subs.release_idle(&self.raw),
        };
        for t in self.subs.used().collect::<Vec<_>>() {
            if let Some(sub) = self.subs.get(t) {
                let mut st = sub.lock();
                st.reset_growth(&self.config);
                st.peak_chunk_bytes = st.stats.in_use - st.stats.reserved_bytes;
            }
        }
        err.map_or(Ok(()), Err)
    }

    fn memory_log(&self) -> MemoryLog {
        // Logs and stats of one instant.
        let (mut logs, stats) = {
            let f = self.subs.freeze();
            let logs: Vec<MemoryLog> = f.subs.iter().map(|(_, st)| st.log()).collect();
            (logs, self.stats_of(&f))
        };
        if logs.len() == 1 {
            let mut log = logs.remove(0);
            log.stats = stats;
            return log;
        }
        let mut log = MemoryLog {
            stats,
            ..MemoryLog::default()
        };
        for l in logs {
            log.regions.extend(l.regions);
            log.reserves.extend(l.reserves);
            for b in l.bins {
                match log.bins.iter_mut().find(|x| x.bin_size == b.bin_size) {
                    Some(x) => {
                        x.chunks += b.chunks;
                        x.in_use_chunks += b.in_use_chunks;
                        x.bytes += b.bytes;
                        x.in_use_bytes += b.in_use_bytes;
                        x.requested_bytes += b.requested_bytes;
                    }
                    None => log.bins.push(b),
                }
            }
        }
        log.regions.sort_by_key(|r| r.base);
        log.reserves.sort_by_key(|r| r.addr);
        log.bins.sort_by_key(|b| b.bin_size);
        log
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        self.with_owner(addr, |st| {
            if let Some(&size) = st.reserves.get(&addr) {
                return Ok(size);
            }
            st.live_chunk(addr).map(|c| c.size)
        })
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        self.with_owner(addr, |st| {
            if let Some(&size) = st.reserves.get(&addr) {
                return Ok(size);
            }
            st.live_chunk(addr).map(|c| c.requested_size)
        })
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.in_range(addr, data.len() as u64, |m| match m {
            Memory::Raw(raw) => raw.write(addr, data),
            Memory::Vm(vm) => vm.write(addr, data),
        })
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        self.in_range(addr, len, |m| match m {
            Memory::Raw(raw) => raw.read(addr, out),
            Memory::Vm(vm) => vm.read(addr, out),
        })
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        self.in_range(addr, len, |m| match m {
            Memory::Raw(raw) => raw.fill(addr, byte, len),
            Memory::Vm(vm) => vm.fill(addr, byte, len),
        })
    }
}
