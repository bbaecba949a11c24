//! CUDA streams with ORT's sync-id clock: `record()` records a CUDA event and bumps the
//! stream's sync id; `wait(ev)` makes the stream wait on the event on the GPU and remembers
//! the producer's sync id for the arena.

use crate::device::DeviceContext;
use crate::driver;
use cuda_arena_core::{ArenaError, Result, Stream, StreamEvent};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

/// The `CUstream`s that exist now. An allocation remembers the stream it was made on; if the
/// user destroys that stream first (its work is finished then: the stream is synchronized
/// before it is destroyed), the allocation is freed on the legacy stream instead of on a
/// dangling handle.
static LIVE: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// Runs `op` with the `CUstream` for `native` (0: the legacy stream; a destroyed stream: the
/// legacy stream), holding the registry so the stream cannot be destroyed meanwhile.
pub(crate) fn with_stream<T>(native: u64, op: impl FnOnce(driver::CUstream) -> T) -> T {
    let live = LIVE.lock();
    let usable = native != 0 && live.as_ref().is_some_and(|s| s.contains(&native));
    op(driver::stream_from_u64(if usable { native } else { 0 }))
}

/// Checks that `native` is 0 or a live stream (for allocating on it).
pub(crate) fn check_live(native: u64) -> Result<()> {
    if native == 0 || LIVE.lock().as_ref().is_some_and(|s| s.contains(&native)) {
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
        if self.ctx.make_current().is_ok() {
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
    pub(crate) fn new(ctx: Arc<DeviceContext>) -> Result<Self> {
        ctx.make_current()?;
        let s = driver::stream_create()?;
        let native = driver::stream_to_u64(s);
        LIVE.lock().get_or_insert_with(HashSet::new).insert(native);
        Ok(CudaStream {
            ctx,
            logical: Stream::with_native(native),
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
        self.ctx.make_current()?;
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
        self.ctx.make_current()?;
        driver::stream_wait_event(self.raw(), event.handle.ev as driver::CUevent)?;
        self.logical.wait(&event.logical);
        Ok(())
    }

    /// Waits on the host until the stream's work is done.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.make_current()?;
        driver::stream_synchronize(self.raw())
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let native = self.logical.native();
        let mut live = LIVE.lock();
        if let Some(s) = live.as_mut() {
            s.remove(&native);
        }
        // Finish the stream's work first, so allocations made on it can then be freed on the
        // legacy stream (see LIVE).
        if self.ctx.make_current().is_ok() {
            let _ = driver::stream_synchronize(self.raw());
            let _ = driver::stream_destroy(self.raw());
        }
    }
}
