//! The host streams with events that tag chunks of one sub-arena (`stream_events.rs`), each with
//! how many of its chunks are in use there. A free chunk tagged with one carries, as its sync
//! id, the mark its last free took on that stream; the count lets a stream the host never
//! resets be forgotten once it holds nothing and its frees are done (`foreign_streams.rs`),
//! so a host that makes a stream per request hits no bound.
//!
//! Kept sorted by stream id: the common path looks a stream up by binary search.

use crate::streams::stream::StreamId;
use crate::streams::stream_events::FreeEvents;
use std::sync::Arc;

/// One host stream with events and its chunks in use in this sub-arena.
#[derive(Debug, Clone)]
struct HostedStream {
    id: StreamId,
    events: Arc<FreeEvents>,
    in_use: u64,
    /// Released while its chunks still needed its tag (see [`HostedStreams::release`]).
    orphan: bool,
}

/// What releasing a stream leaves of its entry.
pub(crate) enum Release {
    /// The entry is gone (with its events, if it had one): untag the stream's chunks.
    Gone(Option<Arc<FreeEvents>>),
    /// Kept: the stream was forgotten as done, but a call took it since; its chunks keep the
    /// tag until they are free and their frees done, then [`HostedStreams::reapable`] lists it.
    Kept,
}

/// The host streams with events that tag chunks of one sub-arena; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct HostedStreams(Vec<HostedStream>);

/// Host streams carried with a region that moves to another sub-arena (none of its chunks is
/// in use, so they carry no count), each with whether it is an orphan (released).
pub(crate) type Carried = Vec<(StreamId, Arc<FreeEvents>, bool)>;

impl HostedStreams {
    #[inline(always)]
    fn find(&self, id: StreamId) -> Result<usize, usize> {
        self.0.binary_search_by_key(&id, |e| e.id)
    }

    /// Whether no host stream tags a chunk here.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The events of host stream `id`, if it tags chunks here.
    #[inline(always)]
    pub(crate) fn events(&self, id: StreamId) -> Option<&Arc<FreeEvents>> {
        self.find(id).ok().map(|i| &self.0[i].events)
    }

    /// Whether a host stream here has work recorded that its events do not yet say is done
    /// (as last queried): waiting for the device would wait for it too.
    pub(crate) fn any_incomplete(&self) -> bool {
        self.0.iter().any(|e| e.events.has_incomplete())
    }

    /// How far the host streams here other than `consumer` are known complete, summed: it
    /// grows whenever some chunk of theirs may have come free for `consumer`; `None` when
    /// there is no other.
    pub(crate) fn others_progress(&self, consumer: StreamId) -> Option<u64> {
        let mut others = self.0.iter().filter(|e| e.id != consumer).peekable();
        others.peek()?;
        Some(others.fold(0u64, |sum, e| sum.wrapping_add(e.events.completed())))
    }

    /// Whether `id` is a host stream with events that tags chunks here.
    #[inline(always)]
    pub(crate) fn contains(&self, id: StreamId) -> bool {
        self.find(id).is_ok()
    }

    /// Host stream `id` (with `events`) took a chunk here.
    #[inline(always)]
    pub(crate) fn took(&mut self, id: StreamId, events: &Arc<FreeEvents>) {
        match self.find(id) {
            Ok(i) => self.0[i].in_use += 1,
            Err(i) => self.0.insert(
                i,
                HostedStream {
                    id,
                    events: events.clone(),
                    in_use: 1,
                    orphan: false,
                },
            ),
        }
    }

    /// A chunk tagged with `id` was taken with no stream: it counts as `id`'s in use, if `id`
    /// is a host stream with events.
    #[inline]
    pub(crate) fn counts_in_use(&mut self, id: StreamId) {
        if let Ok(i) = self.find(id) {
            self.0[i].in_use += 1;
        }
    }

    /// A chunk tagged with `id`, in use here, is being freed: the mark its free takes on the
    /// stream, if `id` is a host stream with events.
    #[inline(always)]
    pub(crate) fn freed(&mut self, id: StreamId) -> Option<u64> {
        let i = self.find(id).ok()?;
        let e = &mut self.0[i];
        e.in_use = e.in_use.saturating_sub(1);
        Some(e.events.mark())
    }

    /// Whether chunks tagged with `id` are in use here.
    pub(crate) fn holds(&self, id: StreamId) -> bool {
        self.find(id).is_ok_and(|i| self.0[i].in_use > 0)
    }

    /// Each stream with the chunks it counts in use here, for the arena's checks.
    pub(crate) fn in_use_counts(&self) -> impl Iterator<Item = (StreamId, u64)> + '_ {
        self.0.iter().map(|e| (e.id, e.in_use))
    }

    /// The events of the host streams other than `consumer` whose frees are not all known
    /// complete.
    pub(crate) fn waiting(&self, consumer: StreamId) -> Vec<Arc<FreeEvents>> {
        self.0
            .iter()
            .filter(|e| e.id != consumer && e.events.has_incomplete())
            .map(|e| e.events.clone())
            .collect()
    }

    /// Stream `id` is reset: its entry goes, with its events, for the caller to drop once the
    /// lock is released.
    pub(crate) fn remove(&mut self, id: StreamId) -> Option<Arc<FreeEvents>> {
        self.find(id).ok().map(|i| self.0.remove(i).events)
    }

    /// Stream `id` was released (its last handle dropped). A stream its set forgot as done
    /// normally holds nothing here and its frees are done; if a call took it in between (the
    /// set checks for that, but a lookup may race the check), its entry stays, as an orphan,
    /// so that its chunks keep their marks.
    pub(crate) fn release(&mut self, id: StreamId) -> Release {
        let Ok(i) = self.find(id) else {
            return Release::Gone(None);
        };
        let e = &mut self.0[i];
        if e.events.was_forgotten() && (e.in_use > 0 || e.events.has_incomplete()) {
            e.orphan = true;
            return Release::Kept;
        }
        Release::Gone(Some(self.0.remove(i).events))
    }

    /// Orphans whose chunks are all free and whose frees are done: their tags can go.
    pub(crate) fn reapable(&self) -> Vec<StreamId> {
        self.0
            .iter()
            .filter(|e| e.orphan && e.in_use == 0 && !e.events.has_incomplete())
            .map(|e| e.id)
            .collect()
    }

    /// Whether an orphan is here.
    #[inline]
    pub(crate) fn has_orphans(&self) -> bool {
        self.0.iter().any(|e| e.orphan)
    }

    /// Every entry's events, the list emptied (the arena is retired).
    pub(crate) fn take_all(&mut self) -> Vec<Arc<FreeEvents>> {
        std::mem::take(&mut self.0)
            .into_iter()
            .map(|e| e.events)
            .collect()
    }

    /// The entries of the streams `tags` says a moving region's chunks are tagged with.
    pub(crate) fn carried(&self, tags: impl Fn(StreamId) -> bool) -> Carried {
        self.0
            .iter()
            .filter(|e| tags(e.id))
            .map(|e| (e.id, e.events.clone(), e.orphan))
            .collect()
    }

    /// Takes in the entries a region moving here carries.
    pub(crate) fn adopt(&mut self, carried: &Carried) {
        for (id, events, orphan) in carried {
            match self.find(*id) {
                // A released stream stays one here: its chunks lose their tag once done.
                Ok(i) => self.0[i].orphan |= *orphan,
                Err(i) => self.0.insert(
                    i,
                    HostedStream {
                        id: *id,
                        events: events.clone(),
                        in_use: 0,
                        orphan: *orphan,
                    },
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::stream_events::SimEvents;

    fn events() -> Arc<FreeEvents> {
        Arc::new(FreeEvents::new(SimEvents::new(), 7))
    }

    #[test]
    fn a_stream_holds_memory_while_a_chunk_it_took_is_not_freed() {
        let mut h = HostedStreams::default();
        let e = events();
        h.took(3, &e);
        h.took(3, &e);
        assert!(h.holds(3));
        assert_eq!(h.freed(3), Some(1));
        assert!(h.holds(3));
        assert_eq!(h.freed(3), Some(2));
        assert!(!h.holds(3));
        assert!(h.contains(3), "its free chunks still carry its marks");
    }

    #[test]
    fn entries_carried_with_a_region_hold_nothing_in_their_new_home() {
        let (mut from, mut to) = (HostedStreams::default(), HostedStreams::default());
        let e = events();
        from.took(5, &e);
        from.took(9, &events());
        let carried = from.carried(|id| id == 5);
        to.adopt(&carried);
        assert!(to.contains(5) && !to.contains(9));
        assert!(!to.holds(5));
        assert!(from.holds(5), "the chunk in use stays where it was taken");
    }

    #[test]
    fn a_released_streams_entry_carried_with_a_region_stays_an_orphan_there() {
        let (mut from, mut to) = (HostedStreams::default(), HostedStreams::default());
        let e = events();
        from.took(5, &e);
        e.set_forgotten();
        assert!(
            matches!(from.release(5), Release::Kept),
            "a chunk is in use"
        );
        to.adopt(&from.carried(|id| id == 5));
        assert_eq!(
            to.reapable(),
            vec![5],
            "nothing of it in use there, its frees done"
        );
        assert!(
            from.reapable().is_empty(),
            "its chunk is in use where it was taken"
        );
    }

    #[test]
    fn a_free_of_a_stream_not_here_takes_no_mark() {
        let mut h = HostedStreams::default();
        assert_eq!(h.freed(4), None);
        h.took(4, &events());
        assert_eq!(h.remove(4).map(|_| ()), Some(()));
        assert_eq!(h.freed(4), None);
        assert!(h.is_empty());
    }
}
