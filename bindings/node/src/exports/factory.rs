//! The factory handle: a process-wide `cuda_arena_core::Factory` by name.

use crate::allocator::NativeAllocator;
use crate::convert::{config_arg, pairs_arg, u32_arg, JsDeviceStats};
use crate::error::{invalid, js, Result};
use crate::handles;
use crate::stream::NativeStream;
use cuda_arena_core::{
    named_factory, AllocatorType, ArenaError, DeviceLimits, Factory, MemoryInfo, MemoryKind,
    SimKind,
};
use cuda_sys_bridge::{backend_named, unknown_backend, CudaBackend, BACKEND_NAMES};
use napi::bindgen_prelude::{BigInt, Utf16String};
use napi_derive::napi;
use std::sync::{Arc, OnceLock};

/// Simulated devices one factory may have (the count form and the list form alike).
pub const MAX_DEVICES: usize = 64;

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

/// How a factory's backend and devices read in a message ("the host backend with 2
/// devices: 4294967296 bytes, maxAllocation unlimited; ...").
fn describe_spec(backend: &str, limits: &[DeviceLimits]) -> String {
    if limits.is_empty() {
        return format!("the {backend} backend");
    }
    let devices: Vec<String> = limits
        .iter()
        .map(|l| {
            let max = if l.max_allocation == u64::MAX {
                "unlimited".to_string()
            } else {
                l.max_allocation.to_string()
            };
            format!("totalMemory {} maxAllocation {max}", l.total_memory)
        })
        .collect();
    format!(
        "the {backend} backend with {} device{} ({})",
        limits.len(),
        if limits.len() == 1 { "" } else { "s" },
        devices.join("; ")
    )
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
    pub fn new(name: Utf16String, backend: String, devices: Vec<JsDeviceLimits>) -> Result<Self> {
        // Read as UTF-16 and checked: napi's UTF-8 conversion turns every lone surrogate into
        // U+FFFD, so '\uD800' and '\uD801' would name one process-wide factory.
        let name = String::from_utf16(&name).map_err(|_| {
            invalid("factory name must be well-formed Unicode: it has a lone surrogate")
        })?;
        if backend == "cuda" {
            // The process's one CUDA backend (see `cuda_backend`), which streams also use.
            let cuda = cuda_backend()?;
            let inner = named_factory(&name, &describe_spec("cuda", &[]), || {
                Ok(Factory::new(name.clone(), cuda.clone()))
            })
            .map_err(js)?;
            return Ok(NativeFactory {
                inner,
                cuda: Some(cuda),
                warnings: Vec::new(),
            });
        }
        let Some(kind) = SimKind::named(&backend) else {
            return Err(js(unknown_backend(&backend, &BACKEND_NAMES)));
        };
        if devices.len() > MAX_DEVICES {
            return Err(invalid(format!(
                "devices must list at most {MAX_DEVICES} devices, got {}",
                devices.len()
            )));
        }
        let default_total = kind.default_total_memory();
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
        let spec = describe_spec(&backend, &limits);
        let inner = named_factory(&name, &spec, || {
            Ok(Factory::new(
                name.clone(),
                backend_named(kind.name(), &limits)?,
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
    /// `keys`/`values`: flattened `arena.*` pairs, or `null` for no options.
    #[napi(catch_unwind)]
    pub fn create_allocator(
        &mut self,
        name: String,
        device_id: f64,
        allocator_type: String,
        keys: Option<Vec<String>>,
        values: Option<Vec<String>>,
        replace: bool,
    ) -> Result<NativeAllocator> {
        let device_id = u32_arg("deviceId", device_id)?;
        let kind = MemoryKind::from_name(&name).ok_or_else(|| {
            invalid(format!(
                "memory info name must be 'Cuda', 'CudaPinned' or 'Cpu', got \"{}\"",
                cuda_arena_core::escaped(&name)
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
        let config = match (keys, values) {
            (Some(k), Some(v)) => Some(config_arg(pairs_arg(k, v)?)?),
            (None, None) => None,
            _ => return Err(invalid("options need both keys and values")),
        };
        let created = self
            .inner
            .create_shared_allocator(info, config.as_ref(), replace)
            .map_err(js)?;
        let handle = NativeAllocator::register(created.allocator.clone(), self.inner.clone());
        if handle.is_err() {
            // No handle holds the user: give it back, so a failed call changes nothing.
            self.inner.release_allocator(&created.allocator);
        }
        let handle = handle?;
        self.warnings.extend(created.warnings);
        Ok(handle)
    }

    /// Warnings from the last calls, for the TS layer's logger; clears them.
    #[napi(catch_unwind)]
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Counts one user fewer; returns what happened: `counted`, `destroyed` or `untracked`.
    #[napi(catch_unwind)]
    pub fn release_allocator(&self, allocator: &NativeAllocator) -> Result<String> {
        Ok(
            match handles::release_allocator(allocator.number(), &self.inner)? {
                cuda_arena_core::Released::Counted(_) => "counted",
                cuda_arena_core::Released::Destroyed => "destroyed",
                cuda_arena_core::Released::Untracked => "untracked",
            }
            .to_string(),
        )
    }

    #[napi(catch_unwind)]
    pub fn device_stats(&self, device_id: f64) -> Result<JsDeviceStats> {
        let device_id = u32_arg("deviceId", device_id)?;
        self.inner
            .device_stats(device_id)
            .map(Into::into)
            .map_err(js)
    }

    #[napi(catch_unwind)]
    pub fn create_stream(&self, device_id: f64) -> Result<NativeStream> {
        let device_id = u32_arg("deviceId", device_id)?;
        if device_id >= self.inner.backend().device_count() {
            return Err(js(self.inner.backend().no_device(device_id)));
        }
        match &self.cuda {
            Some(cuda) => NativeStream::cuda(cuda.create_stream(device_id).map_err(js)?),
            None => NativeStream::logical(self.inner.backend().name(), device_id),
        }
    }
}
