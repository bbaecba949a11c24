//! The arena's allocation and reserve paths in virtual-memory mode (issue 25). Each thread's
//! sub-arena maps pages in ranges of its own, so threads allocate and free on paths of their
//! own as in the region mode; what the arena holds follows what all of them use. A sub-arena
//! with no free chunk that fits maps pages only as far as the arena-wide headroom allows (over
//! the most chunk bytes seen in use across sub-arenas); past it, it first takes a free mapped
//! chunk of another sub-arena (memory an idle thread left, or another thread freed), then,
//! past the churn ceiling, unmaps wholly free pages of the others to make room; while other
//! sub-arenas are busy too, it maps within that ceiling rather than its own headroom. So a
//! pool's threads taking turns, or a backward pass on another thread than its forward pass,
//! hold the live set once, and threads busy at once keep their own memory.

use super::super::*;
use super::Elsewhere;

/// How far [`Arena::steal`] reaches into the other sub-arenas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Within the churn ceiling: an idle part's chunks the stream may take; a busy part's,
    /// only its own stream's.
    Idle,
    /// Past the churn ceiling: any chunk the stream may take, anywhere (a logical stream's
    /// still only its own in a busy part).
    PastCeiling,
    /// Out of memory: any chunk the stream may take, anywhere.
    Exhausted,
}

/// Where the mapping step of a miss left the allocation.
enum Mapped {
    Taken(u64),
    /// Search again: memory was freed meanwhile, or other streams' events were waited for.
    Again(Waited),
    /// Search again with the global lock held through the mapping (out of memory without
    /// it: decision 7 across sub-arenas needs it).
    Exact(Waited),
}

impl<R: RawAllocator, S: Source> Core<R, S> {
    /// The slow path in virtual-memory mode, under the global lock and this thread's
    /// sub-arena's (`me`): a chunk freed meanwhile (its quota rebalanced at once), other host
    /// streams polled once, then memory of other sub-arenas or new pages ([`Arena::map_for`]).
    #[cold]
    #[inline(never)]
    pub(in crate::arena::bfc) fn allocate_vm(
        &self,
        vm: &dyn VirtualMemory,
        me: usize,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
    ) -> Result<Option<u64>> {
        let (mut waited, mut exact) = (Waited::Nothing, false);
        loop {
            match self.map_for(vm, me, rounded, size, stream, waited, exact)? {
                Mapped::Taken(addr) => return Ok(Some(addr)),
                Mapped::Again(next) => waited = next,
                Mapped::Exact(next) => (waited, exact) = (next, true),
            }
        }
    }

    /// One try of the slow path (see [`Arena::allocate_vm`]). Where no chunk of `me` fits,
    /// mapping more pages is weighed against what every sub-arena uses: past the headroom
    /// over the most chunk bytes seen in use across them (plus a page per busy sub-arena), a
    /// free chunk of another sub-arena serves first ([`Arena::steal`]); past the churn
    /// ceiling, the others' wholly free pages are unmapped to make room; then pages are
    /// mapped in `me` (decision 7 across sub-arenas when the device refuses).
    #[allow(clippy::too_many_arguments)]
    fn map_for(
        &self,
        vm: &dyn VirtualMemory,
        me: usize,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
        waited: Waited,
        exact: bool,
    ) -> Result<Mapped> {
        let consumer = stream.map_or(0, Stream::id);
        let sub = self.subs.get_or_make(me);
        let mut global = Some(self.subs.global());
        let mut st = sub.lock_for_use();
        st.check_live()?;
        let id = match st.find(rounded, consumer, stream) {
            Some(id) => Some(id),
            None => {
                let reaped = st.reap_orphans();
                if !reaped.is_empty() {
                    drop(st);
                    drop(global);
                    // Their events go back with no lock held; then search again.
                    drop(reaped);
                    return Ok(Mapped::Again(waited));
                }
                if waited == Waited::Nothing {
                    let others = st.hosted_holding_back(rounded, consumer);
                    if !others.is_empty() {
                        drop(st);
                        drop(global);
                        // Driver calls (event record, query) with no lock held.
                        for f in &others {
                            f.advance();
                        }
                        return Ok(Mapped::Again(Waited::Polled));
                    }
                }
                None
            }
        };
        if let Some(id) = id {
            return Ok(self
                .take_locked(&mut st, &mut global, me, id, rounded, size, stream)
                .map_or(Mapped::Again(waited), Mapped::Taken));
        }
        // Each other sub-arena looked at alone, if its lock is free (one mapping pages holds
        // it through driver calls): else what it showed last. The policy needs no instant.
        let (mut elsewhere_in_use, mut busy) = (0u64, 1u64);
        let mut idle = Vec::new();
        // Free mapped bytes of each other sub-arena whose lock was free: where a stream that
        // stopped freeing holds back much, past the ceiling (below).
        let mut free_there = Vec::new();
        let Some(g) = global.as_deref_mut() else {
            return Ok(Mapped::Again(waited));
        };
        for (t, other) in self.others_indexed(me) {
            if let Some(o) = other.try_lock() {
                g.vm_seen[t] = (o.requested_chunk_bytes(), o.vm_idle());
                free_there.push((t, o.vm_free_mapped()));
            }
            let (in_use, was_idle) = g.vm_seen[t];
            elsewhere_in_use += in_use;
            busy += u64::from(in_use > 0);
            if was_idle {
                idle.push(t);
            }
        }
        let now = elsewhere_in_use
            .saturating_add(st.requested_chunk_bytes())
            .saturating_add(rounded);
        g.vm_peak = g.vm_peak.max(now);
        let peak = g.vm_peak;
        // Each sub-arena with memory in use may hold a partly used page past the headroom:
        // what a part per thread costs at page granularity (a single arena has that page
        // once), and what keeps a thread whose working set is under a page on its own path.
        let pages = busy.saturating_mul(st.vm_pages_for(1));
        let cap = st.vm_cap(peak).saturating_add(pages);
        let ceiling = st.vm_ceiling(peak).saturating_add(pages);
        let need = st.vm_pages_for(rounded);
        if self.subs.held().saturating_add(need) > cap {
            // Past the headroom, before taking others' chunks or mapping: what the other
            // sub-arenas' streams have finished, queried (with no lock held, no wait). With K
            // sessions on a thread pool, all free memory is tagged with some session's stream
            // (issue 25), and only what is known done can serve another. Only when some stream
            // is waiting: otherwise no second pass.
            let (waiting, holding) = if matches!(waited, Waited::Nothing | Waited::Polled) {
                // This sub-arena's own too (its lock, held here, the walks cannot take).
                let mut w = self.hosted_waiting_somewhere(consumer);
                for f in st.hosted_waiting(consumer) {
                    if !w.iter().any(|g| Arc::ptr_eq(g, &f)) {
                        w.push(f);
                    }
                }
                (
                    w,
                    self.hosted_holding_back_while_others_idle(me, rounded, consumer),
                )
            } else {
                (Vec::new(), Vec::new())
            };
            if st.untag_done(consumer) {
                // Free memory whose streams are done, in one piece again: search again.
                return Ok(Mapped::Again(waited));
            }
            if !waiting.is_empty() {
                let bulky = if self.subs.held().saturating_add(need) > ceiling {
                    // Free memory a paused thread may come back to is left it only up to all
                    // that churn may add (with a partly used page per busy sub-arena), in
                    // total: the sub-arenas with the most free memory are covered first.
                    let mut free = free_there;
                    free.push((me, st.vm_free_mapped()));
                    free.sort_unstable_by_key(|&(_, f)| std::cmp::Reverse(f));
                    let allowed = ceiling.saturating_sub(peak);
                    let mut left: u64 = free.iter().map(|&(_, f)| f).sum();
                    let mut there = Vec::new();
                    for &(t, f) in &free {
                        if left <= allowed {
                            break;
                        }
                        left -= f;
                        there.push(t);
                    }
                    let mine = there.contains(&me);
                    there.retain(|&t| t != me);
                    let mut bulky = self.hosted_waiting_in(&there, consumer);
                    if mine {
                        bulky.extend(st.hosted_waiting(consumer));
                    }
                    bulky
                } else {
                    Vec::new()
                };
                drop(st);
                drop(global);
                for f in waiting {
                    if holding.iter().any(|h| Arc::ptr_eq(h, &f)) {
                        // Every other thread idle, and this stream's frees hold back a chunk
                        // that fits: covered with an event too (unless the host may destroy
                        // the stream). A pool's thread on a stream of its own frees its turn's
                        // memory and sleeps, and nothing else covers those frees before its
                        // next turn (four threads taking turns held 4.08x the live set, each
                        // mapping pages beside the others' free ones). A full queue's newest
                        // event is recorded again, later, and what it covers with it.
                        f.advance();
                    } else {
                        // A query, and a record only for a stream that stopped freeing: its
                        // frees hold back nothing that fits alone, but once done they merge
                        // with what is free beside them. Not for a live thread's latest
                        // stream (it may only be paused), unless past the ceiling and among
                        // the sub-arenas above (`bulky`): K sessions on K long-lived threads
                        // whose peaks take turns held the sum of their peaks (3.39x the live
                        // peak at K = 4), each peak's frees never covered while its thread
                        // lived on; covering every such stream past the ceiling passed
                        // paused threads' memory back and forth (eight threads on two cores,
                        // mixed: 0.94x one thread against 1.55x).
                        f.advance_if_stalled(bulky.iter().any(|b| Arc::ptr_eq(b, &f)));
                    }
                }
                return Ok(Mapped::Again(Waited::PolledEverywhere));
            }
            drop(st);
            let reach = if self.subs.held().saturating_add(need) > ceiling {
                Reach::PastCeiling
            } else {
                Reach::Idle
            };
            if let Some(addr) = self.steal(me, &idle, reach, rounded, size, stream, &mut global) {
                return Ok(Mapped::Taken(addr));
            }
            if !matches!(waited, Waited::Settled | Waited::Finished)
                && self.untag_idle_after_wait(vm, me, &idle, rounded, consumer)
            {
                // Free memory of idle threads' streams, done after the wait: search again.
                return Ok(Mapped::Again(Waited::Settled));
            }
            // Threads busy at once keep their own memory (taking each other's chunks, they
            // would pass them back and forth on every allocation): free pages elsewhere are
            // unmapped only past the ceiling a single arena's churn may reach.
            let mut over = self
                .subs
                .held()
                .saturating_add(need)
                .saturating_sub(ceiling);
            // Those unmaps wait for the device where their pages' work is unknown: never while
            // a host stream of any sub-arena, this one's too, has work pending (it may wait on
            // this caller), as a sub-arena's own headroom knows of its own streams.
            let device_wait = over > 0 && !self.host_work_pending(None, true);
            for other in self.others(me) {
                if over == 0 {
                    break;
                }
                // A sub-arena whose thread holds its lock off its core is passed over, as
                // in `steal`.
                let Some(mut o) = other.lock_unless_stalled() else {
                    continue;
                };
                let before = o.held();
                over = over.saturating_sub(o.vm_unmap_for_another(vm, over, consumer, device_wait));
                self.subs.follow_budget(before, o.held());
            }
            if waited != Waited::Settled
                && waited != Waited::Finished
                && self.subs.held().saturating_add(need) > cap
            {
                // Still past the ceiling with nothing to take or unmap: the free memory is
                // held back by other streams' work. When those are all streams the host may
                // destroy (ONNX Runtime's sessions), their last frees no event can cover until
                // their next run, which takes the memory back: K sessions would hold their
                // own peaks each. One wait for the device settles them all; a host stream
                // that may be held at a gate (any other) is never waited for this way.
                let waiting = self.hosted_waiting_somewhere(consumer);
                if !waiting.is_empty() && waiting.iter().all(|f| f.host_may_destroy()) {
                    drop(global);
                    // Each sub-arena's unknown work (memory of no stream) is settled too,
                    // unless more came since: its free pages then unmap without a wait.
                    let seen: Vec<(usize, u64)> = self
                        .subs
                        .used()
                        .filter_map(|t| self.subs.get(t).map(|s| (t, s.lock().unknown_events())))
                        .collect();
                    if settle_on_device(&waiting) {
                        for (t, n) in seen {
                            if let Some(s) = self.subs.get(t) {
                                s.lock().device_waited(n);
                            }
                        }
                    }
                    return Ok(Mapped::Again(Waited::Settled));
                }
            }
            st = sub.lock();
            st.check_live()?;
        }
        // Threads busy at once map within the arena-wide ceiling rather than each within its
        // own headroom: unmapping its own free pages to map others, each thread would call the
        // driver on every pass, and driver calls from threads at once wait for each other
        // (mixed ÷ 16 on 16 threads, one H200: 4.4 Mops/s so, 48 without unmapping).
        let floor = if busy > 1 {
            ceiling.saturating_sub(self.subs.held().saturating_sub(st.held()))
        } else {
            0
        };
        if !exact && self.config.max_mem == u64::MAX {
            // No budget to keep exact: the driver calls run under this sub-arena's lock only,
            // so threads mapping pages at once do not wait for each other.
            drop(global);
            let id = match self.map_in(vm, me, &mut st, rounded, size, stream, floor) {
                Ok(id) => id,
                // Decision 7 across sub-arenas and waiting for other streams need the global
                // lock: again, with it held throughout.
                Err(ArenaError::OutOfMemory { .. }) => return Ok(Mapped::Exact(waited)),
                Err(e) => return Err(e),
            };
            let mut none = None;
            return Ok(
                match self.take_locked(&mut st, &mut none, me, id, rounded, size, stream) {
                    Some(addr) => Mapped::Taken(addr),
                    // The quota needs the global lock: the chunk waits, free, for the next try.
                    None => Mapped::Again(waited),
                },
            );
        }
        let mut grown = self.map_in(vm, me, &mut st, rounded, size, stream, floor);
        if matches!(grown, Err(ArenaError::OutOfMemory { .. })) {
            // Decision 7 across sub-arenas: the others' wholly free pages go back (the
            // global lock's holder may lock any number of sub-arenas), then once more.
            let mut released = 0;
            for other in self.others(me) {
                let mut o = other.lock();
                let before = o.held();
                released += o.vm_release_all_free(vm).0;
                self.subs.follow_budget(before, o.held());
                self.sync_directory(&mut o);
            }
            if released > 0 {
                grown = self.map_in(vm, me, &mut st, rounded, size, stream, floor);
            }
        }
        let id = match grown {
            Ok(id) => id,
            Err(e @ ArenaError::OutOfMemory { .. }) => {
                drop(st);
                // Free memory this stream may take in another thread's busy part (of no
                // stream, in pages that part still uses, which decision 7 cannot unmap) is
                // taken rather than failing, as one arena would (an owner holding half of
                // the only page the budget allows left the other thread out of memory).
                if let Some(addr) = self.steal(
                    me,
                    &[],
                    Reach::Exhausted,
                    rounded,
                    size,
                    stream,
                    &mut global,
                ) {
                    return Ok(Mapped::Taken(addr));
                }
                if waited == Waited::Finished {
                    return Err(e);
                }
                drop(global);
                let others = self.hosted_waiting_anywhere(consumer);
                if others.is_empty() {
                    return Err(e);
                }
                for f in &others {
                    f.finish();
                }
                return Ok(Mapped::Again(Waited::Finished));
            }
            Err(e) => return Err(e),
        };
        Ok(self
            .take_locked(&mut st, &mut global, me, id, rounded, size, stream)
            .map_or(Mapped::Again(waited), Mapped::Taken))
    }

    /// Hands out free chunk `id` of sub-arena `me` (`st`, locked), rebalancing the quota if
    /// it must (with the global lock in `global`, or taken without waiting). `None`: the quota
    /// needs the global lock, which another thread holds; nothing changed.
    #[allow(clippy::too_many_arguments)]
    fn take_locked<'a>(
        &'a self,
        st: &mut State<S>,
        global: &mut Option<MutexGuard<'a, Global>>,
        me: usize,
        id: u32,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
    ) -> Option<u64> {
        let consumer = stream.map_or(0, Stream::id);
        let chunk_size = st.chunks.get(id).size;
        let split = st.splits(chunk_size, rounded, self.split_waste);
        let charge = if split { rounded } else { chunk_size };
        let Admit::Fits(frozen) = self.subs.admit(global, me, st, charge) else {
            return None;
        };
        let sync_id = stream.map_or(0, Stream::sync_id);
        let addr = st.take(id, rounded, size, consumer, sync_id, split);
        drop(frozen);
        if let Some(stream) = stream {
            self.tag_with(st, stream);
        }
        Some(addr)
    }

    /// Maps pages in `st` (sub-arena `me`, locked, with the global lock held) for `rounded`
    /// bytes and returns the free chunk of exactly those bytes; the budget and the directory
    /// follow.
    #[allow(clippy::too_many_arguments)]
    fn map_in(
        &self,
        vm: &dyn VirtualMemory,
        me: usize,
        st: &mut State<S>,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
        cap_floor: u64,
    ) -> Result<u32> {
        debug_assert_eq!(st.index() as usize, me);
        let consumer = stream.map_or(0, Stream::id);
        let before = st.held();
        let region_id = || self.subs.next_region_id();
        // This sub-arena's lock is held: the others are asked without waiting for theirs.
        let host_work_elsewhere = || self.host_work_pending(Some(me), false);
        let elsewhere = Elsewhere {
            config: &self.config,
            held: self.subs.held().saturating_sub(before),
            region_id: &region_id,
            cap_floor,
            host_work_elsewhere: &host_work_elsewhere,
        };
        // The sub-arena's lock before the stream's clock (the lock order).
        let clock = stream.map(Stream::clock);
        let grown = st.vm_grow_and_find(vm, &elsewhere, rounded, size, consumer, clock.as_deref());
        drop(clock);
        self.subs.follow_budget(before, st.held());
        self.sync_directory(st);
        grown
    }

    /// The sub-arenas other than `me` that were ever used.
    fn others(&self, me: usize) -> impl Iterator<Item = &crate::arena::lock::ArenaLock<State<S>>> {
        self.others_indexed(me).map(|(_, s)| s)
    }

    /// As [`Arena::others`], with their indices.
    fn others_indexed(
        &self,
        me: usize,
    ) -> impl Iterator<Item = (usize, &crate::arena::lock::ArenaLock<State<S>>)> {
        self.subs
            .used()
            .filter(move |&t| t != me)
            .filter_map(|t| self.subs.get(t).map(|s| (t, s)))
    }

    /// A free mapped chunk of another sub-arena for `stream`, under the global lock: of an
    /// idle one (`idle`: nothing in use there when looked at), any chunk the stream may take;
    /// of a busy one, only a chunk of the stream itself (a backward pass on another thread than
    /// its forward pass, on one stream). Chunks of a busy thread's part that merely may be
    /// taken stay its own: taken, they would come back there on every free, and the thread
    /// that took them would miss and take again on every allocation), unless `reach` says the
    /// arena is past the ceiling or out of memory: then any chunk the stream may take,
    /// anywhere ([`Reach`]). A sub-arena whose lock
    /// stays held through a spin is passed over
    /// ([`crate::arena::lock::ArenaLock::lock_unless_stalled`]): its thread is mapping pages or
    /// off its core, and a miss that finds nothing maps pages instead.
    #[allow(clippy::too_many_arguments)]
    fn steal<'a>(
        &'a self,
        me: usize,
        idle: &[usize],
        reach: Reach,
        rounded: u64,
        size: u64,
        stream: Option<&Stream>,
        global: &mut Option<MutexGuard<'a, Global>>,
    ) -> Option<u64> {
        let consumer = stream.map_or(0, Stream::id);
        // The sub-arena that holds the most first, the others by index: the pool's threads then
        // cut one sub-arena's memory as one arena would. Taken in index order, where the
        // thread that mapped the memory may come last, each turn cut the few pieces of the
        // last thread's part first and mapped what no piece fitted (16 pool threads in
        // descending order of their numbers: 1.72x the live set against 1.07); taken by most
        // free, the source changed mid-turn (1.30x).
        let mut order: Vec<(u64, usize)> = self
            .others_indexed(me)
            .filter_map(|(t, sub)| sub.lock_unless_stalled().map(|st| (st.held(), t)))
            .collect();
        order.sort_unstable_by_key(|&(free, t)| (std::cmp::Reverse(free), t));
        for (_, t) in order {
            let Some(sub) = self.subs.get(t) else {
                continue;
            };
            let Some(mut st) = sub.lock_unless_stalled() else {
                continue;
            };
            let from_idle = idle.contains(&t);
            // Past the ceiling, a busy sub-arena's free chunks serve too (K sessions on a pool
            // of threads: each thread's part would otherwise keep the largest request it ever
            // ran, and the arena hold that once per thread). Not for a logical stream of
            // cuda-arena's own (no events): freed, a chunk it took from a busy part would be
            // its own there until a reset, which that part's thread, busy, could not reuse
            // (eight threads on such streams, never reset, each left the others' parts full of
            // such chunks, and every allocation went the slow way to take one back: 2.7 Mops/s
            // against 12-22 on `mixed` ÷ 16). Its own chunks there it takes back; else pages move.
            // An idle part's memory serves as before (K sessions that reset their streams at
            // each run's end, ORT's region-arena rule, take turns on a pool's threads so).
            let logical = reach != Reach::Exhausted
                && stream.is_some_and(|s| !s.is_host_owned() && s.free_events().is_none());
            let id = if logical && consumer != 0 && !from_idle {
                st.find_of_stream(rounded, consumer)
            } else if from_idle || reach != Reach::Idle {
                st.find(rounded, consumer, stream)
            } else if consumer != 0 {
                st.find_of_stream(rounded, consumer)
                    .or_else(|| st.find_left_by_destroyable(rounded, consumer))
            } else {
                None
            };
            let Some(id) = id else { continue };
            // The global lock is held: the quota is rebalanced at once if it must be.
            let Some(addr) = self.take_locked(&mut st, global, t, id, rounded, size, stream) else {
                continue;
            };
            if from_idle {
                // Still idle for the next thread that misses: its own thread uses none of it.
                st.mark_foreign(id);
            }
            return Some(addr);
        }
        None
    }

    /// Past the headroom, with nothing in an idle sub-arena this stream may take: where one
    /// holds a free chunk of `rounded` bytes that another stream without events left, the device is waited for once and every idle sub-arena's free chunks of such
    /// streams go back to no stream ([`State::untag_after_wait`]). An unmap for the headroom
    /// would wait for the device all the same, and then map pages again: two threads on
    /// streams of their own taking turns on one working set unmapped and mapped it on every
    /// turn (341 unmaps and 578 mappings in 12 turns, holding 1.28x the live set). Never past
    /// a host stream's pending work (it may wait on this caller). Returns whether any chunk
    /// was untagged.
    fn untag_idle_after_wait(
        &self,
        vm: &dyn VirtualMemory,
        me: usize,
        idle: &[usize],
        rounded: u64,
        consumer: StreamId,
    ) -> bool {
        let holding = |t: usize| {
            self.subs
                .get(t)
                .and_then(|s| s.lock_unless_stalled())
                .filter(|o| o.holds_stranded(rounded, consumer))
        };
        let candidates: Vec<usize> = idle
            .iter()
            .copied()
            .filter(|&t| t != me && holding(t).is_some())
            .collect();
        // Only then the host streams of every part (each part's lock in turn).
        if candidates.is_empty() || !self.hosted_waiting_anywhere(consumer).is_empty() {
            return false;
        }
        // Held through the wait: a chunk freed there meanwhile would not be covered by it.
        let mut parts: Vec<_> = candidates.into_iter().filter_map(holding).collect();
        if parts.is_empty() || vm.synchronize().is_err() {
            return false;
        }
        parts
            .iter_mut()
            .fold(false, |touched, o| o.untag_after_wait() | touched)
    }

    /// After a free into `st` (virtual-memory mode): past `arena.vm_unmap_threshold_bytes`,
    /// wholly free pages are unmapped and the budget follows.
    #[inline(always)]
    pub(in crate::arena::bfc) fn after_free(&self, st: &mut State<S>) {
        if let (Some(vm), Some(free)) = (&self.vm, st.vm_free_past_trigger()) {
            let before = st.held();
            st.vm_trim(&**vm, free);
            self.subs.follow_budget(before, st.held());
        }
    }

    /// Tells the directory of the ranges `st` reserved or gave back, so that frees from other
    /// threads and copies find their owner.
    pub(in crate::arena::bfc) fn sync_directory(&self, st: &mut State<S>) {
        for (base, size, reserved) in st.take_range_changes() {
            if reserved {
                self.subs.directory.insert(base, size, st.index());
            } else {
                self.subs.directory.remove(base);
            }
        }
    }

    /// Every sub-arena's wholly free pages unmapped and idle ranges given back (shrink and
    /// decision 7). Returns how many runs went back and the first error.
    pub(in crate::arena::bfc) fn vm_release_everywhere(
        &self,
        vm: &dyn VirtualMemory,
    ) -> (usize, Option<ArenaError>) {
        let (mut released, mut first_err) = (0, None);
        for t in self.subs.used().collect::<Vec<_>>() {
            let Some(sub) = self.subs.get(t) else {
                continue;
            };
            let mut st = sub.lock();
            if st.check_live().is_err() {
                continue;
            }
            let before = st.held();
            let (n, err) = st.vm_release_all_free(vm);
            self.subs.follow_budget(before, st.held());
            self.sync_directory(&mut st);
            released += n;
            if let Some(e) = err {
                first_err.get_or_insert(e);
            }
        }
        (released, first_err)
    }

    /// A reserve in virtual-memory mode: from the raw allocator under this thread's
    /// sub-arena's lock (and the global lock), so that mapping pages and reserves share one
    /// budget exactly; out of memory, every sub-arena's wholly free pages are unmapped and it
    /// is tried once more (decision 7).
    pub(in crate::arena::bfc) fn reserve_vm(
        &self,
        vm: &dyn VirtualMemory,
        size: u64,
    ) -> Result<Option<u64>> {
        let me = self.me();
        let sub = self.subs.get_or_make(me);
        let mut global = Some(self.subs.global());
        sub.lock().check_live()?;
        let addr = match self.raw_reserve(size) {
            Err(e @ ArenaError::OutOfMemory { .. }) => {
                if self.vm_release_everywhere(vm).0 == 0 {
                    return Err(e);
                }
                sub.lock().reset_growth(&self.config);
                self.raw_reserve(size)?
            }
            other => other?,
        };
        let mut st = sub.lock();
        let frozen = match self.subs.admit(&mut global, me, &mut st, size) {
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
        self.subs.directory.insert(addr, size, me as u32);
        Ok(Some(addr))
    }
}
