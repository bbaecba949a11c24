//! ONNX Runtime's process-wide environment, as far as registering allocators goes:
//! `CreateEnv` (which returns the environment every user of the library shares, onnxruntime-node
//! included), `RegisterAllocator`, `UnregisterAllocator`.

use crate::host::{slot, HostApi};
use cuda_arena_core::{ArenaError, Result};
use ort_sys::{OrtAllocator, OrtEnv, OrtLoggingLevel, OrtMemoryInfo};
use std::ptr::NonNull;

/// One reference to ORT's environment; dropping it releases the reference (`ReleaseEnv`).
#[derive(Debug)]
pub struct OrtEnvRef {
    host: HostApi,
    env: NonNull<OrtEnv>,
}

// SAFETY: ORT's environment is thread-safe.
unsafe impl Send for OrtEnvRef {}
// SAFETY: as above.
unsafe impl Sync for OrtEnvRef {}

fn refused(what: &str, message: String) -> ArenaError {
    ArenaError::InvalidArgument {
        reason: format!("ONNX Runtime refused {what}: {message}"),
    }
}

impl OrtEnvRef {
    /// `CreateEnv`: the process-wide environment (made with `logid` and warning-level logging
    /// if nobody made it yet).
    pub fn create(host: HostApi, logid: &str) -> Result<Self> {
        let logid = crate::host::c_string(logid);
        let mut env: *mut OrtEnv = std::ptr::null_mut();
        // SAFETY: a valid level, a NUL-terminated id, a place for the result.
        let status = unsafe {
            slot!(host, CreateEnv)(
                OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
                logid.as_ptr(),
                &mut env,
            )
        };
        // SAFETY: the status just returned.
        unsafe { host.check(status) }.map_err(|m| refused("CreateEnv", m))?;
        let env = NonNull::new(env).ok_or_else(|| refused("CreateEnv", "no env".into()))?;
        Ok(OrtEnvRef { host, env })
    }

    /// The `OrtEnv*`.
    pub fn as_ptr(&self) -> *mut OrtEnv {
        self.env.as_ptr()
    }

    /// `RegisterAllocator`: sessions created with `session.use_env_allocators=1` use
    /// `allocator` for its memory info. ORT's refusal (an `OrtArenaAllocator` type, a memory
    /// info already registered) is `ERR_ARENA_INVALID_ARGUMENT` with ORT's message.
    ///
    /// # Safety
    /// `allocator` is a live `OrtAllocator` that stays valid while any session may use it
    /// (until exit: see [`crate::keep_until_exit`]).
    pub unsafe fn register_allocator(&self, allocator: *mut OrtAllocator) -> Result<()> {
        // SAFETY: a live env and allocator.
        let status = unsafe { slot!(self.host, RegisterAllocator)(self.env.as_ptr(), allocator) };
        // SAFETY: the status just returned.
        unsafe { self.host.check(status) }.map_err(|m| refused("the allocator", m))
    }

    /// `UnregisterAllocator`: sessions created from now on no longer get the allocator
    /// registered for `info`; sessions that have it keep using it.
    ///
    /// # Safety
    /// `info` is a live memory info of this host.
    pub unsafe fn unregister_allocator(&self, info: *const OrtMemoryInfo) -> Result<()> {
        // SAFETY: a live env and memory info.
        let status = unsafe { slot!(self.host, UnregisterAllocator)(self.env.as_ptr(), info) };
        // SAFETY: the status just returned.
        unsafe { self.host.check(status) }.map_err(|m| refused("UnregisterAllocator", m))
    }
}

impl Drop for OrtEnvRef {
    fn drop(&mut self) {
        // SAFETY: the reference `create` took, released once.
        unsafe { slot!(self.host, ReleaseEnv)(self.env.as_ptr()) }
    }
}
