//! arena-core's [`StreamEvents`] over the driver (issue 13): pooled `CUevent`s (timing
//! disabled) recorded on streams the host owns and queried without blocking, so a chunk
//! freed on one stream comes free for others once the stream's work up to the free is done.
//! The pool keeps at most [`IDLE_EVENTS_KEPT`] idle events per device; arena-core keeps at
//! most a few recorded per stream, so the events alive stay bounded.

use crate::device::DeviceContext;
use crate::driver;
use cuda_arena_core::{Result, StreamEvents};
use parking_lot::Mutex;
use std::sync::Arc;

/// Idle events a device keeps for reuse; more are destroyed when handed back.
pub const IDLE_EVENTS_KEPT: usize = 256;

/// Pooled events of one device.
#[derive(Debug)]
pub struct CudaEvents {
    ctx: Arc<DeviceContext>,
    /// Idle `CUevent`s, as integers so the type is `Send + Sync`.
    idle: Mutex<Vec<usize>>,
}

impl CudaEvents {
    pub(crate) fn new(ctx: Arc<DeviceContext>) -> Self {
        CudaEvents {
            ctx,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle event, or a new one. The pool's lock is not held across the driver call.
    fn take(&self) -> Result<driver::CUevent> {
        if let Some(ev) = self.idle.lock().pop() {
            return Ok(ev as driver::CUevent);
        }
        driver::event_create()
    }

    /// Idle events now in the pool.
    pub fn idle(&self) -> usize {
        self.idle.lock().len()
    }
}

impl StreamEvents for CudaEvents {
    fn record(&self, stream: u64) -> Result<u64> {
        let _current = self.ctx.make_current()?;
        let ev = self.take()?;
        match driver::event_record(ev, driver::stream_from_u64(stream)) {
            Ok(()) => Ok(ev as usize as u64),
            Err(e) => {
                self.release(ev as usize as u64);
                Err(e)
            }
        }
    }

    fn rerecord(&self, event: u64, stream: u64) -> Result<()> {
        let _current = self.ctx.make_current()?;
        driver::event_record(
            event as usize as driver::CUevent,
            driver::stream_from_u64(stream),
        )
    }

    fn is_done(&self, event: u64) -> Result<bool> {
        let _current = self.ctx.make_current()?;
        driver::event_query(event as usize as driver::CUevent)
    }

    fn synchronize(&self, event: u64) -> Result<()> {
        let _current = self.ctx.make_current()?;
        driver::event_synchronize(event as usize as driver::CUevent)?;
        self.ctx.count_stream_wait();
        Ok(())
    }

    fn stream_wait(&self, stream: u64, event: u64) -> Result<()> {
        let _current = self.ctx.make_current()?;
        driver::stream_wait_event(
            driver::stream_from_u64(stream),
            event as usize as driver::CUevent,
        )
    }

    fn release(&self, event: u64) {
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_EVENTS_KEPT {
            idle.push(event as usize);
            return;
        }
        drop(idle);
        if let Ok(_current) = self.ctx.make_current() {
            // An event may be destroyed while pending; nothing to report from here.
            let _ = driver::event_destroy(event as usize as driver::CUevent);
        }
    }

    fn synchronize_device(&self) -> Result<()> {
        let _current = self.ctx.make_current()?;
        self.ctx.synchronize()
    }

    fn stream_identity(&self, stream: u64) -> Option<u64> {
        // The legacy and per-thread default streams are one stream each for the process.
        if stream <= 2 {
            return Some(stream);
        }
        // Any other handle names its own context, so none is made current: this runs on
        // every allocation on a host stream, and the check would cost a driver call more.
        driver::stream_get_id(driver::stream_from_u64(stream)).ok()
    }
}

impl Drop for CudaEvents {
    fn drop(&mut self) {
        if let Ok(_current) = self.ctx.make_current() {
            for ev in self.idle.get_mut().drain(..) {
                let _ = driver::event_destroy(ev as driver::CUevent);
            }
        }
    }
}
