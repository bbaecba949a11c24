//! An allocator handle: one user of a shared allocator (or a plain read-only one).

use crate::convert::{addr_arg, size_arg, JsMemoryLog, JsStats};
use crate::error::{js, released, Result};
use crate::stream::NativeStream;
use arena_core::{Allocator, Factory};
use napi::bindgen_prelude::{BigInt, Buffer, Uint8Array};
use napi_derive::napi;
use std::sync::Arc;

/// A handle on an allocator; `release` hands it back to its factory.
#[napi]
pub struct NativeAllocator {
    pub(crate) inner: Option<Arc<dyn Allocator>>,
    pub(crate) factory: Arc<Factory>,
}

fn opt_addr(a: Option<u64>) -> Option<BigInt> {
    a.map(BigInt::from)
}

impl NativeAllocator {
    fn get(&self) -> Result<&Arc<dyn Allocator>> {
        self.inner.as_ref().ok_or_else(|| released("the allocator"))
    }

    /// Takes the allocator out of this handle (release); the handle is unusable after.
    pub(crate) fn take(&mut self) -> Result<Arc<dyn Allocator>> {
        self.inner.take().ok_or_else(|| released("the allocator"))
    }
}

#[napi]
impl NativeAllocator {
    #[napi(catch_unwind)]
    pub fn alloc(&self, size: BigInt) -> Result<Option<BigInt>> {
        let size = size_arg("size", &size)?;
        self.get()?.alloc(size).map(opt_addr).map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn alloc_on_stream(&self, size: BigInt, stream: &NativeStream) -> Result<Option<BigInt>> {
        let size = size_arg("size", &size)?;
        self.get()?
            .alloc_on_stream(size, stream.get()?)
            .map(opt_addr)
            .map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn reserve(&self, size: BigInt) -> Result<Option<BigInt>> {
        let size = size_arg("size", &size)?;
        self.get()?.reserve(size).map(opt_addr).map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn free(&self, addr: BigInt) -> Result<()> {
        let addr = addr_arg(&addr)?;
        self.get()?.free(addr).map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn is_stream_aware(&self) -> Result<bool> {
        Ok(self.get()?.is_stream_aware())
    }

    #[napi(catch_unwind)]
    pub fn can_shrink(&self) -> Result<bool> {
        Ok(self.get()?.can_shrink())
    }

    #[napi(catch_unwind)]
    pub fn shrink(&self) -> Result<()> {
        self.get()?.shrink().map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn reset_chunks_using_stream(&self, stream: &NativeStream) -> Result<()> {
        self.get()?
            .reset_chunks_using_stream(stream.get()?)
            .map_err(js)
    }

    /// `[name, deviceId, type]` of the memory served.
    #[napi(catch_unwind)]
    pub fn info(&self) -> Result<Vec<String>> {
        let i = self.get()?.info();
        let ty = match i.allocator_type {
            arena_core::AllocatorType::Device => "device",
            arena_core::AllocatorType::ReadOnly => "readonly",
        };
        Ok(vec![
            i.kind.name().to_string(),
            i.device_id.to_string(),
            ty.to_string(),
        ])
    }

    #[napi(catch_unwind)]
    pub fn stats(&self) -> Result<JsStats> {
        Ok(self.get()?.stats().into())
    }

    /// ORT's `GetStats` pairs: `[key, value]`, in ORT's order.
    #[napi(catch_unwind)]
    pub fn stats_raw(&self) -> Result<Vec<Vec<String>>> {
        Ok(self
            .get()?
            .stats()
            .to_pairs()
            .into_iter()
            .map(|(k, v)| vec![k.to_string(), v])
            .collect())
    }

    #[napi(catch_unwind)]
    pub fn memory_log(&self) -> Result<JsMemoryLog> {
        Ok(self.get()?.memory_log().into())
    }

    #[napi(catch_unwind)]
    pub fn allocated_size(&self, addr: BigInt) -> Result<BigInt> {
        let addr = addr_arg(&addr)?;
        self.get()?
            .allocated_size(addr)
            .map(BigInt::from)
            .map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn requested_size(&self, addr: BigInt) -> Result<BigInt> {
        let addr = addr_arg(&addr)?;
        self.get()?
            .requested_size(addr)
            .map(BigInt::from)
            .map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn write(&self, addr: BigInt, data: Uint8Array) -> Result<()> {
        let addr = addr_arg(&addr)?;
        self.get()?.write(addr, &data).map_err(js)
    }

    /// Reads `len` bytes at `addr` into a new buffer (the TS layer copies it out). The
    /// buffer is zero-allocated (lazily mapped), and the read checks the range first.
    #[napi(catch_unwind)]
    pub fn read(&self, addr: BigInt, len: BigInt) -> Result<Buffer> {
        const MAX_READ: u64 = 1 << 32;
        let addr = addr_arg(&addr)?;
        let len = size_arg("length", &len)?;
        if len > MAX_READ {
            return Err(crate::error::invalid(format!(
                "length {len} is larger than a Node buffer can be"
            )));
        }
        let mut out = vec![0u8; len as usize];
        self.get()?.read(addr, &mut out).map_err(js)?;
        Ok(out.into())
    }

    #[napi(catch_unwind)]
    pub fn fill(&self, addr: BigInt, byte: u8, len: BigInt) -> Result<()> {
        let addr = addr_arg(&addr)?;
        let len = size_arg("length", &len)?;
        self.get()?.fill(addr, byte, len).map_err(js)
    }

    /// Whether this handle was released.
    #[napi(catch_unwind)]
    pub fn is_released(&self) -> bool {
        self.inner.is_none()
    }

    pub(crate) fn factory(&self) -> &Arc<Factory> {
        &self.factory
    }
}
