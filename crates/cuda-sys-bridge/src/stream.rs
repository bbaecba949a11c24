//! CUDA streams with ORT's sync-id clock: `record()` records a CUDA event and bumps the
//! stream's sync id; `wait(ev)` makes the stream wait on the event on the GPU and remembers
//! the producer's sync id for the arena.
//!
//! Two kinds of stream reach the allocators (issue 13). Streams cuda-arena made
//! ([`CudaStream`]) are tracked in a registry, so that an allocation still tagged with one the
//! user has destroyed is freed on the legacy stream instead of on a dangling handle (the
//! stream's work is finished then: it is synchronized before it is destroyed). Streams the
//! host owns (a caller's `CUstream`, PyTorch's, ORT's) are used exactly as given: the host
//! keeps them valid until it resets them (`cuda_arena_reset_stream`), after which the
//! allocators tag nothing with them.

use crate::device::DeviceContext;
use crate::driver;
use cuda_arena_core::{ArenaError, Result, Stream, StreamEvent, StreamEvents};
use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::Arc;

/// The `CUstream`s cuda-arena made that exist now. Read-locked while a call uses one (threads
/// on different streams do not queue), write-locked only to add or remove one.
static LIVE: RwLock<Option<HashSet<u64>>> = RwLock::new(None);

/// Runs `op` with the `CUstream` for `native`: a host-owned stream as given (the null stream
/// is the null stream); one cuda-arena made while it exists, else the legacy stream (0), and
/// held in the registry meanwhile so it cannot be destroyed during the call.
pub(crate) fn with_stream<T>(
    native: u64,
    host_owned: bool,
    op: impl FnOnce(driver::CUstream) -> T,
) -> T {
    if host_owned || native == 0 {
        return op(driver::stream_from_u64(native));
    }
    let live = LIVE.read();
    let usable = live.as_ref().is_some_and(|s| s.contains(&native));
    op(driver::stream_from_u64(if usable { native } else { 0 }))
}

/// Checks, before allocating on it, that `native` is a stream the host owns (it vouches for
/// it), the null stream, or a stream cuda-arena made that still exists.
pub(crate) fn check_live(native: u64, host_owned: bool) -> Result<()> {
    if host_owned || native == 0 || LIVE.read().as_ref().is_some_and(|s| s.contains(&native)) {
        Ok(())
    } else {
        Err(ArenaError::Released {
            what: "the stream".into(),
        })
    }
}

/// A `CUstream` on one device, with the logical stream the arena sees.
#[derive(Debug)]
pub struct CudaStream {
    ctx: Arc<DeviceContext>,
    logical: Stream,
}

#[derive(Debug)]
struct EventHandle {
    ctx: Arc<DeviceContext>,
    ev: usize,
}

impl Drop for EventHandle {
    fn drop(&mut self) {
        if let Ok(_current) = self.ctx.make_current() {
            let _ = driver::event_destroy(self.ev as driver::CUevent);
        }
    }
}

/// A recorded point on a [`CudaStream`].
#[derive(Debug, Clone)]
pub struct CudaEvent {
    handle: Arc<EventHandle>,
    logical: StreamEvent,
}

impl CudaEvent {
    /// The producer's sync id at this event.
    pub fn sync_id(&self) -> u64 {
        self.logical.sync_id()
    }
}

impl CudaStream {
    /// A new stream on `ctx`'s device whose frees `events` (the device's) cover, so that what
    /// it frees comes free for other streams once its work up to the free is done (issue 25).
    pub(crate) fn new(ctx: Arc<DeviceContext>, events: Arc<dyn StreamEvents>) -> Result<Self> {
        let _current = ctx.make_current()?;
        let s = driver::stream_create()?;
        let native = driver::stream_to_u64(s);
        LIVE.write().get_or_insert_with(HashSet::new).insert(native);
        Ok(CudaStream {
            ctx,
            logical: Stream::with_events(native, events),
        })
    }

    fn raw(&self) -> driver::CUstream {
        driver::stream_from_u64(self.logical.native())
    }

    /// The stream as arena-core sees it (its `native()` is the `CUstream`).
    pub fn logical(&self) -> &Stream {
        &self.logical
    }

    /// Device ordinal.
    pub fn device_id(&self) -> u32 {
        self.ctx.ordinal
    }

    /// Records an event on the stream and bumps its sync id.
    pub fn record(&self) -> Result<CudaEvent> {
        let _current = self.ctx.make_current()?;
        let ev = driver::event_create()?;
        let handle = Arc::new(EventHandle {
            ctx: self.ctx.clone(),
            ev: ev as usize,
        });
        driver::event_record(ev, self.raw())?;
        Ok(CudaEvent {
            handle,
            logical: self.logical.record(),
        })
    }

    /// Makes this stream wait for `event` on the GPU, and for the arena.
    pub fn wait(&self, event: &CudaEvent) -> Result<()> {
        let _current = self.ctx.make_current()?;
        driver::stream_wait_event(self.raw(), event.handle.ev as driver::CUevent)?;
        self.logical.wait(&event.logical);
        Ok(())
    }

    /// Waits on the host until the stream's work is done.
    pub fn synchronize(&self) -> Result<()> {
        let _current = self.ctx.make_current()?;
        driver::stream_synchronize(self.raw())
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let native = self.logical.native();
        // Out of the registry first: a call that starts now frees on the legacy stream, and
        // the write lock waits for calls using the stream to finish.
        if let Some(s) = LIVE.write().as_mut() {
            s.remove(&native);
        }
        // Finish the stream's work first, so allocations made on it can then be freed on the
        // legacy stream (see LIVE).
        if let Ok(_current) = self.ctx.make_current() {
            let events = self.logical.free_events();
            // No thread records on the handle from here on (an allocator polling the stream's
            // frees records only while it may): after the destroy the driver may give its
            // value to another stream.
            let marked = events.map(|f| {
                f.set_host_may_destroy();
                f.marked()
            });
            if driver::stream_synchronize(self.raw()).is_ok() {
                if let (Some(f), Some(label)) = (events, marked) {
                    // Every free so far is done. (A thread recording on the stream now holds
                    // the events' lock, which this waits for, before the destroy.)
                    f.complete_through(label);
                }
            }
            let _ = driver::stream_destroy(self.raw());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 13: a `CUstream` the host created (torch's, ORT's, a C caller's) is used as
    /// given; before, any stream cuda-arena had not created was refused for allocation
    /// (`ERR_ARENA_RELEASED`) and replaced by the null stream for frees.
    #[test]
    fn a_stream_the_host_owns_is_used_as_given() {
        let host_stream = 0x7f00_dead_0000u64;
        assert!(
            check_live(host_stream, true).is_ok(),
            "allocating on it is allowed"
        );
        let used = with_stream(host_stream, true, driver::stream_to_u64);
        assert_eq!(used, host_stream, "a free goes to the stream itself");
    }

    #[test]
    fn a_stream_cuda_arena_made_and_destroyed_is_replaced_by_the_legacy_stream() {
        let gone = 0x7f00_beef_0000u64;
        assert_eq!(
            check_live(gone, false).map_err(|e| e.code()),
            Err("ERR_ARENA_RELEASED")
        );
        assert_eq!(with_stream(gone, false, driver::stream_to_u64), 0);
    }
}
