//! What the model checks after each operation: the memory log against what it expects, which
//! chunks a stream may reuse, what a shrink or an unmap may change, the bytes written.

use super::*;

/// After a shrink: every region (in virtual-memory mode, every mapped extent) holds a chunk
/// in use, since a wholly free one goes back.
pub(super) fn no_wholly_free_region(log: &MemoryLog) -> Result<(), String> {
    match log
        .regions
        .iter()
        .find(|r| r.chunks.iter().all(|c| !c.in_use))
    {
        Some(r) => Err(format!("shrink left the wholly free region {r:?}")),
        None => Ok(()),
    }
}

impl Model {
    /// The arena's rule: a chunk last used by stream `f.stream` goes to `consumer` only if
    /// that is the same stream, no stream, or one that has waited past the chunk's sync id.
    /// The pool's: the same stream or no stream.
    pub(super) fn may_reuse(&self, consumer: usize, f: &Freed) -> bool {
        if f.stream == consumer || f.stream == 0 {
            return true;
        }
        self.is_arena()
            && consumer != 0
            && f.sync_id
                < self.streams[consumer - 1].last_wait_sync_id(self.streams[f.stream - 1].id())
    }

    /// Virtual-memory mode: forgets freed records (or their parts) in pages no longer mapped
    /// (that memory went back to the device), and counts the bytes unmapped since `before`.
    pub(super) fn drop_unmapped(&mut self, before: &MemoryLog, log: &MemoryLog) {
        if self.vm.is_none() {
            return;
        }
        self.tally.vm_bytes_unmapped += before
            .stats
            .total_allocated
            .saturating_sub(log.stats.total_allocated);
        let mut kept = Vec::with_capacity(self.freed.len());
        for f in std::mem::take(&mut self.freed) {
            for r in &log.regions {
                let (s, e) = (f.start.max(r.base), f.end.min(r.base + r.size));
                if s < e {
                    kept.push(Freed {
                        start: s,
                        end: e,
                        ..f
                    });
                }
            }
        }
        self.freed = kept;
    }

    /// Virtual-memory mode: every mapping (what one map call mapped; only whole ones can be
    /// unmapped) has a chunk in use on one of its pages, and the mappings are the memory
    /// log's extents.
    pub(super) fn no_free_mapping_mapped(&self, log: &MemoryLog) -> Result<(), String> {
        let Some(vm) = self.vm.as_ref() else {
            return Ok(());
        };
        let mappings = vm.mappings();
        let mut covered = 0;
        for &(at, len) in &mappings {
            let Some(r) = log
                .regions
                .iter()
                .find(|r| r.base <= at && at + len <= r.base + r.size)
            else {
                return Err(format!(
                    "the mapping at {at:#x} (+{len}) is in no extent of the memory log"
                ));
            };
            covered += len;
            let used = r
                .chunks
                .iter()
                .any(|c| c.in_use && c.addr < at + len && at < c.addr + c.size);
            if !used {
                return Err(format!(
                    "the free mapping at {at:#x} (+{len}) is still mapped"
                ));
            }
        }
        let extents: u64 = log.regions.iter().map(|r| r.size).sum();
        if covered != extents {
            return Err(format!(
                "the mappings hold {covered} bytes, the memory log's extents {extents}"
            ));
        }
        Ok(())
    }

    /// Virtual-memory mode: a call that failed (or a shrink) may have unmapped wholly free
    /// pages, and changed nothing else.
    pub(super) fn check_only_unmapped(
        &self,
        before: &MemoryLog,
        after: &MemoryLog,
    ) -> Result<bool, String> {
        if after.live_chunks() != before.live_chunks() || after.reserves != before.reserves {
            return Err("a call that must not change live memory did".into());
        }
        let (b, a) = (before.stats, after.stats);
        let same = |s: AllocatorStats| {
            (
                s.in_use,
                s.requested_in_use,
                s.num_allocs,
                s.num_reserves,
                s.max_in_use,
                s.reserved_bytes,
            )
        };
        if same(b) != same(a) || a.total_allocated > b.total_allocated {
            return Err(format!(
                "stats changed beyond unmapping free pages: {b:?} → {a:?}"
            ));
        }
        if a.num_arena_extensions != after.regions.len() as u64 {
            return Err("NumArenaExtensions is not the number of mapped extents".into());
        }
        if a.total_allocated < b.total_allocated {
            if a.num_arena_shrinkages <= b.num_arena_shrinkages {
                return Err("pages went back without a shrinkage counted".into());
            }
            return Ok(true);
        }
        if before != after {
            return Err("a call that must change nothing changed the arena".into());
        }
        Ok(false)
    }

    /// Forgets freed records inside regions that went back to the raw allocator.
    pub(super) fn drop_released(&mut self, released: &[(u64, u64, u64)]) {
        self.freed.retain(|f| {
            !released
                .iter()
                .any(|&(_, base, size)| f.start >= base && f.end <= base + size)
        });
    }

    /// The arena handed `[addr, addr+len)` to `consumer`: every freed piece of it must have
    /// been `consumer`'s to take.
    pub(super) fn claim(&mut self, addr: u64, len: u64, consumer: usize) -> Result<(), String> {
        let end = addr + len;
        let mut kept = Vec::with_capacity(self.freed.len());
        for f in std::mem::take(&mut self.freed) {
            if f.end <= addr || f.start >= end {
                kept.push(f);
                continue;
            }
            if !self.may_reuse(consumer, &f) {
                return Err(format!(
                    "stream {consumer} got [{addr:#x}, {end:#x}) overlapping {f:?} without a wait"
                ));
            }
            if f.stream != consumer && f.stream != 0 {
                self.tally.cross_stream_reuse += 1;
            }
            if f.start < addr {
                kept.push(Freed { end: addr, ..f });
            }
            if f.end > end {
                kept.push(Freed { start: end, ..f });
            }
        }
        self.freed = kept;
        Ok(())
    }

    /// The pool handed out `addr`: fresh from the raw allocator (what was freed there went
    /// back to it), or a cached block of exactly this size that `consumer` may take.
    pub(super) fn pool_take(
        &mut self,
        addr: u64,
        size: u64,
        consumer: usize,
        fresh: bool,
    ) -> Result<(), String> {
        if fresh {
            self.freed
                .retain(|f| f.end <= addr || f.start >= addr + size);
            return Ok(());
        }
        let i = self
            .freed
            .iter()
            .position(|f| f.start == addr)
            .ok_or_else(|| format!("the pool handed out {addr:#x}, neither fresh nor freed"))?;
        let f = self.freed.swap_remove(i);
        if f.end - f.start != size {
            return Err(format!("the pool reused {f:?} for {size} bytes"));
        }
        if !self.may_reuse(consumer, &f) {
            return Err(format!("stream {consumer} got the pool's block {f:?}"));
        }
        self.tally.pool_reuse += 1;
        Ok(())
    }

    /// Checks a failed call left everything as it was, but for decision 7's release of
    /// wholly free regions (arena only), and forgets the freed memory that went back.
    pub(super) fn check_unchanged(
        &mut self,
        before: &MemoryLog,
        after: &MemoryLog,
    ) -> Result<(), String> {
        if self.vm.is_some() {
            if self.check_only_unmapped(before, after)? {
                self.tally.released_on_failure += 1;
            }
            self.drop_unmapped(before, after);
            return Ok(());
        }
        let removed = regions_removed(before, after);
        if removed.is_empty() {
            return if before == after {
                Ok(())
            } else {
                Err(format!(
                    "a call that must change nothing changed the allocator: {:?} → {:?}",
                    before.stats, after.stats
                ))
            };
        }
        for &(id, _, _) in &removed {
            let r = before.regions.iter().find(|r| r.id == id);
            if r.is_some_and(|r| r.chunks.iter().any(|c| c.in_use)) {
                return Err(format!(
                    "a failed call released region {id} with live chunks"
                ));
            }
        }
        if after
            .regions
            .iter()
            .any(|a| !before.regions.iter().any(|b| b == a))
        {
            return Err("a failed call left a new or changed region".into());
        }
        let k = removed.len() as u64;
        let bytes: u64 = removed.iter().map(|r| r.2).sum();
        let mut expect = before.stats;
        expect.num_arena_extensions -= k;
        expect.num_arena_shrinkages += k;
        expect.total_allocated -= bytes;
        if after.stats != expect || after.reserves != before.reserves {
            return Err(format!(
                "a failed call changed stats beyond releasing regions: {:?} vs {expect:?}",
                after.stats
            ));
        }
        self.drop_released(&removed);
        self.tally.released_on_failure += 1;
        Ok(())
    }

    pub(super) fn expected_limit(&self) -> i64 {
        match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams => {
                AllocatorStats::with_limit(self.config.max_mem).limit
            }
            Kind::Pool => 0,
            Kind::Plain => -1,
        }
    }

    pub(super) fn pattern_ends(l: &Live) -> [(u64, u64); 2] {
        let n = l.requested.min(PATTERN);
        [(0, n), (l.requested - n, n)]
    }

    pub(super) fn write_pattern(&self, l: &Live) -> Result<(), String> {
        for (offset, n) in Self::pattern_ends(l) {
            self.a()
                .write(l.addr + offset, &pattern(l.tag, offset, n))
                .map_err(|e| format!("write into live {l:?}: {e}"))?;
        }
        Ok(())
    }

    pub(super) fn verify_pattern(&self, l: &Live) -> Result<(), String> {
        for (offset, n) in Self::pattern_ends(l) {
            let mut buf = vec![0; n as usize];
            self.a()
                .read(l.addr + offset, &mut buf)
                .map_err(|e| format!("read of live {l:?}: {e}"))?;
            if buf != pattern(l.tag, offset, n) {
                return Err(format!(
                    "the bytes at offset {offset} of {l:?} changed: {buf:?}"
                ));
            }
        }
        Ok(())
    }

    pub(super) fn check(&self, log: &MemoryLog) -> Result<(), String> {
        if let Subject::Arena(arena) = &*self.subject {
            arena.check_invariants()?;
        }
        let a = self.a();
        let (mut in_use, mut requested, mut reserved) = (0u64, 0u64, 0u64);
        let mut spans = Vec::with_capacity(self.live.len());
        for l in &self.live {
            let allocated = a
                .allocated_size(l.addr)
                .map_err(|e| format!("live {l:?}: {e}"))?;
            let req = a
                .requested_size(l.addr)
                .map_err(|e| format!("live {l:?}: {e}"))?;
            if allocated != l.allocated || req != l.requested {
                return Err(format!(
                    "{l:?} now has allocated size {allocated}, requested size {req}"
                ));
            }
            if !l.addr.is_multiple_of(256) {
                return Err(format!("{l:?} is not 256-aligned"));
            }
            if self.is_arena()
                && !l.reserve
                && !log
                    .regions
                    .iter()
                    .any(|r| l.addr >= r.base && l.addr + allocated <= r.base + r.size)
            {
                return Err(format!("{l:?} lies outside every region"));
            }
            spans.push((l.addr, allocated));
            in_use += allocated;
            requested += l.requested;
            if l.reserve && self.kind != Kind::Pool {
                reserved += l.requested;
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!(
                    "allocations {:#x}+{} and {:#x} overlap",
                    w[0].0, w[0].1, w[1].0
                ));
            }
        }
        let s = log.stats;
        let outstanding = self.outstanding();
        let want = [
            ("InUse", s.in_use, in_use),
            ("RequestedInUse", s.requested_in_use, requested),
            ("ReservedBytes", s.reserved_bytes, reserved),
            ("TotalAllocated", s.total_allocated, outstanding),
            ("NumAllocs", s.num_allocs, self.expect.num_allocs),
            ("NumReserves", s.num_reserves, self.expect.num_reserves),
            ("MaxInUse", s.max_in_use, self.expect.max_in_use),
            ("MaxAllocSize", s.max_alloc_size, self.expect.max_alloc_size),
        ];
        for (what, got, model) in want {
            if got != model {
                return Err(format!("{what} is {got}, the model says {model}"));
            }
        }
        if s.limit != self.expected_limit() {
            return Err(format!("Limit is {}", s.limit));
        }
        let mut blocks: Vec<(u64, u64)> = self
            .live
            .iter()
            .filter(|l| !self.is_arena() || l.reserve)
            .map(|l| (l.addr, l.allocated))
            .collect();
        blocks.sort_unstable();
        let logged: Vec<(u64, u64)> = log.reserves.iter().map(|r| (r.addr, r.size)).collect();
        if blocks != logged {
            return Err("the memory log's blocks differ from the model's".into());
        }
        if self.is_arena() {
            let mut chunks: Vec<(u64, u64)> = self
                .live
                .iter()
                .filter(|l| !l.reserve)
                .map(|l| (l.addr, l.requested))
                .collect();
            chunks.sort_unstable();
            let logged: Vec<(u64, u64)> =
                log.live_chunks().iter().map(|&(a, _, r)| (a, r)).collect();
            if chunks != logged {
                return Err("the memory log's live chunks differ from the model's".into());
            }
        }
        if self.kind == Kind::Pool {
            let cached = outstanding.checked_sub(in_use).ok_or_else(|| {
                format!("the pool holds {outstanding} raw bytes, less than the {in_use} in use")
            })?;
            let threshold = self
                .config
                .cuda_mempool_release_threshold
                .unwrap_or(u64::MAX);
            if cached > threshold {
                return Err(format!(
                    "the pool caches {cached} bytes, over its release threshold {threshold}"
                ));
            }
        }
        if self.host {
            for l in &self.live {
                self.verify_pattern(l)?;
            }
        }
        Ok(())
    }

    /// Bookkeeping for an address handed out by a call that succeeded, after which the
    /// regions `released` were gone (decision 7).
    pub(super) fn handed_out(
        &mut self,
        addr: u64,
        size: u64,
        reserve: bool,
        consumer: usize,
        released: &[(u64, u64, u64)],
        raw_allocs_before: u64,
    ) -> Result<(), String> {
        let a = self.a();
        let allocated = a.allocated_size(addr).map_err(|e| e.to_string())?;
        let fresh = self.raw.raw_stats().raw_allocs > raw_allocs_before;
        if self.is_arena() && !reserve {
            let rounded = round_up_256(size).ok_or("a size past rounding was handed out")?;
            let max_dead = self.config.max_dead_bytes_per_chunk;
            let whole_ok = allocated > rounded && allocated / 2 < rounded;
            // ORT's split rule: a chunk is cut to the rounded size unless it is under twice
            // that and wastes less than max_dead_bytes_per_chunk. The virtual-memory mode cuts
            // every chunk but while the dead bytes of all live chunks stay within 1/2048 of
            // the chunk bytes in use, and none where memory is held strictly (churn ceiling
            // at or below the peak headroom).
            let allowed = if self.vm.is_some() {
                let (mut chunk_bytes, mut dead) = (allocated, allocated - rounded.min(allocated));
                for l in self.live.iter().filter(|l| !l.reserve) {
                    chunk_bytes += l.allocated;
                    dead += l.allocated - round_up_256(l.requested).unwrap_or(l.allocated);
                }
                whole_ok
                    && self.config.vm_churn_headroom_percent > self.config.vm_peak_headroom_percent
                    && dead <= chunk_bytes >> 11
            } else {
                whole_ok && allocated - rounded < max_dead
            };
            if allocated != rounded && !allowed {
                return Err(format!(
                    "a {size}-byte request got a chunk of {allocated} bytes"
                ));
            }
        } else if allocated != size {
            return Err(format!("a {size}-byte block reports {allocated} bytes"));
        }
        if !released.is_empty() {
            self.tally.released_then_succeeded += 1;
        }
        self.drop_released(released);
        match self.kind {
            Kind::Arena | Kind::ArenaWithoutStreams if !reserve => {
                self.claim(addr, allocated, consumer)?
            }
            Kind::Pool => self.pool_take(addr, size, consumer, fresh)?,
            Kind::Plain if !fresh => {
                return Err("the plain allocator handed out memory without a raw allocation".into())
            }
            _ => {}
        }
        let sync_id = if consumer == 0 {
            0
        } else {
            self.streams[consumer - 1].sync_id()
        };
        let l = Live {
            addr,
            requested: size,
            allocated,
            reserve,
            stream: consumer,
            sync_id,
            tag: self.next_tag,
        };
        self.next_tag = self.next_tag.wrapping_add(1);
        if self.host {
            self.write_pattern(&l)?;
        }
        self.live.push(l);
        self.expect.num_allocs += 1;
        if reserve && self.kind != Kind::Pool {
            self.expect.num_reserves += 1;
        }
        let in_use: u64 = self.live.iter().map(|l| l.allocated).sum();
        self.expect.max_in_use = self.expect.max_in_use.max(in_use);
        self.expect.max_alloc_size = self.expect.max_alloc_size.max(allocated);
        self.tally.allocs += 1;
        Ok(())
    }
}
