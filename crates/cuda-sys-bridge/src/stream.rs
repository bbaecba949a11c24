//! CUDA streams with ORT's sync-id clock: `record()` records a CUDA event and bumps the
//! stream's sync id; `wait(ev)` makes the stream wait on the event on the GPU and remembers
//! the producer's sync id for the arena.

use crate::device::DeviceContext;
use crate::driver;
use arena_core::{Result, Stream, StreamEvent};
use std::sync::Arc;

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
        Ok(CudaStream { ctx, logical: Stream::with_native(driver::stream_to_u64(s)) })
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
        let handle = Arc::new(EventHandle { ctx: self.ctx.clone(), ev: ev as usize });
        driver::event_record(ev, self.raw())?;
        Ok(CudaEvent { handle, logical: self.logical.record() })
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
        // Pending work completes first; the driver releases the stream after it.
        if self.ctx.make_current().is_ok() {
            let _ = driver::stream_destroy(self.raw());
        }
    }
}
