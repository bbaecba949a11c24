//! Memory moving between sub-arenas (issue 25): before a sub-arena grows, it takes back the
//! regions it lent that are wholly free where they are, then a wholly free region of a
//! sub-arena with nothing in use; and, on the way to out of memory, a chunk of another
//! sub-arena. Both sides of a move are here: the arena's search under the global lock and
//! the sub-arena's detaching and adopting of one region with its host streams.

use super::*;

impl<R: RawAllocator, S: Source> Core<R, S> {
    /// Memory of other sub-arenas before new memory (issue 25), under the global lock (so the
    /// stats never see a region in neither sub-arena or in both; the directory names the new
    /// holder before its lock is let go, so a free of a chunk cut from it finds it). First the
    /// regions `me` grew that another sub-arena holds and has wholly free now, whatever that
    /// one is doing: a thread gets its own memory back. Then a wholly free region of at least
    /// `rounded` bytes of a sub-arena with nothing in use: an idle thread's memory serves the
    /// others (a pool's threads taking turns hold the working set once, not once each).
    /// Whether a region moved.
    #[cold]
    #[inline(never)]
    pub(super) fn adopt_regions(
        &self,
        me: usize,
        rounded: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
    ) -> bool {
        let Some(mine) = self.subs.get(me) else {
            return false;
        };
        let _global = self.subs.global();
        let mut moved = false;
        let lent = std::mem::take(&mut mine.lock().lent);
        let mut still_lent = Vec::new();
        // A bounded look, as for idle sub-arenas below; the rest waits for the next miss.
        let mut lent = lent.into_iter();
        for base in lent.by_ref().take(ADOPTION_CANDIDATES) {
            let holder = match self.subs.directory.owner_and_home(base) {
                Some((holder, home)) if home as usize == me && holder as usize != me => holder,
                // Gone back to the raw allocator, or home again: nothing to take back.
                _ => continue,
            };
            let Some(sub) = self.subs.get(holder as usize) else {
                continue;
            };
            // Bound first: a guard in the scrutinee would live through the arms.
            // The sub-arena's lock before the stream's clock (the lock order).
            let detached = {
                let mut st = sub.lock();
                let clock = stream.map(Stream::clock);
                st.detach_free_region_at(base, rounded, consumer, clock.as_deref())
            };
            match detached {
                Some(taken) => {
                    self.move_region(me, mine, taken);
                    moved = true;
                }
                None => still_lent.push(base),
            }
        }
        // Those not looked at first next time.
        let mut rest: Vec<u64> = lent.collect();
        rest.extend(still_lent);
        mine.lock().lent.extend(rest);
        if moved {
            return true;
        }
        for t in self.subs.used().filter(|&t| t != me) {
            let Some(sub) = self.subs.get(t) else {
                continue;
            };
            let detached = {
                let mut st = sub.lock();
                let clock = stream.map(Stream::clock);
                st.detach_free_region(rounded, consumer, clock.as_deref())
            };
            if let Some(taken) = detached {
                self.move_region(me, mine, taken);
                return true;
            }
        }
        false
    }

    /// Puts a region taken out of another sub-arena into sub-arena `me` (`mine`), and says so
    /// in the directory and, if the region is not `me`'s own, in its home's lent list. The
    /// caller holds the global lock.
    pub(super) fn move_region(
        &self,
        me: usize,
        mine: &crate::arena::lock::ArenaLock<State<S>>,
        taken: (Detached, Carried),
    ) {
        let (region, hosted) = taken;
        let base = region.base();
        let mut st = mine.lock();
        st.adopt_region(region, hosted);
        let home = self.subs.directory.move_to(base, me as u32);
        drop(st);
        if let Some(home) = home.filter(|&h| h as usize != me) {
            if let Some(h) = self.subs.get(home as usize) {
                let mut h = h.lock();
                if !h.lent.contains(&base) {
                    h.lent.push(base);
                }
            }
        }
    }

    /// A chunk `consumer` may take from a sub-arena other than `me`, if any has one that fits.
    pub(super) fn take_from_others(
        &self,
        me: usize,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        stream: Option<&Stream>,
    ) -> Option<u64> {
        let mut global = None;
        for t in self.subs.used().filter(|&t| t != me) {
            loop {
                match self.try_take(t, rounded, size, consumer, stream, &mut global) {
                    Attempt::Taken(addr) => return Some(addr),
                    Attempt::Again => continue,
                    Attempt::NoFit => break,
                }
            }
            global = None;
        }
        None
    }

    /// As [`Arena::hosted_waiting_anywhere`], from the sub-arenas whose lock is free now (one
    /// in a driver call keeps its own, and the caller's own, which it holds, is skipped): for a
    /// poll that must not wait.
    pub(super) fn hosted_waiting_somewhere(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        self.hosted_waiting_in_subs(consumer, false)
    }

    /// The events of host streams other than `consumer`, in any sub-arena, whose frees are not
    /// all known complete (each stream once).
    pub(super) fn hosted_waiting_anywhere(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        self.hosted_waiting_in_subs(consumer, true)
    }

    /// The host streams other than `consumer` with frees not all known complete in the
    /// sub-arenas `subs` (each stream once; a sub-arena whose lock is taken now is passed over).
    pub(super) fn hosted_waiting_in(
        &self,
        subs: &[usize],
        consumer: StreamId,
    ) -> Vec<Arc<FreeEvents>> {
        let mut all: Vec<Arc<FreeEvents>> = Vec::new();
        for &t in subs {
            let Some(st) = self.subs.get(t).and_then(|sub| sub.try_lock()) else {
                continue;
            };
            for f in st.hosted_waiting(consumer) {
                if !all.iter().any(|g| Arc::ptr_eq(g, &f)) {
                    all.push(f);
                }
            }
        }
        all
    }

    /// As [`State::hosted_holding_back`], from the other sub-arenas (`me`'s own is skipped)
    /// when every one of them is idle (nothing in use, its lock free now): the streams whose
    /// incomplete frees hold back a free chunk that would serve `rounded` bytes there. Empty
    /// while another thread is busy: threads busy at once keep their own memory (covered, their
    /// frees would pass chunks back and forth between them: eight threads on two cores fell to
    /// 0.05-0.59x one thread's aggregate in some runs of the Rust thread benchmark).
    pub(super) fn hosted_holding_back_while_others_idle(
        &self,
        me: usize,
        rounded: u64,
        consumer: StreamId,
    ) -> Vec<Arc<FreeEvents>> {
        let mut all: Vec<Arc<FreeEvents>> = Vec::new();
        for t in self.subs.used().filter(|&t| t != me).collect::<Vec<_>>() {
            let Some(st) = self.subs.get(t).and_then(|sub| sub.try_lock()) else {
                return Vec::new();
            };
            if !st.vm_idle() {
                return Vec::new();
            }
            for f in st.hosted_holding_back(rounded, consumer) {
                if !all.iter().any(|g| Arc::ptr_eq(g, &f)) {
                    all.push(f);
                }
            }
        }
        all
    }

    /// Whether a host stream tagging chunks in a sub-arena other than `except` has work its
    /// events do not yet say is done (as last queried): a wait for the device would wait for
    /// it too, and it may wait on the caller. With `wait` false, a sub-arena another thread
    /// holds is passed over (the caller holds its own lock): best effort, as the walks above.
    pub(super) fn host_work_pending(&self, except: Option<usize>, wait: bool) -> bool {
        let parts: Vec<usize> = self.subs.used().filter(|&t| Some(t) != except).collect();
        parts.into_iter().any(|t| {
            self.subs
                .get(t)
                .and_then(|sub| {
                    if wait {
                        Some(sub.lock())
                    } else {
                        sub.try_lock()
                    }
                })
                .is_some_and(|st| st.hosted.any_incomplete())
        })
    }

    fn hosted_waiting_in_subs(&self, consumer: StreamId, wait: bool) -> Vec<Arc<FreeEvents>> {
        let mut all: Vec<Arc<FreeEvents>> = Vec::new();
        for t in self.subs.used().collect::<Vec<_>>() {
            let Some(sub) = self.subs.get(t) else {
                continue;
            };
            let st = if wait {
                Some(sub.lock())
            } else {
                sub.try_lock()
            };
            let Some(st) = st else {
                continue;
            };
            for f in st.hosted_waiting(consumer) {
                if !all.iter().any(|g| Arc::ptr_eq(g, &f)) {
                    all.push(f);
                }
            }
        }
        all
    }
}

impl<S: Source> State<S> {
    /// Takes out a region of at least `min_size` bytes for another sub-arena to adopt
    /// ([`State::adopt_region`]), with the host streams its chunks are tagged with, if this
    /// sub-arena holds nothing in use: its thread is between requests (a pool thread after
    /// its turn), so its memory serves the others. A thread with work in flight keeps its
    /// regions: taken from it, they would go back and forth with every miss, and each sub-arena
    /// would grow bigger regions to make up (measured: up to 1.9x the memory with 8 threads each
    /// replaying a trace). Walks the chunks of the regions large enough: only a miss that would
    /// otherwise grow calls it.
    pub(crate) fn detach_free_region(
        &mut self,
        rounded: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> Option<(Detached, Carried)> {
        if self.retired || self.stats.in_use != 0 {
            return None;
        }
        // A bounded look: with `arena.extend_strategy=1` a sub-arena may hold a region per
        // allocation, and a miss must not cost a walk over all of them.
        let slot = self
            .regions
            .iter()
            .filter(|(_, r)| r.size >= rounded)
            .take(ADOPTION_CANDIDATES)
            .find(|(_, r)| self.region_serves(r, rounded, consumer, clock))?
            .0;
        self.detach_for_another(slot)
    }

    /// Takes out the region at `base` (its home takes it back) if no chunk of it is in use
    /// and one of its chunks serves `rounded` bytes on `consumer`.
    pub(crate) fn detach_free_region_at(
        &mut self,
        base: u64,
        rounded: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> Option<(Detached, Carried)> {
        if self.retired {
            return None;
        }
        let slot = self.regions.find(base)?;
        let r = self.regions.get(slot);
        if r.base != base || !self.region_serves(r, rounded, consumer, clock) {
            return None;
        }
        self.detach_for_another(slot)
    }

    /// Whether no chunk of `r` is in use and one of them is `rounded` bytes or more that
    /// stream `consumer` may take, or will once a host stream's events say its work is done
    /// (the adopter polls them, with no lock held, when it misses): a region whose chunks
    /// belong to another stream without events would move for nothing (threads each on a
    /// stream of their own never could use it).
    pub(super) fn region_serves(
        &self,
        r: &Region,
        rounded: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> bool {
        let (mut id, mut serves) = (r.first_chunk, false);
        while id != NIL {
            let c = self.chunks.get(id);
            if c.in_use {
                return false;
            }
            serves |= c.size >= rounded
                && (reusable(c, consumer, &self.hosted, clock) || self.hosted.contains(c.stream));
            id = c.next;
        }
        serves
    }

    /// Takes region `slot` out for another sub-arena, with the host streams its chunks are
    /// tagged with.
    pub(super) fn detach_for_another(&mut self, slot: u32) -> Option<(Detached, Carried)> {
        let d = self.detach_region(slot)?;
        self.stats.num_arena_extensions -= 1;
        let hosted = self
            .hosted
            .carried(|id| d.chunks.iter().any(|c| c.stream == id));
        Some((d, hosted))
    }

    /// Takes in a region another sub-arena let go of ([`State::detach_free_region`]). A
    /// sub-arena's `NumArenaExtensions` is the regions it holds, so the count moves with the
    /// region; summed, it is the arena's.
    pub(crate) fn adopt_region(&mut self, d: Detached, hosted: Carried) {
        self.hosted.adopt(&hosted);
        self.attach_region(d);
        self.stats.num_arena_extensions += 1;
    }
}
