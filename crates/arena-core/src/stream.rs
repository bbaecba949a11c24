//! Streams as the arena sees them: an identity plus ONNX Runtime's sync-id clock.
//!
//! `record()` bumps the stream's sync id and returns an event carrying it (and everything the
//! stream itself has waited on, so knowledge passes along chains of waits); `wait(ev)` makes
//! the waiting stream remember those ids. A free chunk last used by stream S at sync id k may
//! be taken by stream T only when `k < T.last_wait_sync_id(S)`: T has waited on an event S
//! recorded after the chunk was handed out on S.
//!
//! On the `cuda` backend the bridge pairs this clock with a `CUstream` and real events; on
//! `host` and `virtual` it is the whole stream.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A stream's identity; `0` means "no stream".
pub type StreamId = u64;

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// A logical stream. Cloning gives another handle to the same stream.
#[derive(Debug, Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

#[derive(Debug)]
struct StreamInner {
    id: StreamId,
    /// The backend's handle for this stream (a `CUstream` on `cuda`), 0 for a logical one.
    native: u64,
    clock: Mutex<Clock>,
}

/// A stream's sync id and the last sync id it waited on, per producer stream.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    sync_id: u64,
    /// `(producer, sync id)`, one entry per producer, ascending by producer.
    waited: Vec<(StreamId, u64)>,
}

impl Clock {
    /// The sync id of the producer's last event this stream waited on; 0 if none.
    pub(crate) fn last_wait(&self, producer: StreamId) -> u64 {
        match self.waited.binary_search_by_key(&producer, |e| e.0) {
            Ok(i) => self.waited[i].1,
            Err(_) => 0,
        }
    }

    pub(crate) fn sync_id(&self) -> u64 {
        self.sync_id
    }

    fn note(&mut self, producer: StreamId, sync_id: u64) {
        match self.waited.binary_search_by_key(&producer, |e| e.0) {
            Ok(i) => self.waited[i].1 = self.waited[i].1.max(sync_id),
            Err(i) => self.waited.insert(i, (producer, sync_id)),
        }
    }
}

/// What `record()` returns: a point on the producer stream, with what the producer knew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    producer: StreamId,
    /// `(stream, sync id)` pairs a waiter learns, the producer's own included.
    sync_ids: Vec<(StreamId, u64)>,
}

impl StreamEvent {
    /// The stream that recorded this event.
    pub fn producer(&self) -> StreamId {
        self.producer
    }

    /// The producer's sync id at this event.
    pub fn sync_id(&self) -> u64 {
        self.sync_ids
            .iter()
            .find(|e| e.0 == self.producer)
            .map_or(0, |e| e.1)
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
        let id = NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed);
        Stream {
            inner: Arc::new(StreamInner {
                id,
                native,
                clock: Mutex::new(Clock::default()),
            }),
        }
    }

    /// The backend's handle; 0 for a logical stream.
    pub fn native(&self) -> u64 {
        self.inner.native
    }

    /// This stream's identity, never 0.
    pub fn id(&self) -> StreamId {
        self.inner.id
    }

    /// The current sync id: the number of events recorded so far.
    pub fn sync_id(&self) -> u64 {
        self.inner.clock.lock().sync_id
    }

    /// Records an event: bumps the sync id and returns an event carrying it.
    pub fn record(&self) -> StreamEvent {
        let mut clock = self.inner.clock.lock();
        clock.sync_id += 1;
        let mut sync_ids = clock.waited.clone();
        sync_ids.push((self.inner.id, clock.sync_id));
        StreamEvent {
            producer: self.inner.id,
            sync_ids,
        }
    }

    /// Makes this stream wait for `event`: remembers the producer's sync id at the event,
    /// and what the producer had itself waited on.
    pub fn wait(&self, event: &StreamEvent) {
        let mut clock = self.inner.clock.lock();
        for &(stream, sync_id) in &event.sync_ids {
            if stream != self.inner.id {
                clock.note(stream, sync_id);
            }
        }
    }

    /// The producer's sync id at the last of its events this stream waited on; 0 if none.
    pub fn last_wait_sync_id(&self, producer: StreamId) -> u64 {
        self.inner.clock.lock().last_wait(producer)
    }

    pub(crate) fn clock(&self) -> MutexGuard<'_, Clock> {
        self.inner.clock.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        s.record();
        let ev = s.record();
        t.wait(&ev);
        assert_eq!(t.last_wait_sync_id(s.id()), 2);
        // An older event does not move the clock back.
        let old = StreamEvent {
            producer: s.id(),
            sync_ids: vec![(s.id(), 1)],
        };
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
}
