//! Giving pages back in virtual-memory mode: the wholly free runs of mapped pages, unmapping
//! them for the headroom, the unmap threshold, decision 7's retry and shrink, and retiring.

use super::*;

impl<S: Source> State<S> {
    /// Wholly free mapped page runs, as `(slot, addr, len, a chunk of the run)`, outside
    /// `keep`.
    pub(super) fn vm_free_runs(&self, keep: Keep, scan: Scan) -> Vec<(u32, u64, u64, u32)> {
        let Some(p) = self.source.pages() else {
            return Vec::new();
        };
        let page = p.page();
        // Spans of adjacent mapped free chunks: (slot, lo, hi, first chunk).
        let mut spans: Vec<(u32, u64, u64, u32)> = Vec::new();
        match scan {
            Scan::Large | Scan::Headroom(..) => {
                for b in bin_for_size(page)..NUM_BINS {
                    for id in self.bins.bin_ids(b) {
                        let c = self.chunks.get(id);
                        spans.push((c.region, c.addr, c.addr + c.size, id));
                    }
                }
            }
            Scan::Everything => {
                for (slot, r) in self.regions.iter() {
                    let mut id = r.first_chunk;
                    let mut open: Option<(u64, u32)> = None;
                    while id != NIL {
                        let c = self.chunks.get(id);
                        let free = !c.in_use && c.stream != UNMAPPED;
                        match (free, open) {
                            (true, None) => open = Some((c.addr, id)),
                            (false, Some((lo, first))) => {
                                spans.push((slot, lo, c.addr, first));
                                open = None;
                            }
                            _ => {}
                        }
                        id = c.next;
                    }
                    if let Some((lo, first)) = open {
                        spans.push((slot, lo, r.base + r.size, first));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (slot, lo, hi, first) in spans {
            let base = self.regions.get(slot).base;
            let (a, b) = (ceil_to(lo, base, page), floor_to(hi, base, page));
            if a >= b {
                continue;
            }
            // Cut out the pages a mapping in progress is for.
            match keep {
                Some((ks, klo, khi)) if ks == slot => {
                    if a < klo {
                        out.push((slot, a, b.min(klo) - a, first));
                    }
                    if b > khi {
                        let s = a.max(khi);
                        out.push((slot, s, b - s, first));
                    }
                }
                _ => out.push((slot, a, b - a, first)),
            }
        }
        out
    }

    /// Unmaps wholly free pages (outside `keep`), highest addresses first, until `target`
    /// bytes are unmapped or none are left. Returns the runs unmapped and the first error
    /// (the pass stops there; what it unmapped stays unmapped).
    ///
    /// For the headroom where other host streams tag chunks too (K sessions), the pages that
    /// need no wait go first: only if they fall short does a second pass wait for the
    /// consumer's own work on the rest (a thread that waits for its stream stops feeding the
    /// device; ONNX Runtime's K = 4 sessions served 151.5 requests/s without the wait against
    /// 137.9 with it, on an H100 at e90306e).
    pub(super) fn vm_unmap_free(
        &mut self,
        vm: &dyn VirtualMemory,
        keep: Keep,
        target: u64,
        scan: Scan,
    ) -> (usize, Option<ArenaError>) {
        // One pass, highest addresses first, as for the other scans: past unknown work, where
        // no run is idle without a wait; and for a stream alone here (PyTorch's: with idle runs
        // first, BERT serving held 614 MiB in 2 of 13 runs on an H200, against 588 in the 16
        // runs of the two sessions before; the fit packs low, so top pages stay free longest).
        let others = match scan {
            Scan::Headroom(consumer, _) => self.hosted.others_progress(consumer).is_some(),
            _ => false,
        };
        if !others || self.unknown_work {
            let (count, _, err) = self.vm_unmap_pass(vm, keep, target, scan, true);
            return (count, err);
        }
        let (count, freed, err) = self.vm_unmap_pass(vm, keep, target, scan, false);
        if err.is_some() || freed >= target {
            return (count, err);
        }
        // The runs again: the first pass changed the chunks the old ones started at.
        let (more, _, err) = self.vm_unmap_pass(vm, keep, target - freed, scan, true);
        (count + more, err)
    }

    /// One pass of [`State::vm_unmap_free`]: with `may_wait` false, runs that only a wait
    /// would make idle are passed over. Returns the runs and bytes unmapped and the first
    /// error.
    fn vm_unmap_pass(
        &mut self,
        vm: &dyn VirtualMemory,
        keep: Keep,
        target: u64,
        scan: Scan,
        may_wait: bool,
    ) -> (usize, u64, Option<ArenaError>) {
        let Ok(page) = self.paged().map(Paged::page) else {
            return (0, 0, None);
        };
        let mut runs = self.vm_free_runs(keep, scan);
        // Highest addresses first: the fit packs low, so the top is likeliest to stay free.
        runs.sort_unstable_by_key(|r| std::cmp::Reverse(r.1));
        let (mut freed, mut count) = (0u64, 0usize);
        for (slot, a, n, first) in runs {
            if freed >= target {
                break;
            }
            // Whole mappings only: those lying wholly in the run.
            let Some((a, end)) = self
                .source
                .pages()
                .and_then(|p| p.pages.whole_mappings(slot, a, a + n))
            else {
                continue;
            };
            // The top of the run, in whole pages, as much as is still wanted, from where the
            // mapping holding its first page starts.
            let want = (end - a).min(ceil_to(target - freed, 0, page));
            let start = self.source.pages().map_or(a, |p| {
                p.pages.mapping_start_at_or_below(slot, end - want, a)
            });
            let take = end - start;
            // Waiting for the device only when a chunk's stream is not known past its free.
            let mut idle = self.vm_run_idle(first, start, start + take);
            if let Scan::Headroom(consumer, device_wait) = scan {
                if !idle && !may_wait {
                    continue;
                }
                if !idle
                    && (!device_wait
                        || self.hosted.any_incomplete()
                        || self.vm_run_has_host_chunks(first, start + take))
                {
                    // For the headroom, never wait on a host stream's pending work, here or in
                    // another sub-arena: it may wait on this very caller (a stream held at a
                    // gate the host opens later; issue 25's GPU test deadlocked so). The consumer's own work is
                    // waited for, as PyTorch's expandable segments synchronize the stream
                    // before unmapping: with its pages kept mapped, one stream past the
                    // headroom mapped more on every miss (BERT serving 618 MiB against 584).
                    if !self.vm_wait_own(consumer, first, start, start + take) {
                        continue;
                    }
                    idle = true;
                }
            }
            let unmapped = if idle {
                vm.unmap_idle(start, take)
            } else {
                vm.unmap(start, take)
            };
            if let Err(e) = unmapped {
                return (count, freed, Some(e));
            }
            if !idle {
                // The device was waited for: no work of before is left.
                self.unknown_work = false;
            }
            let pieces = self.vm_pieces(first, start, start + take);
            let id = self.vm_join(&pieces, UNMAPPED);
            self.vm_settle(id);
            if let Some(p) = self.source.pages_mut() {
                p.pages.set_run(slot, start, take, false);
                self.stats.total_allocated -= take;
                self.stats.num_arena_extensions = p.pages.extents();
            }
            self.stats.num_arena_shrinkages += 1;
            if matches!(scan, Scan::Headroom(..)) {
                if let Some(p) = self.source.pages_mut() {
                    if p.evicted.len() == CHURN_WINDOW {
                        p.evicted.pop_front();
                    }
                    p.evicted.push_back((slot, start, start + take));
                }
            }
            freed += take;
            count += 1;
        }
        (count, freed, None)
    }

    /// For a run of wholly free pages `[lo, hi)` from chunk `first` that only `consumer`'s
    /// pending work may still use (a host stream with events, alive in this call): waits for
    /// that stream's work so far, never another's or the device's. Returns whether the run is
    /// then idle (see [`State::vm_run_idle`]).
    fn vm_wait_own(&self, consumer: StreamId, first: u32, lo: u64, hi: u64) -> bool {
        let Some(own) = self.hosted.events(consumer) else {
            return false;
        };
        self.vm_run_past(first, lo, hi, Some(consumer))
            && own.finish_own()
            && self.vm_run_idle(first, lo, hi)
    }

    /// Whether a chunk of a host stream with events lies in the run from chunk `first` up to
    /// `hi`: its events, not a wait for the device, say when its pages are free.
    fn vm_run_has_host_chunks(&self, first: u32, hi: u64) -> bool {
        let mut id = first;
        while id != NIL {
            let c = self.chunks.get(id);
            if c.addr >= hi {
                break;
            }
            if self.hosted.contains(c.stream) {
                return true;
            }
            id = c.next;
        }
        false
    }

    /// Whether no queued work can use `[lo, hi)`, a run of wholly free mapped pages whose
    /// span starts at chunk `first`: nothing was handed out with no stream since the device
    /// was last waited for, and each chunk there is of no stream or of a host stream whose
    /// events say its work is past the chunk's free (the same rule another stream's reuse
    /// follows). No driver call: what the events are known to say.
    fn vm_run_idle(&self, first: u32, lo: u64, hi: u64) -> bool {
        self.vm_run_past(first, lo, hi, None)
    }

    /// [`State::vm_run_idle`], counting the chunks of stream `settled` (if given) as past
    /// their frees too: what waiting for that stream's work would make of the run.
    fn vm_run_past(&self, first: u32, lo: u64, hi: u64, settled: Option<StreamId>) -> bool {
        if self.unknown_work {
            return false;
        }
        let mut id = first;
        while id != NIL {
            let c = self.chunks.get(id);
            if c.addr >= hi {
                break;
            }
            let past = c.stream == 0
                || settled == Some(c.stream)
                || self
                    .hosted
                    .events(c.stream)
                    .is_some_and(|e| e.is_complete(c.sync_id));
            if c.addr + c.size > lo && (c.in_use || !past) {
                return false;
            }
            id = c.next;
        }
        true
    }

    /// After a free: the mapped bytes no chunk uses, when `arena.vm_unmap_threshold_bytes` is
    /// set and they pass it ([`State::vm_trim`] then unmaps wholly free pages). A comparison on
    /// the common path.
    #[inline(always)]
    pub(in crate::arena::bfc) fn vm_free_past_trigger(&self) -> Option<u64> {
        let p = self.source.pages()?;
        let free = p
            .pages
            .mapped_bytes()
            .saturating_sub(self.stats.in_use - self.stats.reserved_bytes);
        (free > p.trigger).then_some(free)
    }

    #[cold]
    #[inline(never)]
    pub(in crate::arena::bfc) fn vm_trim(&mut self, vm: &dyn VirtualMemory, free: u64) {
        let Some(threshold) = self.source.pages().and_then(|p| p.threshold) else {
            return;
        };
        // An unmap the backend refuses leaves its pages mapped and counted; the next trim
        // tries again.
        let _ = self.vm_unmap_free(vm, None, free - threshold, Scan::Large);
        let left = self
            .source
            .pages()
            .map_or(0, |p| p.pages.mapped_bytes())
            .saturating_sub(self.chunk_bytes_in_use());
        if let Some(p) = self.source.pages_mut() {
            p.trigger = threshold.max(left);
        }
    }

    /// Shrink and decision 7: unmaps every wholly free page and gives back the ranges with
    /// nothing in use. Returns how many runs of pages were unmapped and the first error.
    pub(in crate::arena::bfc) fn vm_release_all_free(
        &mut self,
        vm: &dyn VirtualMemory,
    ) -> (usize, Option<ArenaError>) {
        let (count, err) = self.vm_unmap_free(vm, None, u64::MAX, Scan::Everything);
        if err.is_none() {
            for slot in self.idle_regions() {
                self.vm_drop_range(vm, slot);
            }
        }
        if let Some(p) = self.source.pages_mut() {
            p.trigger = p.threshold.unwrap_or(u64::MAX);
            p.slack = 0;
            p.evicted.clear();
        }
        (count, err)
    }

    /// Retire: unmaps every page and gives back every range. Errors cannot be reported; the
    /// backend's counters show what came back.
    pub(in crate::arena::bfc) fn vm_retire(&mut self, vm: &dyn VirtualMemory) {
        let Some(p) = self.source.pages_mut() else {
            return;
        };
        let page = p.page();
        for (slot, r) in self.regions.iter() {
            for (a, n) in p.pages.extents_of(slot) {
                let _ = vm.unmap(a, n);
            }
            let _ = vm.release(r.base, r.size);
        }
        p.pages = PageTable::new(page);
        p.unmapped = FreeBins::new();
        p.trigger = p.threshold.unwrap_or(u64::MAX);
        p.slack = 0;
        p.evicted.clear();
    }
}
