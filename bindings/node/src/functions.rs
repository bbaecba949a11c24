//! Free functions: option namespaces, config validation, error codes, devices.

use crate::convert::config_arg;
use crate::error::Result;
use napi_derive::napi;
use std::collections::HashMap;

fn pairs(v: HashMap<String, String>) -> Vec<(String, String)> {
    let mut p: Vec<_> = v.into_iter().collect();
    p.sort();
    p
}

/// `ep_factory.<factoryName>.arena.*` → `arena.*`.
#[napi(catch_unwind)]
pub fn env_arena_options(
    options: HashMap<String, String>,
    factory_name: String,
) -> HashMap<String, String> {
    cuda_arena_core::env_arena_options(pairs(options), &factory_name)
        .into_iter()
        .collect()
}

/// `ep.<lowercased ep name>.arena.*` → `arena.*`.
#[napi(catch_unwind)]
pub fn session_arena_options(
    options: HashMap<String, String>,
    ep_name: String,
) -> HashMap<String, String> {
    cuda_arena_core::session_arena_options(pairs(options), &ep_name)
        .into_iter()
        .collect()
}

/// Parses `arena.*` pairs and returns the full config as pairs (throws on invalid).
#[napi(catch_unwind)]
pub fn parse_arena_config(options: HashMap<String, String>) -> Result<HashMap<String, String>> {
    let cfg = config_arg(Some(options))?.unwrap_or_default();
    Ok(cfg
        .to_pairs()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect())
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
