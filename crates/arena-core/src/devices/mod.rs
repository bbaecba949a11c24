//! Where allocators come from: the process-wide factories (`registry.rs`, the public
//! `factory` module), the backends that supply devices and their memory, the ORT option
//! namespaces, the `CUDA_ARENA_CONF` environment config and the per-device allocators PyTorch
//! plugs in.

pub mod backend;
pub mod env_config;
pub mod namespaces;
pub mod pluggable;
pub mod registry;
