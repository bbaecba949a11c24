#![doc = include_str!("../README.md")]
// Every driver call lives in `driver`, the only module with `unsafe`; the rest builds safe
// types on it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod availability;
mod backend;
mod backend_names;
mod baseline;
mod device;
mod driver;
mod events;
mod pool;
mod raw;
mod stream;
mod vmm;

pub use availability::{cuda_available, ensure_cuda};
pub use backend::CudaBackend;
pub use backend_names::{backend_named, unknown_backend, BACKEND_NAMES, ENV_SIM_STREAM_EVENTS};
pub use baseline::DefaultPoolAllocator;
pub use device::{devices, DeviceInfo};
pub use events::{CudaEvents, IDLE_EVENTS_KEPT};
pub use pool::CudaPoolAllocator;
pub use raw::CudaRawAllocator;
pub use stream::{CudaEvent, CudaStream};
pub use vmm::CudaVirtualMemory;
