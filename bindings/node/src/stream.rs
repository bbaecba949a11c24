//! Streams: a logical stream with ORT's sync-id clock on `host` and `virtual`.

use crate::error::{released, Result};
use arena_core::{Stream, StreamEvent};
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;

/// A stream handle.
#[napi]
pub struct NativeStream {
    inner: Option<Stream>,
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
    pub(crate) inner: StreamEvent,
}

impl NativeStream {
    pub fn new(device_id: u32) -> Self {
        let stream = Stream::new();
        let handle = crate::fast::register_stream(stream.clone());
        NativeStream {
            inner: Some(stream),
            device_id,
            handle,
        }
    }

    pub fn get(&self) -> Result<&Stream> {
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

    #[napi(catch_unwind)]
    pub fn record(&self) -> Result<NativeEvent> {
        Ok(NativeEvent {
            inner: self.get()?.record(),
        })
    }

    #[napi(catch_unwind)]
    pub fn wait(&self, event: &NativeEvent) -> Result<()> {
        self.get()?.wait(&event.inner);
        Ok(())
    }

    /// Work on host and virtual streams completes immediately: nothing to wait for.
    #[napi(catch_unwind)]
    pub fn synchronize(&self) -> Result<()> {
        self.get().map(|_| ())
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
        BigInt::from(self.inner.sync_id())
    }
}
