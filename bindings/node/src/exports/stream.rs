//! Streams: a `CUstream` with events on `cuda`, a logical stream on `host` and `virtual`;
//! both carry ORT's sync-id clock. A `NativeStream` holds only its number in this thread's
//! handle table (`handles.rs`); releasing it, or its collection, drops the stream, which
//! resets its chunks in every allocator that used it.

use crate::error::{invalid, js, Result};
use crate::handles::{self, Origin, StreamEntry, StreamKind};
use cuda_arena_core::{Stream, StreamEvent};
use cuda_sys_bridge::{CudaEvent, CudaStream};
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;

enum EventKind {
    Logical(StreamEvent),
    Cuda(CudaEvent),
}

/// A stream handle.
#[napi]
pub struct NativeStream {
    handle: f64,
    device_id: u32,
}

impl Drop for NativeStream {
    fn drop(&mut self) {
        handles::finalize(false, self.handle);
    }
}

/// A point recorded on a stream.
#[napi]
pub struct NativeEvent {
    inner: EventKind,
}

impl NativeStream {
    /// A logical stream (host and virtual backends) of `backend`.
    pub fn logical(backend: &'static str, device_id: u32) -> Result<Self> {
        Self::register(StreamKind::Logical(Stream::new()), backend, device_id)
    }

    /// A CUDA stream.
    pub fn cuda(stream: CudaStream) -> Result<Self> {
        let device_id = stream.device_id();
        Self::register(StreamKind::Cuda(stream), "cuda", device_id)
    }

    fn register(kind: StreamKind, backend: &'static str, device_id: u32) -> Result<Self> {
        let origin = Origin {
            backend,
            device: device_id,
        };
        let handle = handles::register_stream(StreamEntry { kind, origin })?;
        Ok(NativeStream { handle, device_id })
    }

    /// This handle's number in the table.
    pub(crate) fn number(&self) -> f64 {
        self.handle
    }

    fn with<T>(&self, f: impl FnOnce(&StreamEntry) -> Result<T>) -> Result<T> {
        handles::with_stream(self.handle, f)
    }
}

#[napi]
impl NativeStream {
    #[napi(catch_unwind)]
    pub fn id(&self) -> Result<BigInt> {
        self.with(|s| Ok(BigInt::from(s.stream().id())))
    }

    #[napi(catch_unwind)]
    pub fn device_id(&self) -> u32 {
        self.device_id
    }

    #[napi(catch_unwind)]
    pub fn sync_id(&self) -> Result<BigInt> {
        self.with(|s| Ok(BigInt::from(s.stream().sync_id())))
    }

    /// Records an event (a CUDA event on `cuda`) and bumps the sync id.
    #[napi(catch_unwind)]
    pub fn record(&self) -> Result<NativeEvent> {
        self.with(|s| {
            Ok(NativeEvent {
                inner: match &s.kind {
                    StreamKind::Logical(l) => EventKind::Logical(l.record()),
                    StreamKind::Cuda(c) => EventKind::Cuda(c.record().map_err(js)?),
                },
            })
        })
    }

    /// Makes this stream wait for `event` (on the GPU on `cuda`).
    #[napi(catch_unwind)]
    pub fn wait(&self, event: &NativeEvent) -> Result<()> {
        self.with(|s| match (&s.kind, &event.inner) {
            (StreamKind::Logical(s), EventKind::Logical(e)) => {
                s.wait(e);
                Ok(())
            }
            (StreamKind::Cuda(s), EventKind::Cuda(e)) => s.wait(e).map_err(js),
            _ => Err(invalid("the event comes from a stream of another backend")),
        })
    }

    /// Waits on the host for the stream's work (nothing to wait for on host and virtual).
    #[napi(catch_unwind)]
    pub fn synchronize(&self) -> Result<()> {
        self.with(|s| match &s.kind {
            StreamKind::Logical(_) => Ok(()),
            StreamKind::Cuda(c) => c.synchronize().map_err(js),
        })
    }

    /// Releases the stream: its chunks are reset in every allocator that used it.
    #[napi(catch_unwind)]
    pub fn release(&self) -> Result<()> {
        handles::release_stream(self.handle)
    }

    /// This handle's number (what the fast path is given).
    #[napi(catch_unwind)]
    pub fn handle(&self) -> f64 {
        self.handle
    }

    /// Whether this stream was released.
    #[napi(catch_unwind)]
    pub fn is_released(&self) -> bool {
        self.with(|_| Ok(())).is_err()
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
