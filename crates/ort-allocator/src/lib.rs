#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod calls;
mod env;
mod ep;
mod host;
mod kept;
mod last_error;
mod library;
mod user;
mod view;

pub use calls::ViewCalls;
pub use env::OrtEnvRef;
pub use ep::{EpAllocator, EpAllocators};
pub use host::{negotiate_version, HostApi, MAX_ORT_API_VERSION, MIN_ORT_API_VERSION};
pub use kept::{keep_until_exit, kept, release_kept};
pub use last_error::{clear_last_error, last_error};
pub use library::OrtLibrary;
pub use ort_sys;
pub use user::AllocatorUser;
pub use view::{OrtAllocatorView, ViewOptions};
