//! One sub-arena's chunks: finding the best free chunk a stream may take, handing it out
//! (cut to size by ORT's rule), freeing and merging it, and forgetting a stream's tags.

use super::*;
use crate::arena::hosted_streams::Release;

impl<S: Source> Metered for State<S> {
    #[inline]
    fn in_use(&self) -> u64 {
        self.stats.in_use
    }

    fn peak(&self) -> u64 {
        self.stats.max_in_use
    }

    #[inline]
    fn quota(&self) -> u64 {
        self.quota
    }

    fn set_quota(&mut self, quota: u64) {
        self.quota = quota;
    }
}

impl<S: Source> State<S> {
    /// An empty sub-arena, index `index` of its arena, taking its memory from `source`.
    pub(crate) fn new(config: &ArenaConfig, index: u64, source: S) -> Self {
        let first = config.max_mem.min(config.initial_chunk_size_bytes);
        State {
            chunks: ChunkSlab::default(),
            bins: FreeBins::new(),
            regions: RegionSet::default(),
            live: AddrTable::default(),
            reserves: AddrMap::default(),
            stats: AllocatorStats::with_limit(config.max_mem),
            growth: round_up_256(first).unwrap_or(first),
            next_alloc_id: 1 + (index << 48),
            retired: false,
            hosted: HostedStreams::default(),
            lent: Vec::new(),
            source,
            peak_chunk_bytes: 0,
            dead_bytes: 0,
            unknown_work: false,
            unknown_events: 0,
            untag_progress: 0,
            layout_changes: 0,
            range_changes: Vec::new(),
            foreign_in_use: 0,
            quota: 0,
            index: index as u32,
            registered: 0,
        }
    }

    /// This sub-arena's index in its arena.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// A sub-arena made after its arena was retired is retired from the start.
    pub(crate) fn mark_retired(&mut self) {
        self.retired = true;
    }

    /// Bytes this sub-arena holds from the raw allocator: regions and reserves.
    pub(crate) fn held(&self) -> u64 {
        self.stats.total_allocated
    }

    /// `(base, size)` of every region (or reserved range) and reserve: what the directory holds.
    pub(crate) fn ranges(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.regions.iter().map(|(_, r)| (r.base, r.size)).collect();
        v.extend(self.reserves.iter().map(|(&a, &s)| (a, s)));
        v
    }

    /// `ERR_ARENA_RELEASED` once the arena is retired.
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.retired {
            return Err(ArenaError::Released {
                what: "the allocator".into(),
            });
        }
        Ok(())
    }

    /// Hands every region (or mapped page and range) and reserve back and empties the arena
    /// for good. Returns the host streams' events it held, for the caller to drop once the
    /// lock is released.
    #[must_use]
    pub(crate) fn retire<R: RawAllocator>(
        &mut self,
        raw: &R,
        vm: Option<&dyn VirtualMemory>,
    ) -> Vec<Arc<FreeEvents>> {
        // Nothing can be reported here (retire and drop cannot fail); the raw allocator's
        // counters show what came back.
        match (S::PAGED, vm) {
            (true, Some(vm)) => self.vm_retire(vm),
            _ => {
                for (_, r) in self.regions.iter() {
                    let _ = raw.free(r.base, r.size);
                }
            }
        }
        for (&addr, &size) in self.reserves.iter() {
            let _ = raw.free(addr, size);
        }
        let limit = self.stats.limit;
        self.chunks = ChunkSlab::default();
        self.bins = FreeBins::new();
        self.regions = RegionSet::default();
        self.live = AddrTable::default();
        self.reserves = AddrMap::default();
        self.stats = AllocatorStats {
            limit,
            ..AllocatorStats::default()
        };
        self.retired = true;
        self.lent.clear();
        self.peak_chunk_bytes = 0;
        self.dead_bytes = 0;
        self.foreign_in_use = 0;
        self.range_changes.clear();
        self.quota = 0;
        self.hosted.take_all()
    }

    /// The events of the host streams other than `consumer` whose frees are not all known
    /// complete.
    pub(super) fn hosted_waiting(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        self.hosted.waiting(consumer)
    }

    /// The host streams other than `consumer` whose frees, not yet known complete, hold back
    /// a free chunk of at least `rounded` bytes (best fits first, at most
    /// [`MAX_POLLED_ON_MISS`]): the streams worth polling when a search misses. Polling every
    /// host stream with incomplete frees costs an event record and query each, per miss: with
    /// 16 threads each on its own stream sharing virtual-memory mode's one sub-arena, about
    /// 33 us per allocation on an H200 (issue 25).
    pub(super) fn hosted_holding_back(
        &self,
        rounded: u64,
        consumer: StreamId,
    ) -> Vec<Arc<FreeEvents>> {
        let mut out: Vec<Arc<FreeEvents>> = Vec::new();
        if self.hosted.is_empty() {
            return out;
        }
        let class = self.source.class_for(rounded);
        let (chunks, hosted) = (&self.chunks, &self.hosted);
        self.bins.best_fit_class(class, rounded, |id| {
            let c = chunks.get(id);
            if c.stream != consumer {
                if let Some(e) = hosted.events(c.stream) {
                    if !e.is_complete(c.sync_id) && !out.iter().any(|o| Arc::ptr_eq(o, e)) {
                        out.push(e.clone());
                    }
                }
            }
            out.len() >= MAX_POLLED_ON_MISS
        });
        out
    }

    /// Whether chunks tagged with host stream `id` are in use here.
    pub(crate) fn holds_stream(&self, id: StreamId) -> bool {
        self.hosted.holds(id)
    }

    /// A chunk being freed that is tagged with a host stream with events takes that stream's
    /// next mark: another stream may take it once the stream's work up to here is done.
    #[inline]
    pub(super) fn mark_hosted_free(&mut self, id: u32) {
        if self.hosted.is_empty() {
            return;
        }
        let stream = self.chunks.get(id).stream;
        if let Some(mark) = self.hosted.freed(stream) {
            self.chunks.get_mut(id).sync_id = mark;
        }
    }

    /// The best free chunk of stream `consumer` itself for `rounded` bytes, in its class.
    pub(super) fn find_of_stream(&self, rounded: u64, consumer: StreamId) -> Option<u32> {
        let chunks = &self.chunks;
        let class = self.source.class_for(rounded);
        self.bins
            .best_fit_class(class, rounded, |id| chunks.get(id).stream == consumer)
    }

    /// A free chunk for `rounded` bytes left by a stream the host may destroy (an ONNX Runtime
    /// session's) whose work up to its free is known done: memory a session's run left
    /// behind, which the thread running the next request has no more claim to than any other.
    pub(super) fn find_left_by_destroyable(&self, rounded: u64, consumer: StreamId) -> Option<u32> {
        if self.hosted.is_empty() {
            return None;
        }
        let (chunks, hosted) = (&self.chunks, &self.hosted);
        let class = self.source.class_for(rounded);
        self.bins.best_fit_class(class, rounded, |id| {
            let c = chunks.get(id);
            c.stream != consumer
                && hosted
                    .events(c.stream)
                    .is_some_and(|e| e.host_may_destroy() && e.is_complete(c.sync_id))
        })
    }

    /// The best free chunk for `rounded` bytes that `stream` (id `consumer`, 0: no stream) may
    /// use. The stream's clock is locked only if a chunk of another stream is considered.
    #[inline(always)]
    pub(super) fn find(
        &self,
        rounded: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
    ) -> Option<u32> {
        let chunks = &self.chunks;
        let hosted = &self.hosted;
        let class = self.source.class_for(rounded);
        let cross_pool = self.source.pages().is_some_and(|p| p.cross_pool);
        let mut clock = None;
        let mut accept = |id: u32| {
            // The stream's clock is locked only for a chunk of another stream without events.
            reusable_if_waited(chunks.get(id), consumer, hosted, |of, sync_id| {
                // A host's stream waits on no event of ours: its clock is not taken.
                stream.filter(|s| !s.is_host_owned()).is_some_and(|s| {
                    let clock = clock.get_or_insert_with(|| s.clock());
                    sync_id < clock.last_wait(of)
                })
            })
        };
        match self.bins.best_fit_class(class, rounded, &mut accept) {
            None if cross_pool && self.vm_full_for(rounded) => {
                self.bins.best_fit_class(class ^ 1, rounded, accept)
            }
            found => found,
        }
    }

    /// Whether a free chunk of `chunk_size` bytes handed out for `rounded` is cut. ORT's rule
    /// ([`splits`]) in the region mode. The virtual-memory mode cuts every chunk to size
    /// (`max_dead` is 256), as bytes past the request would hold pages for nothing, but for
    /// chunks ORT would hand out whole (under twice the request) while the dead bytes of all
    /// live chunks stay within a small budget ([`vm::Paged::dead_bytes_budget`]): each whole
    /// chunk saves a cut now and a merge at its free, and what it may cost is bounded.
    #[inline(always)]
    pub(super) fn splits(&self, chunk_size: u64, rounded: u64, max_dead: u64) -> bool {
        if !splits(chunk_size, rounded, max_dead) {
            return false;
        }
        let Some(p) = self.source.pages() else {
            return true;
        };
        if chunk_size / 2 >= rounded {
            return true;
        }
        let budget = p.dead_bytes_budget(
            (self.stats.in_use - self.stats.reserved_bytes).saturating_add(chunk_size),
        );
        self.dead_bytes.saturating_add(chunk_size - rounded) > budget
    }

    /// Hands out free chunk `id`, splitting off what is left when ORT's rule says so. The
    /// caller gets the low end, as in ORT.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take(
        &mut self,
        id: u32,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        sync_id: u64,
        split: bool,
    ) -> u64 {
        if split {
            self.split(id, rounded);
        } else {
            self.bins.remove(id);
            if S::PAGED {
                self.dead_bytes += self.chunks.get(id).size - rounded;
            }
        }
        let alloc_id = self.next_alloc_id;
        self.next_alloc_id += 1;
        let c = self.chunks.get_mut(id);
        c.in_use = true;
        c.requested_size = size;
        c.alloc_id = alloc_id;
        if consumer != 0 {
            c.stream = consumer;
            c.sync_id = sync_id;
        }
        let (addr, chunk_size, tag) = (c.addr, c.size, c.stream);
        if consumer == 0 {
            // Its work is on no stream the arena knows of.
            self.work_unknown();
            if tag != 0 {
                // Taken with no stream, the chunk keeps its host stream's tag (its free takes
                // that stream's mark): it counts as that stream's in use. A chunk taken on a
                // stream is counted by `Arena::tag_with`.
                self.hosted.counts_in_use(tag);
            }
        }
        self.live.insert(addr, id);
        self.stats.add_in_use(chunk_size, size);
        self.peak_chunk_bytes = self
            .peak_chunk_bytes
            .max((self.stats.in_use - self.stats.reserved_bytes).saturating_sub(self.dead_bytes));
        // (The peak the virtual-memory headroom follows counts requests, not dead bytes.)
        addr
    }

    /// Cuts free chunk `id` at `rounded`: `id` keeps the low end and leaves the bins; the
    /// rest becomes a new free chunk with the same stream and sync id, which takes over
    /// `id`'s bin entry.
    #[inline(always)]
    pub(super) fn split(&mut self, id: u32, rounded: u64) {
        let rest_id = self.cut_links(id, rounded);
        let rest = self.chunks.get(rest_id);
        let (size, addr) = (rest.size, rest.addr);
        self.bins.replace(id, rest_id, size, addr);
    }

    /// Cuts chunk `id` at `at` bytes into two linked chunks, the upper one free with `id`'s
    /// region, stream and sync id; returns its id. Bins are the caller's business.
    #[inline(always)]
    pub(super) fn cut_links(&mut self, id: u32, at: u64) -> u32 {
        let c = self.chunks.get(id);
        let rest = Chunk {
            addr: c.addr + at,
            size: c.size - at,
            requested_size: 0,
            prev: id,
            next: c.next,
            region: c.region,
            in_use: false,
            stream: c.stream,
            sync_id: c.sync_id,
            alloc_id: 0,
            foreign: false,
        };
        let rest_id = self.chunks.insert(rest);
        if rest.next != NIL {
            self.chunks.get_mut(rest.next).prev = rest_id;
        }
        let low = self.chunks.get_mut(id);
        low.next = rest_id;
        low.size = at;
        rest_id
    }

    /// Marks in-use chunk `id` (already out of the address table) free, merges it with free
    /// neighbours of the same stream and leaves the result in its bin.
    #[inline(always)]
    pub(super) fn release_chunk(&mut self, id: u32) {
        let c = self.chunks.get_mut(id);
        c.in_use = false;
        if c.stream == 0 && S::PAGED {
            // Memory of no stream: work on it may be queued on any stream up to this free.
            self.work_unknown();
        }
        let c = self.chunks.get_mut(id);
        let (addr, size, requested, prev, next) =
            (c.addr, c.size, c.requested_size, c.prev, c.next);
        c.requested_size = 0;
        if std::mem::take(&mut c.foreign) {
            self.foreign_in_use -= size;
        }
        self.stats.remove_in_use(size, requested);
        if S::PAGED {
            let rounded = round_up_256(requested).unwrap_or(size);
            // (check_invariants recomputes it; saturating so that a fault there could not
            // panic on a free.)
            self.dead_bytes = self.dead_bytes.saturating_sub(size.saturating_sub(rounded));
        }
        let above = next != NIL && self.mergeable(id, next);
        // Memory of no stream joins a stream's here (virtual-memory mode): see below.
        let mut mixed = above && self.chunks.get(next).stream != self.chunks.get(id).stream;
        // Whether the chunk below takes this one once it has taken the one above (whose
        // stream it takes if it has none: see `merge`).
        let below = prev != NIL && {
            let (p, c) = (self.chunks.get(prev), self.chunks.get(id));
            let stream = match c.stream {
                0 if above => self.chunks.get(next).stream,
                s => s,
            };
            let merges = !p.in_use && self.streams_merge(p.stream, stream);
            mixed |= merges && p.stream != stream;
            merges
        };
        if below {
            // Both neighbours fold into the one below, which keeps its bin entry: one bin
            // update fewer than moving the entry of the one above to this chunk first.
            if above {
                self.bins.remove(next);
                self.merge(id, next);
            }
            self.merge(prev, id);
            let p = self.chunks.get(prev);
            self.bins.rekey(prev, p.size, p.addr);
        } else if above {
            // Absorb the free chunk above, taking over its bin entry.
            let merged = size + self.chunks.get(next).size;
            self.bins.replace(next, id, merged, addr);
            self.merge(id, next);
        } else {
            let c = self.chunks.get(id);
            let class = self.class_of(c.region);
            self.bins.insert_class(id, c.size, c.addr, class);
        }
        if mixed {
            self.join_own_stream_beyond(if below { prev } else { id });
        }
    }

    /// Free chunk `id` took memory of no stream that was kept apart from a host stream's free
    /// chunk beyond it ([`State::captures`]): if that chunk is of `id`'s stream now, the two
    /// merge, as free chunks of one stream always are.
    #[cold]
    #[inline(never)]
    fn join_own_stream_beyond(&mut self, id: u32) {
        let prev = self.chunks.get(id).prev;
        let id = if self.fold_same_stream(prev, id) {
            prev
        } else {
            id
        };
        let next = self.chunks.get(id).next;
        self.fold_same_stream(id, next);
    }

    /// Folds free chunk `upper` into the free chunk `lower` below it if both are of one
    /// stream (`lower` keeps its bin entry, rekeyed); whether it did.
    fn fold_same_stream(&mut self, lower: u32, upper: u32) -> bool {
        if lower == NIL
            || upper == NIL
            || !self.mergeable(lower, upper)
            || self.chunks.get(lower).stream != self.chunks.get(upper).stream
        {
            return false;
        }
        self.bins.remove(upper);
        self.merge(lower, upper);
        let c = self.chunks.get(lower);
        self.bins.rekey(lower, c.size, c.addr);
        true
    }

    /// Whether merging free chunks `a` and `b` would give memory of no stream to a host
    /// stream whose frees in the other are not known done: memory every stream may take now
    /// would wait for that stream's work (a stream per request with requests in flight:
    /// released streams' pages joined the running ones', and every request mapped new pages).
    /// Asked where chunks lose their stream ([`State::untag`]), not at a free: a busy stream
    /// freeing beside memory of no stream takes it and reuses the two whole (kept apart at
    /// every free, four PyTorch threads on streams of their own held 958 MiB at the driver on an
    /// H200, not 822-858).
    #[inline]
    pub(super) fn captures(&self, a: u32, b: u32) -> bool {
        let (a, b) = (self.chunks.get(a), self.chunks.get(b));
        // By stream, not by chunk: two free chunks of one stream with memory of no stream
        // between them must not see different answers (the middle would join one and stay
        // apart from the other, of the same stream).
        let pending = |c: &Chunk| {
            self.hosted
                .events(c.stream)
                .is_some_and(|e| e.has_incomplete())
        };
        (a.stream == 0 && b.stream != 0 && pending(b))
            || (b.stream == 0 && a.stream != 0 && pending(a))
    }

    /// Whether adjacent free chunks `a` and `b` may stay unmerged: memory of no stream beside
    /// a host stream's, which [`State::captures`] kept apart while that stream's frees were
    /// not known done (they join once its work is known done: [`State::untag_done`]).
    pub(super) fn kept_apart(&self, a: u32, b: u32) -> bool {
        let (a, b) = (self.chunks.get(a), self.chunks.get(b));
        match (a.stream, b.stream) {
            (0, s) | (s, 0) => s != 0 && self.hosted.contains(s),
            _ => false,
        }
    }

    /// Whether adjacent chunks `a` (lower) and `b` are both free and of one stream (in
    /// virtual-memory mode, or one of them of no stream: see [`State::streams_merge`]).
    #[inline]
    pub(super) fn mergeable(&self, a: u32, b: u32) -> bool {
        let (a, b) = (self.chunks.get(a), self.chunks.get(b));
        !a.in_use && !b.in_use && self.streams_merge(a.stream, b.stream)
    }

    /// Memory was handed out or freed on no stream the arena tracks: until the device is
    /// waited for, unmapping its pages waits too (see the field `unknown_work`).
    #[inline]
    pub(super) fn work_unknown(&mut self) {
        self.unknown_work = true;
        self.unknown_events = self.unknown_events.wrapping_add(1);
    }

    /// The count of [`State::work_unknown`] so far, read before a wait for the device.
    pub(super) fn unknown_events(&self) -> u64 {
        self.unknown_events
    }

    /// The device was waited for, having been asked after [`State::unknown_events`] read
    /// `seen`: if nothing unknown happened since, no unknown work is left.
    pub(super) fn device_waited(&mut self, seen: u64) {
        if self.unknown_events == seen {
            self.unknown_work = false;
        }
    }

    /// Whether free chunks of streams `a` and `b` merge when adjacent: the source's rule
    /// ([`Source::streams_merge`]).
    #[inline(always)]
    pub(super) fn streams_merge(&self, a: StreamId, b: StreamId) -> bool {
        S::streams_merge(a, b)
    }

    /// The class of bins the free chunks of region `slot` are in (the source's pool).
    #[inline(always)]
    pub(super) fn class_of(&self, slot: u32) -> u8 {
        self.source.class_of(slot)
    }

    /// Absorbs chunk `b` into the chunk `a` just below it. `b` must not be in a bin; `a`'s
    /// bin entry, if any, is left stale for the caller to re-key.
    #[inline]
    pub(super) fn merge(&mut self, a: u32, b: u32) {
        let bc = *self.chunks.get(b);
        let ac = self.chunks.get_mut(a);
        ac.size += bc.size;
        ac.next = bc.next;
        ac.sync_id = ac.sync_id.max(bc.sync_id);
        if ac.stream == 0 {
            // Free memory of no stream joining a stream's (virtual-memory mode) is that
            // stream's now: a stricter rule for it, never a looser one.
            ac.stream = bc.stream;
        }
        if bc.next != NIL {
            self.chunks.get_mut(bc.next).prev = a;
        }
        self.chunks.remove(b);
    }

    /// Free chunks whose host stream's work up to their free is known done belong to no
    /// stream any more: untagged, and merged with their free neighbours. Returns
    /// whether any was. Off the common path (a pass over every chunk): adjacent free chunks of
    /// different streams never merge, so K sessions' streams, each freeing between the others'
    /// chunks, leave free memory in pieces no larger request fits, long after their work is
    /// done (issue 25: K = 8 BERT sessions mapped 3 GiB of new pages beside 3 GiB free).
    pub(super) fn untag_done(&mut self, consumer: StreamId) -> bool {
        // Only other streams' chunks, and only when their work advanced since the last pass
        // (one thread on one stream never walks; the walk is over every chunk).
        let Some(progress) = self.hosted.others_progress(consumer) else {
            return false;
        };
        if progress == self.untag_progress {
            return false;
        }
        self.untag_progress = progress;
        self.untag_runs(|hosted, c| {
            hosted
                .events(c.stream)
                .is_some_and(|e| e.is_complete(c.sync_id))
        })
    }

    /// The device was waited for: free chunks of streams without events (whose work, freed
    /// before the wait, is done) and of host streams whose events say so belong to no stream
    /// any more, merged with their free neighbours. Returns whether any was.
    pub(super) fn untag_after_wait(&mut self) -> bool {
        self.untag_runs(|hosted, c| {
            hosted
                .events(c.stream)
                .is_none_or(|e| e.is_complete(c.sync_id))
        })
    }

    /// Whether a free chunk of at least `rounded` bytes here is held back from `consumer` only
    /// by another stream without events (a wait for the device would free it for anyone),
    /// with no host stream's work pending here.
    pub(super) fn holds_stranded(&self, rounded: u64, consumer: StreamId) -> bool {
        if self.hosted.any_incomplete() {
            return false;
        }
        let (chunks, hosted) = (&self.chunks, &self.hosted);
        self.bins
            .best_fit_any(rounded, |id| {
                let c = chunks.get(id);
                c.stream != 0 && c.stream != consumer && !hosted.contains(c.stream)
            })
            .is_some()
    }

    /// Untags each run of adjacent free mapped chunks whose every tagged chunk is `done`, and
    /// merges it into one chunk. A pass over every chunk.
    fn untag_runs(&mut self, done: impl Fn(&HostedStreams, &Chunk) -> bool) -> bool {
        let touched = self.untag_runs_in_place(done);
        self.layout_changes += u64::from(touched);
        touched
    }

    /// How many times [`State::untag_runs`] changed chunks.
    pub(crate) fn layout_changes(&self) -> u64 {
        self.layout_changes
    }

    fn untag_runs_in_place(&mut self, done: impl Fn(&HostedStreams, &Chunk) -> bool) -> bool {
        let mut touched = false;
        let firsts = self.region_firsts();
        for &first in &firsts {
            // Each free chunk that is done goes back to no stream on its own, whatever its
            // neighbours: requests in flight on streams of their own leave a pending chunk in
            // nearly every run of free chunks, and a run untagged only when all of it was done
            // stayed in pieces while new pages were mapped (638 MiB held for 6 MiB in use
            // after 30,000 such requests). A neighbour of a host stream whose frees are pending
            // is kept apart from it ([`State::kept_apart`]); one of a stream without events
            // that is not done would take it (`merge`), so the chunk waits for that one.
            let mut id = first;
            while id != NIL {
                let c = self.chunks.get(id);
                let next = c.next;
                if !c.in_use
                    && c.stream != 0
                    && c.stream != vm::UNMAPPED
                    && done(&self.hosted, c)
                    && !self.would_be_taken(c.prev, &done)
                    && !self.would_be_taken(next, &done)
                {
                    let c = self.chunks.get_mut(id);
                    c.stream = 0;
                    c.sync_id = 0;
                    touched = true;
                }
                id = next;
            }
        }
        if touched {
            // Memory of no stream stays apart from a host stream's ([`State::kept_apart`]).
            self.merge_free_runs(&firsts, Self::kept_apart);
        }
        touched
    }

    /// Whether chunk `id` (or none) is a free chunk of a stream without events that is not
    /// `done`: memory of no stream beside it would join it.
    fn would_be_taken(&self, id: u32, done: &impl Fn(&HostedStreams, &Chunk) -> bool) -> bool {
        if id == NIL {
            return false;
        }
        let c = self.chunks.get(id);
        !c.in_use
            && c.stream != 0
            && c.stream != vm::UNMAPPED
            && !self.hosted.contains(c.stream)
            && !done(&self.hosted, c)
    }

    /// Merges adjacent free chunks that share a stream now, but those `apart` keeps apart.
    fn merge_free_runs(&mut self, firsts: &[u32], apart: impl Fn(&Self, u32, u32) -> bool) {
        for &first in firsts {
            let mut id = first;
            while id != NIL {
                let next = self.chunks.get(id).next;
                if next != NIL && self.mergeable(id, next) && !apart(self, id, next) {
                    // Both are free, so both are in bins; the merged chunk goes back in.
                    self.bins.remove(id);
                    self.bins.remove(next);
                    self.merge(id, next);
                    let c = self.chunks.get(id);
                    let class = self.class_of(c.region);
                    self.bins.insert_class(id, c.size, c.addr, class);
                } else {
                    id = next;
                }
            }
        }
    }

    /// Detaches every chunk from `stream` and merges the free runs that now share a stream.
    /// Returns the stream's events if it was a host stream with events, for the caller to drop
    /// once the lock is released.
    #[must_use]
    pub(crate) fn reset_stream(&mut self, stream: StreamId) -> Option<Arc<FreeEvents>> {
        let hosted = self.hosted.remove(stream);
        let touched = self.untag(stream);
        // A host stream with events is reset when its host says its work is done or when its
        // frees are known done; what another stream leaves, no event says.
        if touched && hosted.is_none() {
            self.work_unknown();
        }
        hosted
    }

    /// Stream `stream` was released (its last handle dropped): as [`State::reset_stream`],
    /// but a stream its set forgot as done that a call took since keeps its tags for now
    /// ([`HostedStreams::release`]). Returns the events to drop once the lock is released.
    #[must_use]
    pub(crate) fn release_stream(&mut self, stream: StreamId) -> Option<Arc<FreeEvents>> {
        match self.hosted.release(stream) {
            Release::Kept => None,
            Release::Gone(hosted) => {
                let touched = self.untag(stream);
                if touched && hosted.is_none() {
                    self.work_unknown();
                }
                hosted
            }
        }
    }

    /// Untags the chunks of released streams kept as orphans, once none of their chunks is in
    /// use and their frees are done. Returns their events, to drop once the lock is released.
    #[must_use]
    pub(crate) fn reap_orphans(&mut self) -> Vec<Arc<FreeEvents>> {
        if !self.hosted.has_orphans() {
            return Vec::new();
        }
        let mut gone = Vec::new();
        for id in self.hosted.reapable() {
            gone.extend(self.hosted.remove(id));
            self.untag(id);
        }
        gone
    }

    /// Detaches every chunk from `stream`; whether any was tagged with it.
    pub(super) fn untag(&mut self, stream: StreamId) -> bool {
        let firsts = self.region_firsts();
        let mut touched = false;
        for &first in &firsts {
            let mut id = first;
            while id != NIL {
                let c = self.chunks.get_mut(id);
                if c.stream == stream {
                    c.stream = 0;
                    touched = true;
                }
                id = c.next;
            }
        }
        if !touched {
            return false;
        }
        self.merge_free_runs(&firsts, Self::captures);
        true
    }
}
