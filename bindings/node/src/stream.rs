//! Streams: a `CUstream` with events on `cuda`, a logical stream on `host` and `virtual`;
//! both carry ORT's sync-id clock.

use crate::error::{invalid, js, released, Result};
use cuda_arena_core::{Stream, StreamEvent};
use cuda_sys_bridge::{CudaEvent, CudaStream};
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;

enum Kind {
    Logical(Stream),
    Cuda(CudaStream),
}

enum EventKind {
    Logical(StreamEvent),
    Cuda(CudaEvent),
}

/// A stream handle.
#[napi]
pub struct NativeStream {
    inner: Option<Kind>,
    device_id: u32,
    /// This thread's fast-path handle.
    handle: u32,
}

impl Drop for NativeStream {
    fn drop(&mut self) {
        crate::fast::unregister_stream(self.handle);
    }
}

/// A point recorded on a stream.
#[napi]
pub struct NativeEvent {
    inner: EventKind,
}

impl NativeStream {
    /// A logical stream (host and virtual backends).
    pub fn logical(device_id: u32) -> Self {
        Self::wrap(Kind::Logical(Stream::new()), device_id)
    }

    /// A CUDA stream.
    pub fn cuda(stream: CudaStream) -> Self {
        let device_id = stream.device_id();
        Self::wrap(Kind::Cuda(stream), device_id)
    }

    fn wrap(kind: Kind, device_id: u32) -> Self {
        let logical = match &kind {
            Kind::Logical(s) => s.clone(),
            Kind::Cuda(c) => c.logical().clone(),
        };
        let handle = crate::fast::register_stream(logical);
        NativeStream {
            inner: Some(kind),
            device_id,
            handle,
        }
    }

    /// The stream as the arena sees it.
    pub fn get(&self) -> Result<&Stream> {
        match self.inner.as_ref().ok_or_else(|| released("the stream"))? {
            Kind::Logical(s) => Ok(s),
            Kind::Cuda(c) => Ok(c.logical()),
        }
    }

    fn kind(&self) -> Result<&Kind> {
        self.inner.as_ref().ok_or_else(|| released("the stream"))
    }
}

#[napi]
impl NativeStream {
    #[napi(catch_unwind)]
    pub fn id(&self) -> Result<BigInt> {
        Ok(BigInt::from(self.get()?.id()))
    }

    #[napi(catch_unwind)]
    pub fn device_id(&self) -> u32 {
        self.device_id
    }

    #[napi(catch_unwind)]
    pub fn sync_id(&self) -> Result<BigInt> {
        Ok(BigInt::from(self.get()?.sync_id()))
    }

    /// Records an event (a CUDA event on `cuda`) and bumps the sync id.
    #[napi(catch_unwind)]
    pub fn record(&self) -> Result<NativeEvent> {
        Ok(NativeEvent {
            inner: match self.kind()? {
                Kind::Logical(s) => EventKind::Logical(s.record()),
                Kind::Cuda(c) => EventKind::Cuda(c.record().map_err(js)?),
            },
        })
    }

    /// Makes this stream wait for `event` (on the GPU on `cuda`).
    #[napi(catch_unwind)]
    pub fn wait(&self, event: &NativeEvent) -> Result<()> {
        match (self.kind()?, &event.inner) {
            (Kind::Logical(s), EventKind::Logical(e)) => {
                s.wait(e);
                Ok(())
            }
            (Kind::Cuda(s), EventKind::Cuda(e)) => s.wait(e).map_err(js),
            _ => Err(invalid("the event comes from a stream of another backend")),
        }
    }

    /// Waits on the host for the stream's work (nothing to wait for on host and virtual).
    #[napi(catch_unwind)]
    pub fn synchronize(&self) -> Result<()> {
        match self.kind()? {
            Kind::Logical(_) => Ok(()),
            Kind::Cuda(c) => c.synchronize().map_err(js),
        }
    }

    #[napi(catch_unwind)]
    pub fn release(&mut self) -> Result<()> {
        self.inner.take().ok_or_else(|| released("the stream"))?;
        crate::fast::unregister_stream(self.handle);
        Ok(())
    }

    /// This thread's fast-path handle number.
    #[napi(catch_unwind)]
    pub fn handle(&self) -> u32 {
        self.handle
    }
}

#[napi]
impl NativeEvent {
    #[napi(catch_unwind)]
    pub fn sync_id(&self) -> BigInt {
        BigInt::from(match &self.inner {
            EventKind::Logical(e) => e.sync_id(),
            EventKind::Cuda(e) => e.sync_id(),
        })
    }
}
