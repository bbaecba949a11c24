//! Where allocators come from: the process-wide factories (`factory.rs`), the backends that supply devices and their memory, the ORT option
//! namespaces, the `CUDA_ARENA_CONF` environment config, the per-device allocators PyTorch
//! plugs in and the allocator a replay runs on.

pub mod backend;
pub mod env_config;
pub mod factory;
pub mod namespaces;
pub mod pluggable;
pub mod replay_target;
