//! An allocator handle: one user of a shared allocator (or a plain read-only one).

use crate::bigint::U64Arg;
use crate::convert::{addr_arg, size_arg, size_num, JsMemoryLog, JsStats};
use crate::error::{js, released, Result};
use crate::stream::NativeStream;
use cuda_arena_core::{Allocator, Factory};
use napi::bindgen_prelude::{Buffer, Uint8Array};
use napi_derive::napi;
use std::sync::Arc;

/// A handle on an allocator; `release` hands it back to its factory.
#[napi]
pub struct NativeAllocator {
    inner: Option<Arc<dyn Allocator>>,
    factory: Arc<Factory>,
    /// This thread's fast-path handle for `inner`.
    handle: u32,
}

impl Drop for NativeAllocator {
    fn drop(&mut self) {
        crate::fast::unregister_allocator(self.handle);
    }
}

impl NativeAllocator {
    /// A handle on `allocator`, registered for this thread's fast path.
    pub(crate) fn new(allocator: Arc<dyn Allocator>, factory: Arc<Factory>) -> Self {
        let handle = crate::fast::register_allocator(allocator.clone());
        NativeAllocator {
            inner: Some(allocator),
            factory,
            handle,
        }
    }

    fn get(&self) -> Result<&Arc<dyn Allocator>> {
        self.inner.as_ref().ok_or_else(|| released("the allocator"))
    }

    /// The allocator, for native loops in this crate.
    pub(crate) fn shared(&self) -> Result<&Arc<dyn Allocator>> {
        self.get()
    }

    /// Takes the allocator out of this handle (release); the handle is unusable after.
    pub(crate) fn take(&mut self) -> Result<Arc<dyn Allocator>> {
        let a = self.inner.take().ok_or_else(|| released("the allocator"))?;
        crate::fast::unregister_allocator(self.handle);
        Ok(a)
    }
}

#[napi]
impl NativeAllocator {
    /// `alloc` for a size given as a JS number (the common, allocation-free path).
    #[napi(catch_unwind)]
    pub fn alloc(&self, size: f64) -> Result<Option<u64>> {
        let size = size_num("size", size)?;
        self.get()?.alloc(size).map_err(js)
    }

    /// `alloc` for a size given as a bigint.
    #[napi(catch_unwind, ts_args_type = "size: bigint")]
    pub fn alloc_big(&self, size: U64Arg) -> Result<Option<u64>> {
        let size = size_arg("size", size)?;
        self.get()?.alloc(size).map_err(js)
    }

    #[napi(catch_unwind, ts_args_type = "size: bigint, stream: NativeStream")]
    pub fn alloc_on_stream(&self, size: U64Arg, stream: &NativeStream) -> Result<Option<u64>> {
        let size = size_arg("size", size)?;
        self.get()?.alloc_on_stream(size, stream.get()?).map_err(js)
    }

    #[napi(catch_unwind, ts_args_type = "size: bigint")]
    pub fn reserve(&self, size: U64Arg) -> Result<Option<u64>> {
        let size = size_arg("size", size)?;
        self.get()?.reserve(size).map_err(js)
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint")]
    pub fn free(&self, addr: U64Arg) -> Result<()> {
        let addr = addr_arg(addr)?;
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
            cuda_arena_core::AllocatorType::Device => "device",
            cuda_arena_core::AllocatorType::ReadOnly => "readonly",
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

    #[napi(catch_unwind, ts_args_type = "addr: bigint")]
    pub fn allocated_size(&self, addr: U64Arg) -> Result<u64> {
        let addr = addr_arg(addr)?;
        self.get()?.allocated_size(addr).map_err(js)
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint")]
    pub fn requested_size(&self, addr: U64Arg) -> Result<u64> {
        let addr = addr_arg(addr)?;
        self.get()?.requested_size(addr).map_err(js)
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint, data: Uint8Array")]
    pub fn write(&self, addr: U64Arg, data: Uint8Array) -> Result<()> {
        let addr = addr_arg(addr)?;
        self.get()?.write(addr, &data).map_err(js)
    }

    /// Reads `len` bytes at `addr` into a new buffer (the TS layer copies it out). The
    /// buffer is zero-allocated (lazily mapped), and the read checks the range first.
    #[napi(catch_unwind, ts_args_type = "addr: bigint, len: bigint")]
    pub fn read(&self, addr: U64Arg, len: U64Arg) -> Result<Buffer> {
        const MAX_READ: u64 = 1 << 32;
        let addr = addr_arg(addr)?;
        let len = size_arg("length", len)?;
        if len > MAX_READ {
            return Err(crate::error::invalid(format!(
                "length {len} is larger than a Node buffer can be"
            )));
        }
        let mut out = vec![0u8; len as usize];
        self.get()?.read(addr, &mut out).map_err(js)?;
        Ok(out.into())
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint, byte: number, len: bigint")]
    pub fn fill(&self, addr: U64Arg, byte: u8, len: U64Arg) -> Result<()> {
        let addr = addr_arg(addr)?;
        let len = size_arg("length", len)?;
        self.get()?.fill(addr, byte, len).map_err(js)
    }

    /// This thread's fast-path handle number.
    #[napi(catch_unwind)]
    pub fn handle(&self) -> u32 {
        self.handle
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
