//! Streams a host owns (a caller's `CUstream`, ONNX Runtime's `OrtSyncStream`, PyTorch's
//! `cudaStream_t`), known to an allocator only by their handle value. Each handle gets one
//! logical [`Stream`] (so its sync ids and chunks persist across calls) until the host says
//! it is done with it ([`ForeignStreams::forget`], ORT's `ResetChunksUsingStream` at the end
//! of a run); dropping that stream resets its chunks in every allocator that used it. The
//! number of handles remembered is bounded, so a host that never forgets cannot make the
//! allocator's state, or the cost of its operations, grow without end: past the bound a new
//! handle is refused with a message that says what to do.

use crate::error::{ArenaError, Result};
use crate::stream::Stream;
use parking_lot::RwLock;
use std::collections::BTreeMap;

/// How many foreign stream handles one allocator remembers at once.
pub const MAX_FOREIGN_STREAMS: usize = 4096;

/// The foreign streams of one allocator; see the module docs.
#[derive(Debug, Default)]
pub struct ForeignStreams {
    /// Handle value → its stream. A `BTreeMap` rather than a hash map: it is process-wide
    /// state in the C library, and tools like valgrind see its nodes as reachable. Read-locked
    /// on the common path (a known handle), so threads on different streams do not queue.
    map: RwLock<BTreeMap<u64, Stream>>,
}

impl ForeignStreams {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The stream for `handle` (non-zero), made on first use.
    pub fn get(&self, handle: u64) -> Result<Stream> {
        self.get_or_make(handle).map(|(s, _)| s)
    }

    /// As [`ForeignStreams::get`], and whether this call made the stream: a caller whose
    /// operation then fails takes it back with [`ForeignStreams::forget_made`], so a failed
    /// call uses up none of the bound.
    pub fn get_or_make(&self, handle: u64) -> Result<(Stream, bool)> {
        if let Some(s) = self.map.read().get(&handle) {
            return Ok((s.clone(), false));
        }
        let mut map = self.map.write();
        if let Some(s) = map.get(&handle) {
            return Ok((s.clone(), false));
        }
        if map.len() >= MAX_FOREIGN_STREAMS {
            return Err(ArenaError::InvalidArgument {
                reason: format!(
                    "this allocator already knows {MAX_FOREIGN_STREAMS} streams; reset the streams \
                     whose work is done (cuda_arena_reset_stream) before using new ones"
                ),
            });
        }
        let s = Stream::with_native(handle);
        map.insert(handle, s.clone());
        Ok((s, true))
    }

    /// Forgets `handle`; returns the stream it named, if any. Once the caller drops it (and
    /// any clone in flight is dropped), its chunks are reset in every allocator that used it.
    pub fn forget(&self, handle: u64) -> Option<Stream> {
        self.map.write().remove(&handle)
    }

    /// Forgets `handle` only while it still names `made` (a stream [`get_or_make`] made for a
    /// call that failed): a stream another thread has made for it since is kept.
    ///
    /// [`get_or_make`]: ForeignStreams::get_or_make
    pub fn forget_made(&self, handle: u64, made: &Stream) -> Option<Stream> {
        let mut map = self.map.write();
        match map.get(&handle) {
            Some(s) if s.id() == made.id() => map.remove(&handle),
            _ => None,
        }
    }

    /// How many handles are remembered.
    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    /// Whether no handle is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every handle.
    pub fn clear(&self) {
        let streams = std::mem::take(&mut *self.map.write());
        // Dropped outside the lock: a stream's release calls into allocators.
        drop(streams);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
