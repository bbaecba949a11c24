//! Streams a host owns (a caller's `CUstream`, ONNX Runtime's `OrtSyncStream`, PyTorch's
//! `cudaStream_t`), known to an allocator only by their handle value. Each handle gets one
//! logical [`Stream`] (so its chunks and marks persist across calls) until the host says it is
//! done with it ([`ForeignStreams::forget`], ORT's `ResetChunksUsingStream` at the end of a
//! run); dropping that stream resets its chunks in every allocator that used it. The number of
//! handles remembered is bounded, so a host that never forgets cannot make the allocator's
//! state, or the cost of its operations, grow without end: past the bound a new handle is
//! refused with a message that says what to do.
//!
//! Issue 13: with the backend's [`StreamEvents`] (the `cuda` backend has them), each stream
//! carries events, so what it frees comes free for other streams once its work up to the free
//! is done, reset or not. And a handle's identity is checked on each use where the backend can
//! tell it (`cuStreamGetId`): a handle the host destroyed without a reset, whose value the
//! driver then gave a new stream, is a new stream here. The old one is let go only once the
//! device has finished all work queued so far (its work included, which may still run after
//! its destroy), so the new stream never takes the old one's chunks early.
//!
//! Issue 25: a host that makes a stream per request and never resets it (a server that calls
//! `cuStreamCreate` per request, sessions ORT releases without a word) is served without end
//! where the backend
//! has events: once [`FORGET_FROM`] handles are remembered, a new one first forgets the
//! streams that hold no memory in any allocator and whose frees are known done (their events
//! are polled, and at the bound the device is synchronized once), as if the host had reset
//! them; the bound then counts only streams that hold memory or whose work may still run. A
//! stream a call is using loses nothing to it: one is forgotten only while the set holds its
//! only counted handle; a call that has it lent from a thread's remembered lookup (which no
//! count shows) ends before the stream is released, and what it allocated stays tagged by the
//! allocators (`FreeEvents::set_forgotten`) until its frees are done.
//! Without events nothing says a stream's work is done, so the bound stays a bound.
//!
//! Issue 15: each thread remembers the last few handles it looked up (weakly: a forgotten stream
//! is still dropped at once), so a thread that allocates on its own stream takes no lock shared
//! with other threads; an epoch, bumped whenever a handle is forgotten or replaced, tells it when
//! what it remembers may be stale. [`ForeignStreams::with_stream_in`] lends such a stream to the
//! call without counting it (`lent_streams.rs`): a forget waits for the loans of what it forgot
//! to be returned before it lets go, so nothing is released under a call.

use crate::streams::lent_streams::{wait_until_returned, Lender};
use crate::streams::stream::{Stream, StreamId, WeakStream};
use crate::streams::stream_events::StreamEvents;
use crate::types::error::{ArenaError, Result};
use parking_lot::Mutex;
use parking_lot::RwLock;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Instance numbers, so a thread's remembered lookups name the set they came from.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Lookups a cache remembers, direct-mapped by set and handle.
const RECENT: usize = 4;

/// One remembered lookup: set `owner`'s `handle` named `stream`, made when the handle had
/// `identity`, as of `epoch`.
#[derive(Debug)]
struct Recent {
    owner: u64,
    handle: u64,
    epoch: u64,
    identity: Option<u64>,
    stream: WeakStream,
}

/// A thread's remembered lookups ([`ForeignStreams::with_stream_in`]) and what it lends. A
/// caller that keeps other per-thread state keeps one of these with it, so one thread-local
/// access serves both (in a shared library each costs a call); [`ForeignStreams::with_stream`]
/// and [`ForeignStreams::get_or_make`] use a thread-local of their own.
pub struct RecentStreams {
    entries: RefCell<[Option<Recent>; RECENT]>,
    lender: Lender,
}

impl std::fmt::Debug for RecentStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentStreams").finish_non_exhaustive()
    }
}

impl RecentStreams {
    /// Remembers nothing yet.
    pub const fn new() -> Self {
        RecentStreams {
            entries: RefCell::new([const { None }; RECENT]),
            lender: Lender::new(),
        }
    }
}

impl Default for RecentStreams {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    static RECENT_LOOKUPS: RecentStreams = const { RecentStreams::new() };
}

/// How many foreign stream handles one allocator remembers at once. Where the backend has
/// events, only streams that hold memory or whose frees may still be running stay remembered
/// past [`FORGET_FROM`]; without events, every handle the host has not reset counts.
pub const MAX_FOREIGN_STREAMS: usize = 4096;

/// Handles remembered at which a new handle first forgets the streams whose work is done and
/// that hold nothing (where the backend has events). After such a pass the next comes at twice
/// the handles left (at least this many), so a pass costs O(1) per new handle.
pub const FORGET_FROM: usize = 1024;

/// Handle value → its stream and the identity the handle had when it was made.
type StreamMap = BTreeMap<u64, (Stream, Option<u64>)>;

/// What a locked look at the map for a handle found or did.
enum Claim {
    /// The handle's stream, already known.
    Known(Stream),
    /// A new stream for the handle, and the one it named before, if the host destroyed that.
    Made {
        stream: Stream,
        replaced: Option<Stream>,
    },
    /// Unknown, and the set is full.
    Full,
}

/// The foreign streams of one allocator; see the module docs.
#[derive(Debug)]
pub struct ForeignStreams {
    /// Handle value → its stream and the identity the handle had when it was made. A
    /// `BTreeMap` rather than a hash map: it is process-wide state in the C library, and tools
    /// like valgrind see its nodes as reachable. Read-locked on the common path (a known
    /// handle), so threads on different streams do not queue.
    map: RwLock<StreamMap>,
    /// The backend's events, given to every stream made here.
    events: Option<Arc<dyn StreamEvents>>,
    /// This set's number (see [`Recent`]).
    id: u64,
    /// Bumped, under the map's write lock, whenever a handle is forgotten or replaced.
    epoch: AtomicU64,
    /// Handles remembered at which the next new one first forgets finished streams.
    forget_at: AtomicUsize,
    /// Held by the one thread forgetting finished streams.
    forgetting: Mutex<()>,
    /// Streams forgotten because their work was done and they held nothing.
    forgotten: AtomicU64,
}

impl Default for ForeignStreams {
    fn default() -> Self {
        Self::with_events(None)
    }
}

impl ForeignStreams {
    /// An empty set whose streams have no events: what they free comes free for other
    /// streams when they are reset.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty set whose streams carry `events` (none: as [`ForeignStreams::new`]).
    pub fn with_events(events: Option<Arc<dyn StreamEvents>>) -> Self {
        ForeignStreams {
            map: RwLock::default(),
            events,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            epoch: AtomicU64::new(0),
            forget_at: AtomicUsize::new(FORGET_FROM),
            forgetting: Mutex::new(()),
            forgotten: AtomicU64::new(0),
        }
    }

    /// The backend's events, if any.
    pub fn events(&self) -> Option<&Arc<dyn StreamEvents>> {
        self.events.as_ref()
    }

    /// The stream for `handle` (non-zero), made on first use.
    pub fn get(&self, handle: u64) -> Result<Stream> {
        self.get_or_make(handle).map(|(s, _)| s)
    }

    /// As [`ForeignStreams::get`], and whether this call made the stream: a caller whose
    /// operation then fails takes it back with [`ForeignStreams::forget_made`], so a failed
    /// call uses up none of the bound.
    pub fn get_or_make(&self, handle: u64) -> Result<(Stream, bool)> {
        match RECENT_LOOKUPS.try_with(|r| self.get_or_make_cached(handle, r)) {
            Ok(r) => r,
            // This thread's locals are being destroyed: no cache.
            Err(_) => self.get_or_make_cached(handle, &RecentStreams::new()),
        }
    }

    /// Runs `f` on the stream for `handle` (non-zero), made on first use; if `f` fails, a
    /// stream this call made is taken back (so a failed call uses up none of the bound).
    pub fn with_stream<T>(&self, handle: u64, f: impl FnOnce(&Stream) -> Result<T>) -> Result<T> {
        let mut call = Some(f);
        let done =
            RECENT_LOOKUPS.try_with(|r| call.take().map(|f| self.with_stream_in(handle, r, f)));
        match (done, call) {
            (Ok(Some(r)), _) => r,
            // This thread's locals are being destroyed: no cache.
            (_, Some(f)) => self.with_stream_in(handle, &RecentStreams::new(), f),
            (_, None) => Err(ArenaError::InvalidArgument {
                reason: "this thread's stream lookups were unreachable".into(),
            }),
        }
    }

    /// As [`ForeignStreams::with_stream`], remembering lookups in `recent`, the calling
    /// thread's own. A stream found there is lent to `f` without taking a count of it (two
    /// atomic read-modify-writes fewer on every allocation on a host stream); `f` must not
    /// forget it.
    #[inline]
    pub fn with_stream_in<T>(
        &self,
        handle: u64,
        recent: &RecentStreams,
        f: impl FnOnce(&Stream) -> Result<T>,
    ) -> Result<T> {
        // The driver is asked outside the lock.
        let identity = self.events.as_ref().and_then(|e| e.stream_identity(handle));
        let same = |known: Option<u64>| identity.is_none() || known.is_none() || known == identity;
        if let Ok(r) = recent.entries.try_borrow() {
            if let Some(e) = r[self.slot(handle)].as_ref() {
                if e.owner == self.id && e.handle == handle && same(e.identity) {
                    // Current if nothing was forgotten or replaced since the lookup was
                    // remembered (under the map's lock), so the map still holds the stream.
                    let current = || self.epoch.load(Ordering::Acquire) == e.epoch;
                    if let Some(_loan) = recent.lender.lend(e.stream.addr(), current) {
                        // SAFETY: the map holds the stream, and a forget waits until the loan
                        // is returned (`_loan`, dropped after `f`) before it lets go of it.
                        #[allow(unsafe_code)]
                        let stream = unsafe { e.stream.lend() };
                        return f(&stream);
                    }
                }
            }
        }
        let (s, made) = self.look_up(handle, identity, &same, recent)?;
        let r = f(&s);
        if r.is_err() && made {
            // A failed call changes nothing: the handle it made is not remembered.
            drop(self.forget_made(handle, &s));
        }
        r
    }

    /// As [`ForeignStreams::get_or_make`], remembering lookups in `recent`, the calling
    /// thread's own.
    pub fn get_or_make_cached(
        &self,
        handle: u64,
        recent: &RecentStreams,
    ) -> Result<(Stream, bool)> {
        // The driver is asked outside the lock.
        let identity = self.events.as_ref().and_then(|e| e.stream_identity(handle));
        let same = |known: Option<u64>| identity.is_none() || known.is_none() || known == identity;
        if let Some(s) = self.recent(handle, recent, same) {
            return Ok((s, false));
        }
        self.look_up(handle, identity, &same, recent)
    }

    /// The stream for `handle` from the map, made if it is not there (or names a destroyed
    /// stream), remembered in `recent`; and whether this call made it.
    fn look_up(
        &self,
        handle: u64,
        identity: Option<u64>,
        same: &impl Fn(Option<u64>) -> bool,
        recent: &RecentStreams,
    ) -> Result<(Stream, bool)> {
        {
            let map = self.map.read();
            if let Some((s, known)) = map.get(&handle) {
                if same(*known) {
                    self.remember(handle, *known, s, recent);
                    return Ok((s.clone(), false));
                }
            }
        }
        if self.events.is_some() && self.map.read().len() >= self.forget_at.load(Ordering::Relaxed)
        {
            self.forget_finished(false, |_| ());
        }
        let claim = |map: &mut StreamMap| self.claim(map, handle, identity, same, recent);
        // The guard is dropped before the match: a pass below locks the map itself.
        let first = claim(&mut self.map.write());
        let outcome = match first {
            // Other threads filled the set while a pass ran: one pass at the bound, waited
            // for, that claims the handle's place under the lock it forgets under, so threads
            // adding streams meanwhile cannot take the places it made.
            Claim::Full if self.events.is_some() => {
                self.forget_finished(true, claim).unwrap_or(Claim::Full)
            }
            outcome => outcome,
        };
        match outcome {
            Claim::Known(s) => Ok((s, false)),
            Claim::Made { stream, replaced } => {
                if let Some(old) = replaced {
                    self.let_go_of_reused(old);
                }
                Ok((stream, true))
            }
            Claim::Full => Err(ArenaError::InvalidArgument {
                reason: if self.events.is_some() {
                    format!(
                        "this allocator already knows {MAX_FOREIGN_STREAMS} streams that hold \
                         memory or whose work is still running; free their memory or reset \
                         them (cuda_arena_reset_stream) before using new ones"
                    )
                } else {
                    format!(
                        "this allocator already knows {MAX_FOREIGN_STREAMS} streams; reset the \
                         streams whose work is done (cuda_arena_reset_stream) before using new \
                         ones"
                    )
                },
            }),
        }
    }

    /// With the map locked: `handle`'s stream if `same` accepts the identity it was made
    /// with; else a new one in its place, unless the set is full.
    fn claim(
        &self,
        map: &mut StreamMap,
        handle: u64,
        identity: Option<u64>,
        same: &impl Fn(Option<u64>) -> bool,
        recent: &RecentStreams,
    ) -> Claim {
        let replaced = match map.get(&handle) {
            Some((s, known)) if same(*known) => {
                self.remember(handle, *known, s, recent);
                return Claim::Known(s.clone());
            }
            Some(_) => {
                self.epoch.fetch_add(1, Ordering::AcqRel);
                map.remove(&handle).map(|(s, _)| s)
            }
            None => None,
        };
        if replaced.is_none() && map.len() >= MAX_FOREIGN_STREAMS {
            return Claim::Full;
        }
        let stream = Stream::host_owned(handle, self.events.clone());
        map.insert(handle, (stream.clone(), identity));
        self.remember(handle, identity, &stream, recent);
        Claim::Made { stream, replaced }
    }

    /// Where this thread remembers `handle` of this set.
    #[inline]
    fn slot(&self, handle: u64) -> usize {
        ((handle ^ (handle >> 12) ^ self.id) as usize) % RECENT
    }

    /// The stream this thread last found for `handle` here, if nothing was forgotten since and
    /// `same` accepts the identity it was made with.
    #[inline]
    fn recent(
        &self,
        handle: u64,
        recent: &RecentStreams,
        same: impl Fn(Option<u64>) -> bool,
    ) -> Option<Stream> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let r = recent.entries.try_borrow().ok()?;
        let e = r[self.slot(handle)].as_ref()?;
        if e.owner != self.id || e.handle != handle || e.epoch != epoch || !same(e.identity) {
            return None;
        }
        let stream = e.stream.upgrade()?;
        // A stream forgotten as done between the epoch read and this upgrade is in this call's
        // hands now: the allocators keep its chunks' tags until their frees are done
        // (`FreeEvents::set_forgotten`), so no fence is needed here, on every lookup.
        Some(stream)
    }

    /// Remembers, for this thread, that `handle` names `stream` (made with `identity`); called
    /// with the map locked, so the epoch read is the one the map is at.
    fn remember(
        &self,
        handle: u64,
        identity: Option<u64>,
        stream: &Stream,
        recent: &RecentStreams,
    ) {
        let entry = Recent {
            owner: self.id,
            handle,
            epoch: self.epoch.load(Ordering::Acquire),
            identity,
            stream: stream.downgrade(),
        };
        if let Ok(mut r) = recent.entries.try_borrow_mut() {
            r[self.slot(handle)] = Some(entry);
        }
    }

    /// The handle of `old` now names another stream: the host destroyed it without a reset.
    /// Its work may still be running, so unless everything it freed is known done, the device
    /// is synchronized before its chunks are reset (dropped here, outside every lock).
    fn let_go_of_reused(&self, old: Stream) {
        wait_until_returned(&[old.addr()]);
        // Only a query: the handle names another stream now, so an event recorded on it would
        // stand for that stream's work, not the old one's.
        let pending = old.free_events().is_some_and(|f| {
            f.poll_now();
            f.has_incomplete()
        });
        if pending {
            if let Some(events) = &self.events {
                // Nothing to report from here: a failure leaves only the wait undone.
                let _ = events.synchronize_device();
            }
        }
        drop(old);
    }

    /// Forgets the streams whose work is done and that hold no memory in any allocator (see
    /// the module docs). Their events are polled with no lock held; once the bound is reached,
    /// the device is synchronized first, so every stream that holds nothing goes. Called only
    /// where the backend has events; `at_bound` says the set was found full. `then` runs with
    /// the map still locked once the finished streams are gone; its result is returned where a
    /// pass ran.
    fn forget_finished<R>(
        &self,
        at_bound: bool,
        then: impl FnOnce(&mut StreamMap) -> R,
    ) -> Option<R> {
        let events = self.events.as_ref()?;
        let at_bound = at_bound || self.map.read().len() >= MAX_FOREIGN_STREAMS;
        // One thread at a time; below the bound, another thread's pass will do.
        let _pass = if at_bound {
            self.forgetting.lock()
        } else {
            self.forgetting.try_lock()?
        };
        let candidates: Vec<(u64, Stream)> = self
            .map
            .read()
            .iter()
            .filter(|(_, (s, _))| s.free_events().is_some())
            .map(|(&h, (s, _))| (h, s.clone()))
            .collect();
        let idle: Vec<&(u64, Stream)> = candidates
            .iter()
            .filter(|(_, s)| !s.holds_memory())
            .collect();
        let mut labels = Vec::with_capacity(idle.len());
        for (_, s) in &idle {
            if let Some(f) = s.free_events() {
                if f.has_incomplete() {
                    f.advance();
                }
                labels.push(f.marked());
            }
        }
        let finished = idle
            .iter()
            .filter(|(_, s)| s.free_events().is_some_and(|f| !f.has_incomplete()))
            .count();
        if at_bound && finished < idle.len() && events.synchronize_device().is_ok() {
            // Every mark read before the synchronization is done now.
            for ((_, s), &label) in idle.iter().zip(&labels) {
                if let Some(f) = s.free_events() {
                    f.complete_through(label);
                }
            }
        }
        let ids: Vec<(u64, StreamId)> = idle.iter().map(|(h, s)| (*h, s.id())).collect();
        drop(idle);
        drop(candidates);
        let (gone, result) = {
            let mut map = self.map.write();
            // Every thread's remembered lookups of this set go stale. A call that has a stream
            // lent (which the sole-handle check below cannot see) is waited for before the
            // release, and the allocators keep what it allocated tagged (see `set_forgotten`).
            self.epoch.fetch_add(1, Ordering::AcqRel);
            let mut gone: Vec<Stream> = Vec::new();
            for (h, id) in ids {
                let done = map.get(&h).is_some_and(|(s, _)| {
                    s.id() == id
                        && s.is_unshared()
                        && !s.holds_memory()
                        && s.free_events().is_some_and(|f| !f.has_incomplete())
                });
                if done {
                    gone.extend(map.remove(&h).map(|(s, _)| s));
                }
            }
            let next = (2 * map.len()).clamp(FORGET_FROM, MAX_FOREIGN_STREAMS);
            self.forget_at.store(next, Ordering::Relaxed);
            (gone, then(&mut map))
        };
        self.forgotten
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        wait_until_returned(&gone.iter().map(Stream::addr).collect::<Vec<_>>());
        for s in &gone {
            if let Some(f) = s.free_events() {
                // Before the release: an allocator that finds it holding memory then (a lookup
                // raced the checks) keeps its chunks' tags until their frees are done.
                f.set_forgotten();
            }
        }
        // Released outside the lock: each resets its chunks in the allocators that used it.
        drop(gone);
        Some(result)
    }

    /// How many streams were forgotten because their work was done and they held no memory
    /// (see the module docs), since the set was made.
    pub fn forgotten_finished(&self) -> u64 {
        self.forgotten.load(Ordering::Relaxed)
    }

    /// Forgets `handle`; returns the stream it named, if any. Once the caller drops it (and
    /// any clone in flight is dropped), its chunks are reset in every allocator that used it.
    /// Returns once no call has it lent.
    pub fn forget(&self, handle: u64) -> Option<Stream> {
        let gone = {
            let mut map = self.map.write();
            self.epoch.fetch_add(1, Ordering::AcqRel);
            map.remove(&handle).map(|(s, _)| s)
        };
        self.returned(gone)
    }

    /// `gone`, forgotten, once no call has it lent.
    fn returned(&self, gone: Option<Stream>) -> Option<Stream> {
        if let Some(s) = &gone {
            wait_until_returned(&[s.addr()]);
        }
        gone
    }

    /// Forgets `handle` only while it still names `made` (a stream [`get_or_make`] made for a
    /// call that failed): a stream another thread has made for it since is kept.
    ///
    /// [`get_or_make`]: ForeignStreams::get_or_make
    pub fn forget_made(&self, handle: u64, made: &Stream) -> Option<Stream> {
        let gone = {
            let mut map = self.map.write();
            match map.get(&handle) {
                Some((s, _)) if s.id() == made.id() => {
                    self.epoch.fetch_add(1, Ordering::AcqRel);
                    map.remove(&handle).map(|(s, _)| s)
                }
                _ => None,
            }
        };
        self.returned(gone)
    }

    /// How many handles are remembered.
    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    /// The handles remembered, lowest first.
    pub fn handles(&self) -> Vec<u64> {
        self.map.read().keys().copied().collect()
    }

    /// Whether no handle is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every handle.
    pub fn clear(&self) {
        let streams = {
            let mut map = self.map.write();
            self.epoch.fetch_add(1, Ordering::AcqRel);
            std::mem::take(&mut *map)
        };
        wait_until_returned(&streams.values().map(|(s, _)| s.addr()).collect::<Vec<_>>());
        // Dropped outside the lock: a stream's release calls into allocators.
        drop(streams);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::stream::{StreamId, StreamUser};
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    struct Released(AtomicUsize);
    impl StreamUser for Released {
        fn stream_released(&self, _: StreamId) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_stream_this_thread_remembers_is_released_when_the_host_forgets_it() {
        let f = ForeignStreams::new();
        let user = Arc::new(Released::default());
        let s = f.get(7).expect("made");
        s.clock().register_user(&user);
        let again = f.get(7).expect("remembered");
        assert_eq!(again.id(), s.id());
        drop((s, again));
        drop(f.forget(7));
        assert_eq!(user.0.load(Ordering::SeqCst), 1, "released at once");
        assert_ne!(f.get(7).expect("a new stream").id(), 0);
    }

    #[test]
    fn a_stream_lent_to_a_call_is_released_only_after_the_call_even_when_forgotten_in_it() {
        let f = ForeignStreams::new();
        let user = Arc::new(Released::default());
        let recent = RecentStreams::new();
        f.with_stream_in(7, &recent, |s| {
            s.clock().register_user(&user);
            Ok(())
        })
        .expect("made");
        std::thread::scope(|t| {
            f.with_stream_in(7, &recent, |s| {
                assert_eq!(s.native(), 7);
                // Another thread forgets the handle while this call has its stream lent: the
                // forget waits for the call, and nothing is released under it.
                let forgetter = t.spawn(|| drop(f.forget(7)));
                for _ in 0..2000 {
                    std::thread::yield_now();
                    assert!(!forgetter.is_finished(), "the forget waits for the loan");
                    assert_eq!(user.0.load(Ordering::SeqCst), 0);
                }
                assert_eq!(s.native(), 7, "still the stream");
                Ok(())
            })
            .expect("lent");
        });
        assert_eq!(
            user.0.load(Ordering::SeqCst),
            1,
            "released once the call returned"
        );
    }

    /// The forgetting pass of a set past [`FORGET_FROM`] handles (where the backend has
    /// events) meets a call that has its stream lent from the thread's remembered lookup,
    /// which no count shows: the stream holds nothing and its work is done, so the pass takes
    /// it out of the set, but releases it only once the call returns; the call allocates and
    /// frees on it meanwhile.
    #[test]
    fn the_forgetting_pass_waits_for_a_call_that_has_its_stream_lent() {
        use crate::streams::stream_events::SimEvents;
        use crate::{AddressSpaceAllocator, Allocator, Arena};
        /// Counts releases, and says the stream holds nothing here (the arena says so too),
        /// where the module's `Released` says yes as the trait's default does.
        #[derive(Default)]
        struct HoldsNothing(AtomicUsize);
        impl StreamUser for HoldsNothing {
            fn stream_released(&self, _: StreamId) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
            fn stream_holds_memory(&self, _: StreamId) -> bool {
                false
            }
        }
        let events: Arc<dyn StreamEvents> = SimEvents::immediate();
        let f = ForeignStreams::with_events(Some(events));
        let a = Arena::new(
            AddressSpaceAllocator::default(),
            crate::ArenaConfig::default(),
        )
        .expect("arena");
        let user = Arc::new(HoldsNothing::default());
        let recent = RecentStreams::new();
        let one = |s: &Stream| {
            let p = a.alloc_on_stream(4096, s)?.expect("an address");
            a.free(p)
        };
        // Remembered by this thread, holding nothing, its frees done: the pass will take it.
        f.with_stream_in(1, &recent, |s| {
            s.clock().register_user(&user);
            one(s)
        })
        .expect("made");
        std::thread::scope(|t| {
            f.with_stream_in(1, &recent, |s| {
                let maker = t.spawn(|| {
                    let theirs = RecentStreams::new();
                    for h in 2..FORGET_FROM as u64 + 8 {
                        f.with_stream_in(h, &theirs, |s| one(s)).expect("served");
                    }
                });
                while f.forgotten_finished() == 0 {
                    assert!(!maker.is_finished(), "the pass ran");
                    std::thread::yield_now();
                }
                assert!(!f.handles().contains(&1), "taken out by the pass");
                for _ in 0..200 {
                    std::thread::yield_now();
                    assert!(!maker.is_finished(), "the pass waits for the loan");
                    assert_eq!(user.0.load(Ordering::SeqCst), 0, "not released under it");
                    one(s)?;
                }
                assert_eq!(s.native(), 1);
                Ok(())
            })
            .expect("lent");
        });
        assert_eq!(
            user.0.load(Ordering::SeqCst),
            1,
            "released once the call returned"
        );
        a.check_invariants().expect("invariants");
        assert!(f.len() <= FORGET_FROM, "{} remembered", f.len());
    }

    #[test]
    fn a_call_that_fails_on_a_stream_it_made_leaves_nothing_remembered() {
        let f = ForeignStreams::new();
        let recent = RecentStreams::new();
        let r: Result<()> = f.with_stream_in(5, &recent, |_| {
            Err(ArenaError::InvalidArgument {
                reason: "refused".into(),
            })
        });
        assert!(r.is_err());
        assert!(f.is_empty());
        let kept = f.with_stream_in(5, &recent, |s| Ok(s.id())).expect("made");
        let r: Result<()> = f.with_stream_in(5, &recent, |_| {
            Err(ArenaError::InvalidArgument {
                reason: "refused".into(),
            })
        });
        assert!(r.is_err());
        assert_eq!(f.handles(), vec![5], "a stream made before stays");
        assert_eq!(
            f.with_stream_in(5, &recent, |s| Ok(s.id())).expect("lent"),
            kept
        );
    }

    #[test]
    fn threads_lending_while_others_forget_and_replace_always_see_a_live_stream() {
        #[derive(Default)]
        struct Ids(Mutex<std::collections::BTreeMap<StreamId, usize>>);
        impl StreamUser for Ids {
            fn stream_released(&self, id: StreamId) {
                *self.0.lock().entry(id).or_default() += 1;
            }
        }
        let f = ForeignStreams::new();
        let user = Arc::new(Ids::default());
        let seen = Mutex::new(std::collections::BTreeSet::new());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let calls = AtomicUsize::new(0);
        std::thread::scope(|t| {
            for k in 0..3u64 {
                let (f, user, stop, calls, seen) = (&f, &user, &stop, &calls, &seen);
                t.spawn(move || {
                    let recent = RecentStreams::new();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) || i < 2000 {
                        let h = 1 + (i + k) % 3;
                        f.with_stream_in(h, &recent, |s| {
                            assert_eq!(s.native(), h);
                            s.clock().register_user(user);
                            seen.lock().insert(s.clone().id());
                            Ok(())
                        })
                        .expect("served");
                        calls.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                });
            }
            let mut x = 0x2545_f491_4f6c_dd1du64;
            // Until the callers have run a while and met a replaced handle: the handles change
            // under them, however the threads are scheduled.
            let mut n = 0;
            while n < 3000 || calls.load(Ordering::Relaxed) < 3000 || seen.lock().len() <= 3 {
                n += 1;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match x % 3 {
                    0 => drop(f.forget(1 + x % 3)),
                    1 => drop(f.get(1 + x % 3)),
                    _ => f.clear(),
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        f.clear();
        assert!(calls.load(Ordering::Relaxed) >= 6000);
        // Every stream a call used was released, once, when it was forgotten and no call had it.
        let released = user.0.lock();
        assert!(released.values().all(|&n| n == 1));
        let seen = seen.lock();
        assert_eq!(
            released.keys().copied().collect::<Vec<_>>(),
            seen.iter().copied().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_remembered_lookup_of_a_replaced_handle_is_not_used() {
        let f = ForeignStreams::new();
        // Kept alive here, so only the epoch can tell this thread its lookup is stale.
        let first = f.get(9).expect("made");
        // Another thread forgets the handle and a new stream takes it.
        std::thread::scope(|t| {
            t.spawn(|| {
                f.forget(9);
                f.get(9).expect("made again")
            });
        });
        let now = f.get(9).expect("the current stream");
        assert_ne!(
            now.id(),
            first.id(),
            "this thread's remembered lookup was stale"
        );
    }

    #[test]
    fn threads_remember_their_own_lookups() {
        let f = ForeignStreams::new();
        let ids: Vec<(u64, u64)> = std::thread::scope(|t| {
            let hs: Vec<_> = (1..=4u64)
                .map(|h| {
                    let f = &f;
                    t.spawn(move || {
                        let a = f.get(h).expect("made").id();
                        let b = f.get(h).expect("remembered").id();
                        (a, b)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        for (a, b) in &ids {
            assert_eq!(a, b);
        }
        let mut distinct: Vec<u64> = ids.iter().map(|p| p.0).collect();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "four handles, four streams");
    }

    #[test]
    fn one_handle_is_one_stream_until_forgotten() {
        let f = ForeignStreams::new();
        let a = f.get(7).expect("first use");
        assert_eq!(f.get(7).expect("again").id(), a.id());
        assert_eq!(a.native(), 7);
        let forgotten = f.forget(7).expect("known");
        assert_eq!(forgotten.id(), a.id());
        assert_ne!(f.get(7).expect("a new stream").id(), a.id());
    }

    #[test]
    fn past_the_bound_a_new_handle_is_refused_and_a_known_one_still_works() {
        let f = ForeignStreams::new();
        for h in 1..=MAX_FOREIGN_STREAMS as u64 {
            f.get(h).expect("within the bound");
        }
        let err = f.get(u64::MAX).expect_err("past the bound");
        assert_eq!(err.code(), "ERR_ARENA_INVALID_ARGUMENT");
        assert!(f.get(1).is_ok());
        f.forget(1);
        assert!(f.get(u64::MAX).is_ok(), "forgetting makes room");
        assert_eq!(f.len(), MAX_FOREIGN_STREAMS);
    }

    #[test]
    fn taking_back_a_made_stream_keeps_one_made_since() {
        let f = ForeignStreams::new();
        let (old, _) = f.get_or_make(9).expect("first use");
        f.forget(9);
        let (current, new) = f.get_or_make(9).expect("made again");
        assert!(new);
        assert!(f.forget_made(9, &old).is_none());
        assert_eq!(f.get(9).expect("kept").id(), current.id());
    }
}
