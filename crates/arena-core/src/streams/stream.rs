//! Streams as the arena sees them: an identity, ONNX Runtime's sync-id clock, and a lifetime.
//!
//! `record()` bumps the stream's sync id and returns an event carrying it (and everything the
//! stream itself has waited on, so knowledge passes along chains of waits); `wait(ev)` makes
//! the waiting stream remember those ids. A free chunk last used by stream S at sync id k may
//! be taken by stream T only when `k < T.last_wait_sync_id(S)`: T has waited on an event S
//! recorded after the chunk was handed out on S.
//!
//! Lifetime: an allocator that tags memory with a stream registers itself with the stream
//! (a [`StreamUser`], held weakly). When the last clone of the stream is dropped, every such
//! allocator is told ([`StreamUser::stream_released`]) and resets the stream's chunks, as
//! ONNX Runtime's `ResetChunksUsingStream`: they lose the tag, merge with their neighbours
//! and any stream may take them. So a stream never pins memory after it is gone. What a
//! stream remembers of others (the sync ids it waited on) is kept only for streams that are
//! still alive, so per-stream state is bounded by the streams alive, not by those ever seen.
//!
//! On the `cuda` backend the bridge pairs this clock with a `CUstream` and real events; on
//! `host` and `virtual` it is the whole stream.
//!
//! Streams the host owns (issue 13: a caller's `CUstream`, ORT's `OrtSyncStream`, PyTorch's
//! `cudaStream_t`, made by [`ForeignStreams`](crate::ForeignStreams)) are nobody's to record
//! or wait on: where the backend has events, such a stream carries [`FreeEvents`], and a
//! chunk freed on it comes free for other streams once an event recorded on it after the free
//! has completed (see `stream_events.rs`).

use crate::streams::stream_events::{FreeEvents, StreamEvents};
use parking_lot::{Mutex, MutexGuard};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A stream's identity; `0` means "no stream". Identities are never reused.
pub type StreamId = u64;

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// Something that tags memory with streams: told when a stream it used is gone.
pub trait StreamUser: Send + Sync {
    /// The stream `id` was released (its last clone dropped): forget it, so its memory is
    /// free for every stream. Called on the thread that dropped the stream, with no lock of
    /// the stream held.
    fn stream_released(&self, id: StreamId);

    /// Whether memory handed out on stream `id` is still in use here. A host stream that holds
    /// nothing anywhere and whose frees are done may be forgotten
    /// ([`ForeignStreams`](crate::ForeignStreams)), which releases it. The default says yes:
    /// a user that cannot tell never has a stream forgotten under it.
    fn stream_holds_memory(&self, id: StreamId) -> bool {
        let _ = id;
        true
    }
}

/// A logical stream. Cloning gives another handle to the same stream.
#[derive(Debug, Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    id: StreamId,
    /// The backend's handle for this stream (a `CUstream` on `cuda`), 0 for a logical one.
    native: u64,
    /// Whether the host owns the stream (it was not made by cuda-arena).
    host_owned: bool,
    /// For a host-owned stream on a backend with events: what its frees are waiting for.
    free_events: Option<Arc<FreeEvents>>,
    clock: Mutex<Clock>,
    /// The clock's sync id, readable without its lock (issue 15: an allocation on the stream
    /// reads it on every call). Written under the lock.
    sync_id: AtomicU64,
}

impl std::fmt::Debug for StreamInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("native", &self.native)
            .field("host_owned", &self.host_owned)
            .finish_non_exhaustive()
    }
}

/// What a stream knows of another: that stream's sync id at the last of its events this
/// stream waited on (or that its producer had waited on).
#[derive(Clone)]
struct Known {
    stream: StreamId,
    sync_id: u64,
    /// Whether that stream is still alive; once it is gone its chunks are reset and what we
    /// knew of it is of no use.
    alive: Weak<StreamInner>,
}

/// Entries a stream keeps of others before it drops those of dead streams.
const KNOWN_BEFORE_PRUNING: usize = 16;

/// A stream's sync id, what it waited on, and who tagged memory with it.
#[derive(Default)]
pub(crate) struct Clock {
    sync_id: u64,
    /// One entry per producer, ascending by producer.
    waited: Vec<Known>,
    /// Allocators holding memory tagged with this stream; told when it is released.
    users: Vec<Weak<dyn StreamUser>>,
}

impl Clock {
    /// The sync id of the producer's last event this stream waited on; 0 if none.
    pub(crate) fn last_wait(&self, producer: StreamId) -> u64 {
        match self.waited.binary_search_by_key(&producer, |e| e.stream) {
            Ok(i) => self.waited[i].sync_id,
            Err(_) => 0,
        }
    }

    fn note(&mut self, known: &Known) {
        match self
            .waited
            .binary_search_by_key(&known.stream, |e| e.stream)
        {
            Ok(i) => self.waited[i].sync_id = self.waited[i].sync_id.max(known.sync_id),
            Err(i) => {
                if known.alive.strong_count() == 0 {
                    return;
                }
                self.waited.insert(i, known.clone());
                if self.waited.len() > KNOWN_BEFORE_PRUNING {
                    self.waited.retain(|e| e.alive.strong_count() > 0);
                }
            }
        }
    }

    /// Registers `user` (identified by `key`, its address) to be told when this stream is
    /// released, unless it already is. Cheap when registered: a scan of a list that holds
    /// one entry per allocator that used the stream.
    pub(crate) fn register_user<U: StreamUser + 'static>(&mut self, user: &Arc<U>) {
        let key = Arc::as_ptr(user) as *const ();
        if self
            .users
            .iter()
            .any(|w| Weak::as_ptr(w) as *const () == key)
        {
            return;
        }
        // Allocators dropped since do not count (the list follows the allocators alive).
        self.users.retain(|w| w.strong_count() > 0);
        let weak: Weak<dyn StreamUser> = Arc::downgrade(user) as Weak<dyn StreamUser>;
        self.users.push(weak);
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let users = std::mem::take(&mut self.clock.get_mut().users);
        for user in users {
            if let Some(user) = user.upgrade() {
                user.stream_released(self.id);
            }
        }
    }
}

/// What `record()` returns: a point on the producer stream, with what the producer knew.
#[derive(Clone)]
pub struct StreamEvent {
    producer: StreamId,
    /// What a waiter learns, the producer's own sync id included.
    sync_ids: Vec<Known>,
}

impl std::fmt::Debug for StreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamEvent")
            .field("producer", &self.producer)
            .field("sync_id", &self.sync_id())
            .finish()
    }
}

impl PartialEq for StreamEvent {
    fn eq(&self, other: &Self) -> bool {
        self.producer == other.producer
            && self.sync_ids.len() == other.sync_ids.len()
            && self
                .sync_ids
                .iter()
                .zip(&other.sync_ids)
                .all(|(a, b)| a.stream == b.stream && a.sync_id == b.sync_id)
    }
}

impl Eq for StreamEvent {}

impl StreamEvent {
    /// The stream that recorded this event.
    pub fn producer(&self) -> StreamId {
        self.producer
    }

    /// The producer's sync id at this event.
    pub fn sync_id(&self) -> u64 {
        self.sync_ids
            .iter()
            .find(|e| e.stream == self.producer)
            .map_or(0, |e| e.sync_id)
    }
}

impl Default for Stream {
    fn default() -> Self {
        Self::new()
    }
}

impl Stream {
    /// A new stream with sync id 0 that has waited on nothing.
    pub fn new() -> Self {
        Self::with_native(0)
    }

    /// A new stream that stands for the backend's stream `native` (a `CUstream` handle on
    /// `cuda`), which allocators of that backend use for stream-ordered calls.
    pub fn with_native(native: u64) -> Self {
        Self::make(native, false, None)
    }

    /// A new stream of cuda-arena's own for the backend's stream `native` (a `CUstream` it
    /// made), with the backend's `events` (issue 25): a chunk freed on it comes free for other
    /// streams once its work up to the free has completed, as a host stream's does, or once
    /// they waited on an event recorded after the free (ONNX Runtime's rule, its sync ids
    /// being the events' marks).
    pub fn with_events(native: u64, events: Arc<dyn StreamEvents>) -> Self {
        let free_events = FreeEvents::new(events, native);
        Self::make(native, false, Some(Arc::new(free_events)))
    }

    /// A stream for the handle `native` of a stream the host owns, with the backend's
    /// `events` where it has them (then a chunk freed on it comes free for other streams once
    /// its work up to the free has completed; without them, once the host resets it).
    pub fn host_owned(native: u64, events: Option<Arc<dyn StreamEvents>>) -> Self {
        let free_events = events.map(|e| Arc::new(FreeEvents::new(e, native)));
        Self::make(native, true, free_events)
    }

    fn make(native: u64, host_owned: bool, free_events: Option<Arc<FreeEvents>>) -> Self {
        let id = NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed);
        Stream {
            inner: Arc::new(StreamInner {
                id,
                native,
                host_owned,
                free_events,
                clock: Mutex::new(Clock::default()),
                sync_id: AtomicU64::new(0),
            }),
        }
    }

    /// Whether the host owns this stream (see [`Stream::host_owned`]).
    pub fn is_host_owned(&self) -> bool {
        self.inner.host_owned
    }

    /// The events a host-owned stream's frees wait for, if its backend has events.
    pub fn free_events(&self) -> Option<&Arc<FreeEvents>> {
        self.inner.free_events.as_ref()
    }

    /// The backend's handle; 0 for a logical stream.
    pub fn native(&self) -> u64 {
        self.inner.native
    }

    /// This stream's identity, never 0, never reused.
    pub fn id(&self) -> StreamId {
        self.inner.id
    }

    /// The current sync id: the number of events recorded so far.
    pub fn sync_id(&self) -> u64 {
        self.inner.sync_id.load(Ordering::Acquire)
    }

    /// Records an event: bumps the sync id and returns an event carrying it. A stream with
    /// events counts its sync ids with its marks (each free takes one), so that a chunk's
    /// mark is also the sync id a waiting stream compares: the event is past every free so far.
    pub fn record(&self) -> StreamEvent {
        let mut clock = self.inner.clock.lock();
        clock.sync_id = match &self.inner.free_events {
            Some(f) => f.mark().max(clock.sync_id + 1),
            None => clock.sync_id + 1,
        };
        self.inner.sync_id.store(clock.sync_id, Ordering::Release);
        let mut sync_ids = clock.waited.clone();
        sync_ids.push(Known {
            stream: self.inner.id,
            sync_id: clock.sync_id,
            alive: Arc::downgrade(&self.inner),
        });
        StreamEvent {
            producer: self.inner.id,
            sync_ids,
        }
    }

    /// Makes this stream wait for `event`: remembers the producer's sync id at the event,
    /// and what the producer had itself waited on (of the streams still alive).
    pub fn wait(&self, event: &StreamEvent) {
        let mut clock = self.inner.clock.lock();
        for known in &event.sync_ids {
            if known.stream != self.inner.id {
                clock.note(known);
            }
        }
    }

    /// The producer's sync id at the last of its events this stream waited on; 0 if none.
    pub fn last_wait_sync_id(&self, producer: StreamId) -> u64 {
        self.inner.clock.lock().last_wait(producer)
    }

    /// How many other streams this one keeps sync ids of (bounded by the streams alive).
    pub fn known_streams(&self) -> usize {
        self.inner.clock.lock().waited.len()
    }

    /// How many allocators will be told when this stream is released.
    pub fn users(&self) -> usize {
        self.inner
            .clock
            .lock()
            .users
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Whether an allocator that tagged memory with this stream still has some of it in use
    /// ([`StreamUser::stream_holds_memory`]).
    pub fn holds_memory(&self) -> bool {
        // Asked with the clock let go: an allocator's locks come before a clock's.
        let users: Vec<Arc<dyn StreamUser>> = self
            .clock()
            .users
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        users.iter().any(|u| u.stream_holds_memory(self.id()))
    }

    /// Whether this is the stream's only handle (what a cache holds weakly does not count).
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Tells `user` when this stream is released, as allocators in this crate are: for
    /// allocators elsewhere (the CUDA memory pool) that tag memory with streams.
    pub fn register_user<U: StreamUser + 'static>(&self, user: &Arc<U>) {
        self.clock().register_user(user);
    }

    pub(crate) fn clock(&self) -> MutexGuard<'_, Clock> {
        self.inner.clock.lock()
    }

    /// A reference that does not keep the stream alive (a cache's, issue 15).
    pub(crate) fn downgrade(&self) -> WeakStream {
        WeakStream(Arc::downgrade(&self.inner))
    }

    /// The stream's address, what a loan publishes (`lent_streams.rs`).
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }
}

/// A stream that may be gone; see [`Stream::downgrade`].
#[derive(Debug, Clone)]
pub(crate) struct WeakStream(Weak<StreamInner>);

impl WeakStream {
    /// The stream, if it is still alive.
    pub(crate) fn upgrade(&self) -> Option<Stream> {
        self.0.upgrade().map(|inner| Stream { inner })
    }

    /// The stream's address, as [`Stream::addr`], alive or not.
    pub(crate) fn addr(&self) -> usize {
        Weak::as_ptr(&self.0) as usize
    }

    /// The stream, without a count of its own: never dropped, so it gives none back.
    ///
    /// # Safety
    /// The stream is alive (a counted reference exists elsewhere) for as long as the result or
    /// anything borrowed from it is used.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn lend(&self) -> ManuallyDrop<Stream> {
        // SAFETY: the pointer is the stream's, which per the contract is alive; the Arc made
        // from it is never dropped, so the strong count it did not take is never released.
        let inner = unsafe { Arc::from_raw(Weak::as_ptr(&self.0)) };
        ManuallyDrop::new(Stream { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn record_bumps_the_sync_id() {
        let s = Stream::new();
        assert_eq!(s.sync_id(), 0);
        let ev = s.record();
        assert_eq!(ev.sync_id(), 1);
        assert_eq!(s.sync_id(), 1);
    }

    #[test]
    fn wait_remembers_the_producers_sync_id() {
        let (s, t) = (Stream::new(), Stream::new());
        assert_eq!(t.last_wait_sync_id(s.id()), 0);
        let old = s.record();
        let ev = s.record();
        t.wait(&ev);
        assert_eq!(t.last_wait_sync_id(s.id()), 2);
        // An older event does not move the clock back.
        t.wait(&old);
        assert_eq!(t.last_wait_sync_id(s.id()), 2);
    }

    #[test]
    fn waits_pass_along_chains() {
        let (a, b, c) = (Stream::new(), Stream::new(), Stream::new());
        b.wait(&a.record());
        c.wait(&b.record());
        assert_eq!(c.last_wait_sync_id(a.id()), 1);
        assert_eq!(c.last_wait_sync_id(b.id()), 1);
    }

    #[test]
    fn what_a_stream_knows_of_others_is_bounded_by_the_streams_alive() {
        let waiter = Stream::new();
        for _ in 0..10_000 {
            let producer = Stream::new();
            waiter.wait(&producer.record());
        }
        assert!(waiter.known_streams() <= KNOWN_BEFORE_PRUNING + 1);
        let alive: Vec<Stream> = (0..40).map(|_| Stream::new()).collect();
        for p in &alive {
            waiter.wait(&p.record());
        }
        assert!(waiter.known_streams() >= 40);
        for p in &alive {
            assert_eq!(waiter.last_wait_sync_id(p.id()), 1);
        }
    }

    #[derive(Default)]
    struct Counter(AtomicUsize, AtomicU64);
    impl StreamUser for Counter {
        fn stream_released(&self, id: StreamId) {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.store(id, Ordering::SeqCst);
        }
    }

    #[test]
    fn users_are_told_once_when_the_last_clone_is_dropped() {
        let user = Arc::new(Counter::default());
        let s = Stream::new();
        let id = s.id();
        s.clock().register_user(&user);
        s.clock().register_user(&user);
        assert_eq!(s.users(), 1);
        let clone = s.clone();
        drop(s);
        assert_eq!(user.0.load(Ordering::SeqCst), 0, "a clone is still alive");
        drop(clone);
        assert_eq!(user.0.load(Ordering::SeqCst), 1);
        assert_eq!(user.1.load(Ordering::SeqCst), id);
    }

    #[test]
    fn a_dropped_user_is_neither_told_nor_kept() {
        let s = Stream::new();
        for _ in 0..100 {
            let user = Arc::new(Counter::default());
            s.clock().register_user(&user);
        }
        assert_eq!(s.users(), 0);
        let kept = Arc::new(Counter::default());
        s.clock().register_user(&kept);
        assert!(s.clock().users.len() <= 2);
    }
}
