//! The allocators and streams of this thread's JS objects, by handle number.
//!
//! A JS `NativeAllocator` or `NativeStream` holds only a number; this table holds what it
//! names, and it is the one owner of that object's user of a shared allocator (or of its
//! stream). So releasing is taking the entry out, and:
//! - handle numbers never alias: a number is a slot and the slot's generation, and a slot's
//!   generation changes when its entry is taken out, so a released or collected object's
//!   number names nothing, on every path (the scratch fast path included), even after its
//!   slot is reused;
//! - a finalizer cannot touch another object's state: it removes its entry only if the
//!   generation still matches;
//! - when this thread's Node environment is torn down (a worker terminated, the process
//!   exiting), [`release_all`] releases every entry still here (an env cleanup hook), so a
//!   worker's users and allocations do not outlive it.
//!
//! JS values never cross threads, so neither do handle numbers: the table is thread-local,
//! and every copy of the package loaded in this thread shares it.

use crate::error::{invalid, released, Result};
use cuda_arena_core::{Allocator, Factory, Released, Stream};
use cuda_sys_bridge::CudaStream;
use std::cell::RefCell;
use std::sync::Arc;

/// Low bits of a handle number: the slot index plus one (0 is never a handle).
const INDEX_BITS: u32 = 21;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// Live entries one thread may hold per table; creating more is a coded error.
pub const MAX_LIVE_HANDLES: usize = (1 << 20) - 1;

struct Slot<T> {
    generation: u32,
    item: Option<T>,
}

/// Slots with generations; see the module docs.
pub(crate) struct Table<T> {
    slots: Vec<Slot<T>>,
    vacant: Vec<u32>,
    live: usize,
}

impl<T> Table<T> {
    const fn new() -> Self {
        Table {
            slots: Vec::new(),
            vacant: Vec::new(),
            live: 0,
        }
    }

    fn encode(index: usize, generation: u32) -> f64 {
        ((u64::from(generation) << INDEX_BITS) | (index as u64 + 1)) as f64
    }

    /// `(index, generation)` of a handle number, if it is one at all.
    #[inline]
    fn decode(handle: f64) -> Option<(usize, u32)> {
        let h = crate::convert::whole(handle)?;
        let index = (h & INDEX_MASK) as usize;
        let generation = u32::try_from(h >> INDEX_BITS).ok()?;
        Some((index.checked_sub(1)?, generation))
    }

    fn insert(&mut self, item: T) -> Option<f64> {
        if self.live >= MAX_LIVE_HANDLES {
            return None;
        }
        let index = match self.vacant.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    item: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.item = Some(item);
        self.live += 1;
        Some(Self::encode(index, slot.generation))
    }

    #[inline]
    fn get(&self, handle: f64) -> Option<&T> {
        let (index, generation) = Self::decode(handle)?;
        let slot = self.slots.get(index)?;
        (slot.generation == generation)
            .then_some(slot.item.as_ref())
            .flatten()
    }

    fn remove(&mut self, handle: f64) -> Option<T> {
        let (index, generation) = Self::decode(handle)?;
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let item = slot.item.take()?;
        self.live -= 1;
        // A slot whose generation would wrap is retired rather than reused, so a number is
        // never given out twice.
        if let Some(next) = slot.generation.checked_add(1) {
            slot.generation = next;
            self.vacant.push(index as u32);
        }
        Some(item)
    }

    fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.live);
        for index in 0..self.slots.len() {
            let slot = &self.slots[index];
            if slot.item.is_some() {
                let handle = Self::encode(index, slot.generation);
                out.extend(self.remove(handle));
            }
        }
        out
    }
}

/// Where a stream or allocator belongs: streams work only with allocators of their backend
/// and device (DESIGN: a stream is a `CUstream` of one device on `cuda`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    pub backend: &'static str,
    pub device: u32,
}

/// One user of an allocator, made by `factory`.
pub(crate) struct AllocatorEntry {
    pub allocator: Arc<dyn Allocator>,
    pub factory: Arc<Factory>,
    pub origin: Origin,
}

/// A stream: a logical one on `host` and `virtual`, a `CUstream` on `cuda`.
pub(crate) enum StreamKind {
    Logical(Stream),
    Cuda(CudaStream),
}

/// A stream and where it belongs.
pub(crate) struct StreamEntry {
    pub kind: StreamKind,
    pub origin: Origin,
}

impl StreamEntry {
    /// The stream as the arena sees it.
    pub fn stream(&self) -> &Stream {
        match &self.kind {
            StreamKind::Logical(s) => s,
            StreamKind::Cuda(c) => c.logical(),
        }
    }
}

thread_local! {
    static ALLOCATORS: RefCell<Table<AllocatorEntry>> = const { RefCell::new(Table::new()) };
    static STREAMS: RefCell<Table<StreamEntry>> = const { RefCell::new(Table::new()) };
    /// Handles whose finalizer ran while their table was in use; released at the next
    /// registration or release.
    static PENDING: RefCell<Vec<(bool, f64)>> = const { RefCell::new(Vec::new()) };
}

fn too_many(what: &str) -> crate::error::JsError {
    invalid(format!(
        "this thread already holds {MAX_LIVE_HANDLES} live {what}s; release some first"
    ))
}

/// Registers a user of an allocator; its number.
pub(crate) fn register_allocator(entry: AllocatorEntry) -> Result<f64> {
    flush_pending();
    match ALLOCATORS.with(|t| t.borrow_mut().insert(entry)) {
        Some(h) => Ok(h),
        None => Err(too_many("allocator handle")),
    }
}

/// Registers a stream; its number.
pub(crate) fn register_stream(entry: StreamEntry) -> Result<f64> {
    flush_pending();
    match STREAMS.with(|t| t.borrow_mut().insert(entry)) {
        Some(h) => Ok(h),
        None => Err(too_many("stream")),
    }
}

/// Runs `f` on the allocator named `handle`, or fails with `ERR_ARENA_RELEASED`.
#[inline]
pub(crate) fn with_allocator<T>(
    handle: f64,
    f: impl FnOnce(&AllocatorEntry) -> Result<T>,
) -> Result<T> {
    ALLOCATORS.with(|t| {
        let t = t
            .try_borrow()
            .map_err(|_| invalid("the allocator table is busy"))?;
        match t.get(handle) {
            Some(e) => f(e),
            None => Err(released("the allocator")),
        }
    })
}

/// Runs `f` on the stream named `handle`, or fails with `ERR_ARENA_RELEASED`.
#[inline]
pub(crate) fn with_stream<T>(handle: f64, f: impl FnOnce(&StreamEntry) -> Result<T>) -> Result<T> {
    STREAMS.with(|t| {
        let t = t
            .try_borrow()
            .map_err(|_| invalid("the stream table is busy"))?;
        match t.get(handle) {
            Some(e) => f(e),
            None => Err(released("the stream")),
        }
    })
}

/// Checks that a stream may be used with an allocator (same backend and device).
pub(crate) fn check_fits(a: &AllocatorEntry, s: &StreamEntry) -> Result<()> {
    if a.origin.backend != s.origin.backend {
        return Err(invalid(format!(
            "the stream belongs to the {} backend and the allocator to the {} backend",
            s.origin.backend, a.origin.backend
        )));
    }
    if a.origin.device != s.origin.device {
        return Err(invalid(format!(
            "the stream is on device {} and the allocator on device {}",
            s.origin.device, a.origin.device
        )));
    }
    Ok(())
}

/// `allocOnStream`: the allocator named `allocator` allocates `size` bytes on the stream
/// named `stream`.
#[inline]
pub(crate) fn alloc_on_stream(allocator: f64, stream: f64, size: u64) -> Result<Option<u64>> {
    with_allocator(allocator, |a| {
        with_stream(stream, |s| {
            check_fits(a, s)?;
            a.allocator
                .alloc_on_stream(size, s.stream())
                .map_err(crate::error::js)
        })
    })
}

/// Releases the user named `handle` through `factory` (which must have made it).
pub(crate) fn release_allocator(handle: f64, factory: &Arc<Factory>) -> Result<Released> {
    flush_pending();
    let entry = ALLOCATORS.with(|t| {
        let mut t = t
            .try_borrow_mut()
            .map_err(|_| invalid("the allocator table is busy"))?;
        match t.get(handle) {
            None => Err(released("the allocator")),
            Some(e) if !Arc::ptr_eq(&e.factory, factory) => {
                Err(invalid("the allocator was made by another factory"))
            }
            Some(_) => t.remove(handle).ok_or_else(|| released("the allocator")),
        }
    })?;
    // Outside the table's borrow: a release may retire the allocator and drop streams.
    Ok(entry.factory.release_allocator(&entry.allocator))
}

/// Releases the stream named `handle` (its chunks are reset in every allocator that used it).
pub(crate) fn release_stream(handle: f64) -> Result<()> {
    flush_pending();
    let entry = STREAMS.with(|t| {
        t.try_borrow_mut()
            .map_err(|_| invalid("the stream table is busy"))?
            .remove(handle)
            .ok_or_else(|| released("the stream"))
    })?;
    drop(entry);
    Ok(())
}

/// A finalizer's release: quiet if `handle` was released already (or at thread exit); put
/// off if the table is in use right now.
pub(crate) fn finalize(is_allocator: bool, handle: f64) {
    let done = if is_allocator {
        ALLOCATORS.try_with(|t| match t.try_borrow_mut() {
            Ok(mut t) => {
                let entry = t.remove(handle);
                drop(t);
                if let Some(e) = entry {
                    e.factory.release_allocator(&e.allocator);
                }
                true
            }
            Err(_) => false,
        })
    } else {
        STREAMS.try_with(|t| match t.try_borrow_mut() {
            Ok(mut t) => {
                let entry = t.remove(handle);
                drop(t);
                drop(entry);
                true
            }
            Err(_) => false,
        })
    };
    if done == Ok(false) {
        let _ = PENDING.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                p.push((is_allocator, handle));
            }
        });
    }
}

fn flush_pending() {
    let pending = PENDING.with(|p| p.try_borrow_mut().map(|mut p| std::mem::take(&mut *p)));
    for (is_allocator, handle) in pending.unwrap_or_default() {
        finalize(is_allocator, handle);
    }
}

/// Releases every allocator user and stream of this thread: the environment is going away.
pub(crate) fn release_all() {
    flush_pending();
    let allocators = ALLOCATORS
        .try_with(|t| {
            t.try_borrow_mut()
                .map(|mut t| t.drain())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    for e in allocators {
        e.factory.release_allocator(&e.allocator);
    }
    let streams = STREAMS
        .try_with(|t| {
            t.try_borrow_mut()
                .map(|mut t| t.drain())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    drop(streams);
}

/// Live entries of this thread: `(allocator users, streams)`.
pub(crate) fn live_counts() -> (usize, usize) {
    (
        ALLOCATORS.with(|t| t.borrow().live),
        STREAMS.with(|t| t.borrow().live),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_handle_names_nothing_even_when_its_slot_is_reused() {
        let mut t = Table::new();
        let a = t.insert("a").expect("room");
        assert_eq!(t.remove(a), Some("a"));
        let b = t.insert("b").expect("room");
        assert_ne!(a, b, "the slot's generation moved on");
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None, "a second release does not take b");
        assert_eq!(t.get(b), Some(&"b"));
    }

    #[test]
    fn numbers_that_are_not_handles_name_nothing() {
        let mut t = Table::new();
        let a = t.insert(1).expect("room");
        for bad in [
            0.0,
            -a,
            a + 0.5,
            f64::NAN,
            f64::INFINITY,
            2f64.powi(53),
            1e300,
        ] {
            assert_eq!(t.get(bad), None, "{bad}");
        }
        assert_eq!(t.get(a), Some(&1));
    }

    #[test]
    fn a_slot_is_retired_before_its_generation_wraps() {
        let mut t = Table::new();
        t.insert(0u8).expect("room");
        // As if the slot had been reused 2^32 - 1 times.
        t.slots[0].generation = u32::MAX;
        assert_eq!(t.remove(Table::<u8>::encode(0, u32::MAX)), Some(0));
        assert!(t.vacant.is_empty(), "the slot is not reused");
        let next = t.insert(2).expect("room");
        assert_eq!(Table::<u8>::decode(next).map(|d| d.0), Some(1));
    }
}
