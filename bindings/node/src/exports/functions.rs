//! Free functions: option namespaces, config validation, error codes, devices.

use crate::convert::{config_arg, pairs_arg};
use crate::error::Result;
use napi_derive::napi;

/// `ep_factory.<factoryName>.arena.*` → `arena.*`, as `[keys, values]`.
#[napi(catch_unwind)]
pub fn env_arena_options(
    keys: Vec<String>,
    values: Vec<String>,
    factory_name: String,
) -> Result<Vec<Vec<String>>> {
    Ok(unzip(cuda_arena_core::env_arena_options(
        pairs_arg(keys, values)?,
        &factory_name,
    )))
}

/// `ep.<lowercased ep name>.arena.*` → `arena.*`, as `[keys, values]`.
#[napi(catch_unwind)]
pub fn session_arena_options(
    keys: Vec<String>,
    values: Vec<String>,
    ep_name: String,
) -> Result<Vec<Vec<String>>> {
    Ok(unzip(cuda_arena_core::session_arena_options(
        pairs_arg(keys, values)?,
        &ep_name,
    )))
}

fn unzip(pairs: Vec<(String, String)>) -> Vec<Vec<String>> {
    let (keys, values) = pairs.into_iter().unzip();
    vec![keys, values]
}

/// Parses `arena.*` pairs and returns the full config as `[keys, values]` (throws on
/// invalid).
#[napi(catch_unwind)]
pub fn parse_arena_config(keys: Vec<String>, values: Vec<String>) -> Result<Vec<Vec<String>>> {
    let cfg = config_arg(pairs_arg(keys, values)?)?;
    Ok(unzip(
        cfg.to_pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    ))
}

/// The known config key nearest to `key`: the raw `arena.*` key, or with `typed`, the typed
/// camelCase field name (for "did you mean" messages).
#[napi(catch_unwind)]
pub fn nearest_config_key(key: String, typed: bool) -> String {
    if typed {
        cuda_arena_core::types::config::nearest_typed_key(&key)
    } else {
        cuda_arena_core::types::config::nearest_key(&key)
    }
    .to_string()
}

/// Every typed config field with its raw key, `[typed, raw]`, in documentation order.
#[napi(catch_unwind)]
pub fn typed_config_keys() -> Vec<Vec<String>> {
    cuda_arena_core::types::config::keys::TYPED
        .iter()
        .map(|(typed, raw)| vec![typed.to_string(), raw.to_string()])
        .collect()
}

/// Live handles of this thread: `[allocator users, streams]` (for tests of release paths).
#[napi(catch_unwind)]
pub fn live_handles() -> Vec<u32> {
    let (a, s) = crate::handles::live_counts();
    vec![a as u32, s as u32]
}

/// The stable error codes, in DESIGN order.
#[napi(catch_unwind)]
pub fn error_codes() -> Vec<String> {
    cuda_arena_core::ERROR_CODES
        .iter()
        .map(|c| c.to_string())
        .collect()
}

/// The binary's version, which the TypeScript layer checks against its package's.
#[napi(catch_unwind)]
pub fn native_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Whether a CUDA driver with a device is usable here. Never throws.
#[napi(catch_unwind)]
pub fn cuda_available() -> bool {
    cuda_sys_bridge::cuda_available()
}

/// A GPU as the driver reports it.
#[napi(object, object_to_js = true, object_from_js = false)]
pub struct JsDeviceInfo {
    pub ordinal: u32,
    pub name: String,
    pub total_memory: u64,
    pub free_memory: u64,
    pub pci_bus_id: String,
    pub uuid: String,
    pub compute_capability: Vec<i32>,
    pub memory_pools_supported: bool,
}

/// Every GPU; empty without a driver. Never throws.
#[napi(catch_unwind)]
pub fn devices() -> Vec<JsDeviceInfo> {
    cuda_sys_bridge::devices()
        .into_iter()
        .map(|d| JsDeviceInfo {
            ordinal: d.ordinal,
            name: d.name,
            total_memory: d.total_memory,
            free_memory: d.free_memory,
            pci_bus_id: d.pci_bus_id,
            uuid: d.uuid,
            compute_capability: vec![d.compute_capability.0, d.compute_capability.1],
            memory_pools_supported: d.memory_pools_supported,
        })
        .collect()
}
