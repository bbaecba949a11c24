//! The factory handle: a process-wide `cuda_arena_core::Factory` by name.

use crate::allocator::NativeAllocator;
use crate::convert::{config_arg, JsDeviceStats};
use crate::error::{invalid, js, Result};
use crate::stream::NativeStream;
use cuda_arena_core::{
    named_factory, AllocatorType, ArenaError, DeviceLimits, Factory, MemoryInfo, MemoryKind,
    SimBackend, SimKind,
};
use cuda_sys_bridge::CudaBackend;
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One simulated device's limits (host and virtual backends).
#[napi(object)]
pub struct JsDeviceLimits {
    pub total_memory: Option<BigInt>,
    pub max_allocation: Option<BigInt>,
}

/// A factory handle.
#[napi]
pub struct NativeFactory {
    inner: Arc<Factory>,
    /// The process's CUDA backend, for streams, when this factory uses it.
    cuda: Option<Arc<CudaBackend>>,
    warnings: Vec<String>,
}

/// One CUDA backend per process: every `cuda` factory shares its contexts.
fn cuda_backend() -> Result<Arc<CudaBackend>> {
    static BACKEND: OnceLock<std::result::Result<Arc<CudaBackend>, ArenaError>> = OnceLock::new();
    BACKEND
        .get_or_init(|| CudaBackend::new().map(Arc::new))
        .clone()
        .map_err(js)
}

fn bigint_u64(name: &str, v: &BigInt) -> Result<u64> {
    let (negative, value, lossless) = v.get_u64();
    if negative || !lossless {
        return Err(invalid(format!(
            "{name} must be a non-negative 64-bit integer"
        )));
    }
    Ok(value)
}

#[napi]
impl NativeFactory {
    /// `backend`: `cuda`, `host` or `virtual`; `devices`: simulated device limits (an empty
    /// list means one default device).
    #[napi(constructor, catch_unwind)]
    pub fn new(name: String, backend: String, devices: Vec<JsDeviceLimits>) -> Result<Self> {
        let kind = match backend.as_str() {
            "host" => SimKind::Host,
            "virtual" => SimKind::Virtual,
            "cuda" => {
                let cuda = cuda_backend()?;
                let inner = named_factory(&name, "cuda", || {
                    Ok(Factory::new(name.clone(), cuda.clone()))
                })
                .map_err(js)?;
                return Ok(NativeFactory {
                    inner,
                    cuda: Some(cuda),
                    warnings: Vec::new(),
                });
            }
            other => {
                return Err(invalid(format!(
                    "backend must be 'cuda', 'host' or 'virtual', got {other:?}"
                )))
            }
        };
        let default_total = match kind {
            SimKind::Host => cuda_arena_core::raw::DEFAULT_HOST_TOTAL_MEMORY,
            SimKind::Virtual => cuda_arena_core::raw::DEFAULT_VIRTUAL_TOTAL_MEMORY,
        };
        let limits = devices
            .iter()
            .map(|d| {
                let total = d
                    .total_memory
                    .as_ref()
                    .map(|v| bigint_u64("totalMemory", v))
                    .transpose()?;
                let max = d
                    .max_allocation
                    .as_ref()
                    .map(|v| bigint_u64("maxAllocation", v))
                    .transpose()?;
                Ok(DeviceLimits {
                    total_memory: total.unwrap_or(default_total),
                    max_allocation: max.unwrap_or(u64::MAX),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let spec = format!("{backend}:{limits:?}");
        let inner = named_factory(&name, &spec, || {
            Ok(Factory::new(
                name.clone(),
                Arc::new(SimBackend::new(kind, &limits)),
            ))
        })
        .map_err(js)?;
        Ok(NativeFactory {
            inner,
            cuda: None,
            warnings: Vec::new(),
        })
    }

    #[napi(catch_unwind)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    #[napi(catch_unwind)]
    pub fn backend(&self) -> String {
        self.inner.backend().name().to_string()
    }

    #[napi(catch_unwind)]
    pub fn device_count(&self) -> u32 {
        self.inner.backend().device_count()
    }

    /// `name`: `Cuda`, `CudaPinned` or `Cpu`; `allocatorType`: `device` or `readonly`;
    /// `options`: flattened `arena.*` pairs.
    #[napi(catch_unwind)]
    pub fn create_allocator(
        &mut self,
        name: String,
        device_id: u32,
        allocator_type: String,
        options: Option<HashMap<String, String>>,
        replace: bool,
    ) -> Result<NativeAllocator> {
        let kind = MemoryKind::from_name(&name).ok_or_else(|| {
            invalid(format!(
                "memory info name must be 'Cuda', 'CudaPinned' or 'Cpu', got {name:?}"
            ))
        })?;
        let allocator_type = match allocator_type.as_str() {
            "device" => AllocatorType::Device,
            "readonly" => AllocatorType::ReadOnly,
            other => {
                return Err(invalid(format!(
                    "type must be 'device' or 'readonly', got {other:?}"
                )))
            }
        };
        let info = MemoryInfo {
            kind,
            device_id,
            allocator_type,
        };
        let config = config_arg(options)?;
        let created = self
            .inner
            .create_shared_allocator(info, config.as_ref(), replace)
            .map_err(js)?;
        self.warnings.extend(created.warnings);
        Ok(NativeAllocator::new(created.allocator, self.inner.clone()))
    }

    /// Warnings from the last calls, for the TS layer's logger; clears them.
    #[napi(catch_unwind)]
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Counts one user fewer; returns what happened: `counted`, `destroyed` or `untracked`.
    #[napi(catch_unwind)]
    pub fn release_allocator(&self, allocator: &mut NativeAllocator) -> Result<String> {
        if !Arc::ptr_eq(allocator.factory(), &self.inner) {
            return Err(invalid("the allocator was made by another factory"));
        }
        let a = allocator.take()?;
        Ok(match self.inner.release_allocator(&a) {
            cuda_arena_core::Released::Counted(_) => "counted",
            cuda_arena_core::Released::Destroyed => "destroyed",
            cuda_arena_core::Released::Untracked => "untracked",
        }
        .to_string())
    }

    #[napi(catch_unwind)]
    pub fn device_stats(&self, device_id: u32) -> Result<JsDeviceStats> {
        self.inner
            .device_stats(device_id)
            .map(Into::into)
            .map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn create_stream(&self, device_id: u32) -> Result<NativeStream> {
        if device_id >= self.inner.backend().device_count() {
            return Err(js(self.inner.backend().no_device(device_id)));
        }
        match &self.cuda {
            Some(cuda) => cuda
                .create_stream(device_id)
                .map(NativeStream::cuda)
                .map_err(js),
            None => Ok(NativeStream::logical(device_id)),
        }
    }
}
