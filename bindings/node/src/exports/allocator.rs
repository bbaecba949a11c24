//! An allocator handle: one user of a shared allocator (or a plain read-only one).

use crate::bigint::U64Arg;
use crate::convert::{addr_arg, int_arg, size_arg, size_num, JsMemoryLog, JsStats};
use crate::error::{js, Result};
use crate::handles::{self, AllocatorEntry, Origin};
use crate::stream::NativeStream;
use cuda_arena_core::{Allocator, ArenaError, Factory};
use napi::bindgen_prelude::Uint8Array;
use napi_derive::napi;
use std::sync::Arc;

/// A handle on an allocator: one user of a shared allocator (or of a plain read-only one).
/// It holds only its number; the user itself lives in this thread's handle table, which
/// releases it when the handle is released, collected, or its environment torn down.
#[napi]
pub struct NativeAllocator {
    handle: f64,
}

impl Drop for NativeAllocator {
    fn drop(&mut self) {
        // Garbage collected without a release: the user goes now (a no-op if released).
        handles::finalize(true, self.handle);
    }
}

impl NativeAllocator {
    /// Registers one user of `allocator`, made by `factory`, on this thread.
    pub(crate) fn register(allocator: Arc<dyn Allocator>, factory: Arc<Factory>) -> Result<Self> {
        let origin = Origin {
            backend: factory.backend().name(),
            device: allocator.info().device_id,
        };
        let handle = handles::register_allocator(AllocatorEntry {
            allocator,
            factory,
            origin,
        })?;
        Ok(NativeAllocator { handle })
    }

    /// Runs `f` on the allocator, or fails with `ERR_ARENA_RELEASED`.
    fn with<T>(&self, f: impl FnOnce(&dyn Allocator) -> Result<T>) -> Result<T> {
        handles::with_allocator(self.handle, |e| f(&*e.allocator))
    }

    /// The allocator, for native loops in this crate.
    pub(crate) fn shared(&self) -> Result<Arc<dyn Allocator>> {
        handles::with_allocator(self.handle, |e| Ok(e.allocator.clone()))
    }

    /// This handle's number in the table.
    pub(crate) fn number(&self) -> f64 {
        self.handle
    }
}

#[napi]
impl NativeAllocator {
    /// `alloc` for a size given as a JS number (the common, allocation-free path).
    #[napi(catch_unwind)]
    pub fn alloc(&self, size: f64) -> Result<Option<u64>> {
        let size = size_num("size", size)?;
        self.with(|a| a.alloc(size).map_err(js))
    }

    /// `alloc` for a size given as a bigint.
    #[napi(catch_unwind, ts_args_type = "size: bigint")]
    pub fn alloc_big(&self, size: U64Arg) -> Result<Option<u64>> {
        let size = size_arg("size", size)?;
        self.with(|a| a.alloc(size).map_err(js))
    }

    #[napi(catch_unwind, ts_args_type = "size: bigint, stream: NativeStream")]
    pub fn alloc_on_stream(&self, size: U64Arg, stream: &NativeStream) -> Result<Option<u64>> {
        let size = size_arg("size", size)?;
        handles::alloc_on_stream(self.handle, stream.number(), size)
    }

    #[napi(catch_unwind, ts_args_type = "size: bigint")]
    pub fn reserve(&self, size: U64Arg) -> Result<Option<u64>> {
        let size = size_arg("size", size)?;
        self.with(|a| a.reserve(size).map_err(js))
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint")]
    pub fn free(&self, addr: U64Arg) -> Result<()> {
        let addr = addr_arg(addr)?;
        self.with(|a| a.free(addr).map_err(js))
    }

    #[napi(catch_unwind)]
    pub fn is_stream_aware(&self) -> Result<bool> {
        self.with(|a| Ok(a.is_stream_aware()))
    }

    #[napi(catch_unwind)]
    pub fn can_shrink(&self) -> Result<bool> {
        self.with(|a| Ok(a.can_shrink()))
    }

    #[napi(catch_unwind)]
    pub fn shrink(&self) -> Result<()> {
        self.with(|a| a.shrink().map_err(js))
    }

    #[napi(catch_unwind)]
    pub fn reset_chunks_using_stream(&self, stream: &NativeStream) -> Result<()> {
        handles::with_allocator(self.handle, |a| {
            handles::with_stream(stream.number(), |s| {
                handles::check_fits(a, s)?;
                a.allocator
                    .reset_chunks_using_stream(s.stream())
                    .map_err(js)
            })
        })
    }

    /// `[name, deviceId, type]` of the memory served.
    #[napi(catch_unwind)]
    pub fn info(&self) -> Result<Vec<String>> {
        let i = self.with(|a| Ok(a.info()))?;
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
        self.with(|a| Ok(a.stats().into()))
    }

    /// ORT's `GetStats` pairs: `[key, value]`, in ORT's order.
    #[napi(catch_unwind)]
    pub fn stats_raw(&self) -> Result<Vec<Vec<String>>> {
        Ok(self
            .with(|a| Ok(a.stats()))?
            .to_pairs()
            .into_iter()
            .map(|(k, v)| vec![k.to_string(), v])
            .collect())
    }

    #[napi(catch_unwind)]
    pub fn memory_log(&self) -> Result<JsMemoryLog> {
        self.with(|a| Ok(a.memory_log().into()))
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint")]
    pub fn allocated_size(&self, addr: U64Arg) -> Result<u64> {
        let addr = addr_arg(addr)?;
        self.with(|a| a.allocated_size(addr).map_err(js))
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint")]
    pub fn requested_size(&self, addr: U64Arg) -> Result<u64> {
        let addr = addr_arg(addr)?;
        self.with(|a| a.requested_size(addr).map_err(js))
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint, data: Uint8Array")]
    pub fn write(&self, addr: U64Arg, data: Uint8Array) -> Result<()> {
        let addr = addr_arg(addr)?;
        self.with(|a| a.write(addr, &data).map_err(js))
    }

    /// Reads `out.length` bytes at `addr` into `out` (the caller's own view: no native
    /// buffer sized by a JS value is ever made). The range is checked first.
    #[napi(catch_unwind, ts_args_type = "addr: bigint, out: Uint8Array")]
    #[allow(unsafe_code)]
    pub fn read(&self, addr: U64Arg, mut out: Uint8Array) -> Result<()> {
        let addr = addr_arg(addr)?;
        // SAFETY: JS is paused on this thread while this native call runs, and the TS layer
        // refuses views of a SharedArrayBuffer, so nothing else reads or writes `out` now.
        let out = unsafe { out.as_mut() };
        self.with(|a| a.read(addr, out).map_err(js))
    }

    #[napi(catch_unwind, ts_args_type = "addr: bigint, byte: number, len: bigint")]
    pub fn fill(&self, addr: U64Arg, byte: f64, len: U64Arg) -> Result<()> {
        let byte = int_arg("byte", byte, 0, 255)? as u8;
        let addr = addr_arg(addr)?;
        // A length of 2^64 or more is a range past the end of any allocation, not a size that
        // could not be allocated.
        let len = match len {
            U64Arg::TooLarge(_) => None,
            other => Some(size_arg("length", other)?),
        };
        self.with(|a| match len {
            Some(len) => a.fill(addr, byte, len).map_err(js),
            None => Err(js(ArenaError::UnknownPointer {
                addr,
                reason: "a length of 2^64 bytes or more is not inside one live allocation".into(),
            })),
        })
    }

    /// This handle's number (what the fast path is given).
    #[napi(catch_unwind)]
    pub fn handle(&self) -> f64 {
        self.handle
    }

    /// Whether this handle was released.
    #[napi(catch_unwind)]
    pub fn is_released(&self) -> bool {
        self.with(|_| Ok(())).is_err()
    }
}
