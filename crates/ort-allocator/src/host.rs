//! The host's `OrtApi` at a negotiated version, and the few calls cuda-arena makes through it:
//! statuses, the logger, memory infos and key/value pairs. cuda-arena never links ONNX Runtime;
//! every call goes through the function table the host hands over.
//!
//! A host's table may be shorter than ort-sys's `OrtApi` (an older ORT), so no reference to the
//! whole struct is ever made: each call reads the one slot it needs through the raw pointer,
//! and only slots of versions up to [`MIN_ORT_API_VERSION`] are read, which every accepted host
//! has. Enums ORT writes are read back as plain integers, so a value a newer ORT adds is an
//! error, never an invalid Rust enum.

use cuda_arena_core::{AllocatorType, ArenaError, MemoryInfo, MemoryKind, Result};
use ort_sys::{
    OrtAllocatorType, OrtApi, OrtErrorCode, OrtKeyValuePairs, OrtLogger, OrtLoggingLevel,
    OrtMemType, OrtMemoryInfo, OrtStatus, OrtStatusPtr,
};
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::NonNull;

/// The oldest API version accepted: 23 (ORT 1.23) is the first whose `OrtAllocator` has
/// `GetStats` and `AllocOnStream`, and whose `OrtApi` has `SyncStream_GetHandle`
/// (`CreateKeyValuePairs` / `AddKeyValuePair` came in 22). It is also the first with the
/// plugin-EP allocator calls (`OrtEpFactory::CreateAllocator`).
pub const MIN_ORT_API_VERSION: u32 = 23;

/// The newest API version whose `OrtApi` and `OrtAllocator` layouts this crate knows (ort-sys
/// with `api-30`). A host asking for more gets an allocator that says this version, so ORT
/// reads no field added after it.
pub const MAX_ORT_API_VERSION: u32 = ort_sys::ORT_API_VERSION;

/// The version an allocator built for a host asking for `asked` carries: `asked` capped at
/// [`MAX_ORT_API_VERSION`]; below [`MIN_ORT_API_VERSION`] is `ERR_ARENA_INVALID_ARGUMENT`.
pub fn negotiate_version(asked: u32) -> Result<u32> {
    if asked < MIN_ORT_API_VERSION {
        return Err(ArenaError::InvalidArgument {
            reason: format!(
                "ONNX Runtime API version {asked} is older than {MIN_ORT_API_VERSION}, the first \
                 with OrtAllocator::GetStats/AllocOnStream, key/value pairs and SyncStream_GetHandle"
            ),
        });
    }
    Ok(asked.min(MAX_ORT_API_VERSION))
}

/// A host's `const OrtApi*` and the version agreed with it. Copy it freely: it is a pointer
/// to the host's static function table.
#[derive(Debug, Clone, Copy)]
pub struct HostApi {
    api: NonNull<OrtApi>,
    version: u32,
}

// SAFETY: an `OrtApi` is a static table of function pointers; ORT's functions may be called
// from any thread.
unsafe impl Send for HostApi {}
// SAFETY: as above; the table is never written.
unsafe impl Sync for HostApi {}

/// Reads one slot of the host's table.
macro_rules! slot {
    ($host:expr, $name:ident) => {{
        let api = $host.as_ptr();
        // SAFETY: `HostApi::new` checked the pointer is non-NULL, and its contract is that it
        // is the host's table of at least `MIN_ORT_API_VERSION`; every slot named here is of
        // that version or older. Only this field is read: no reference to the whole table.
        #[allow(unused_unsafe)]
        let f = unsafe { (*api).$name };
        f
    }};
}
pub(crate) use slot;

impl HostApi {
    /// The host's table `api` for a host asking for version `asked` (see
    /// [`negotiate_version`]). NULL is `ERR_ARENA_INVALID_ARGUMENT`.
    ///
    /// # Safety
    /// A non-NULL `api` is what ORT's `GetApi(v)` returned for some `v >= asked`, and stays
    /// valid while anything built from this value is used (the library stays loaded).
    pub unsafe fn new(api: *const OrtApi, asked: u32) -> Result<Self> {
        let api = NonNull::new(api.cast_mut()).ok_or_else(|| ArenaError::InvalidArgument {
            reason: "the OrtApi is NULL".into(),
        })?;
        Ok(HostApi {
            api,
            version: negotiate_version(asked)?,
        })
    }

    /// The agreed version: what the allocators built from it say in `OrtAllocator::version`.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The host's table.
    pub fn as_ptr(&self) -> *const OrtApi {
        self.api.as_ptr()
    }

    /// A new `OrtStatus` with `code` and `message`, made by the host (its caller releases it).
    pub fn status(&self, code: OrtErrorCode, message: &str) -> *mut OrtStatus {
        let message = c_string(message);
        // SAFETY: a valid code and a NUL-terminated message; ORT copies it.
        unsafe { slot!(self, CreateStatus)(code, message.as_ptr()) }.0
    }

    /// The status for `e`: its code first in the message (`ERR_ARENA_…: …`), and the ORT code
    /// closest to its meaning.
    pub fn error_status(&self, e: &ArenaError) -> *mut OrtStatus {
        let code = match e {
            ArenaError::InvalidArgument { .. }
            | ArenaError::InvalidConfig { .. }
            | ArenaError::UnknownPointer { .. } => OrtErrorCode::ORT_INVALID_ARGUMENT,
            _ => OrtErrorCode::ORT_EP_FAIL,
        };
        self.status(code, &format!("{}: {e}", e.code()))
    }

    /// `Ok` for a NULL status; else its message, and the status released.
    ///
    /// # Safety
    /// `status` is NULL or a status the host made and nobody released.
    pub unsafe fn check(&self, status: OrtStatusPtr) -> std::result::Result<(), String> {
        if status.0.is_null() {
            return Ok(());
        }
        // SAFETY: a live status per the contract; the message lives until it is released.
        let message = unsafe { CStr::from_ptr(slot!(self, GetErrorMessage)(status.0)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: released once, here.
        unsafe { slot!(self, ReleaseStatus)(status.0) };
        Err(message)
    }

    /// Logs `message` through `logger` at `level`; a NULL logger logs nothing.
    ///
    /// # Safety
    /// `logger` is NULL or a logger of this host that outlives the call.
    pub unsafe fn log(&self, logger: *const OrtLogger, level: OrtLoggingLevel, message: &str) {
        if logger.is_null() {
            return;
        }
        let message = c_string(message);
        // SAFETY: a live logger; NUL-terminated strings; ORT copies what it keeps.
        let status = unsafe {
            slot!(self, Logger_LogMessage)(
                logger,
                level,
                message.as_ptr(),
                c"cuda-arena".as_ptr(),
                0,
                c"OrtAllocator".as_ptr(),
            )
        };
        // SAFETY: the status the call just returned. A logger that fails is not reported
        // further: this is already the error path.
        let _ = unsafe { self.check(status) };
    }

    /// A new `OrtMemoryInfo` for `info`, as ORT names it (`Cuda`, `CudaPinned`, `Cpu`), of
    /// type `OrtDeviceAllocator` (`RegisterAllocator` refuses `OrtArenaAllocator`), with the
    /// memory type ORT's own allocators use: `OrtMemTypeCPUOutput` for pinned memory (CUDA's
    /// pinned allocator says so), `OrtMemTypeDefault` otherwise. Release it with
    /// [`HostApi::release_memory_info`].
    pub fn create_memory_info(&self, info: &MemoryInfo) -> Result<NonNull<OrtMemoryInfo>> {
        let mem_type = match info.kind {
            MemoryKind::CudaPinned => OrtMemType::OrtMemTypeCPUOutput,
            MemoryKind::Cuda | MemoryKind::Cpu => OrtMemType::OrtMemTypeDefault,
        };
        let name = c_string(info.kind.name());
        let id = c_int::try_from(info.device_id).map_err(|_| ArenaError::InvalidArgument {
            reason: format!("device id {} does not fit ORT's int", info.device_id),
        })?;
        let mut out: *mut OrtMemoryInfo = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name, valid enums, and a place for the result.
        let status = unsafe {
            slot!(self, CreateMemoryInfo)(
                name.as_ptr(),
                OrtAllocatorType::OrtDeviceAllocator,
                id,
                mem_type,
                &mut out,
            )
        };
        // SAFETY: the status the call just returned.
        unsafe { self.check(status) }.map_err(|m| ArenaError::InvalidArgument {
            reason: format!("ONNX Runtime refused the memory info {info}: {m}"),
        })?;
        NonNull::new(out).ok_or_else(|| ArenaError::InvalidArgument {
            reason: format!("ONNX Runtime made no memory info for {info}"),
        })
    }

    /// Releases a memory info from [`HostApi::create_memory_info`].
    ///
    /// # Safety
    /// `info` came from `create_memory_info` of this host and is released once.
    pub unsafe fn release_memory_info(&self, info: NonNull<OrtMemoryInfo>) {
        // SAFETY: per the contract.
        unsafe { slot!(self, ReleaseMemoryInfo)(info.as_ptr()) }
    }

    /// What an `OrtMemoryInfo` of the host says, as cuda-arena's [`MemoryInfo`]: its name must
    /// be `Cuda`, `CudaPinned` or `Cpu`; `OrtReadOnlyAllocator` is the read-only type.
    ///
    /// # Safety
    /// `info` is NULL or a live memory info of this host.
    pub unsafe fn read_memory_info(&self, info: *const OrtMemoryInfo) -> Result<MemoryInfo> {
        let invalid = |reason: String| ArenaError::InvalidArgument { reason };
        if info.is_null() {
            return Err(invalid("the OrtMemoryInfo is NULL".into()));
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: a live memory info and a place for the name.
        let status = unsafe { slot!(self, MemoryInfoGetName)(info, &mut name) };
        // SAFETY: the status just returned.
        unsafe { self.check(status) }.map_err(invalid)?;
        if name.is_null() {
            return Err(invalid("the OrtMemoryInfo has no name".into()));
        }
        // SAFETY: ORT's name string lives as long as the memory info.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let kind = MemoryKind::from_name(&name).ok_or_else(|| {
            invalid(format!(
                "memory info \"{}\" is not one cuda-arena serves (Cuda, CudaPinned or Cpu)",
                cuda_arena_core::escaped(&name)
            ))
        })?;
        let mut id: c_int = 0;
        // SAFETY: as above.
        let status = unsafe { slot!(self, MemoryInfoGetId)(info, &mut id) };
        // SAFETY: the status just returned.
        unsafe { self.check(status) }.map_err(invalid)?;
        let device_id = u32::try_from(id)
            .map_err(|_| invalid(format!("memory info {name} has device id {id}")))?;
        // Read as the C int ORT writes, so an allocator type this crate does not know is an
        // error rather than an invalid enum value.
        let mut raw_type: i32 = OrtAllocatorType::OrtInvalidAllocator as i32;
        // SAFETY: `OrtAllocatorType` is `repr(i32)`: the slot has the size and alignment of
        // what ORT writes, and it is only ever read as an `i32`.
        let status = unsafe {
            slot!(self, MemoryInfoGetType)(
                info,
                (&mut raw_type as *mut i32).cast::<OrtAllocatorType>(),
            )
        };
        // SAFETY: the status just returned.
        unsafe { self.check(status) }.map_err(invalid)?;
        let allocator_type = if raw_type == OrtAllocatorType::OrtReadOnlyAllocator as i32 {
            AllocatorType::ReadOnly
        } else {
            AllocatorType::Device
        };
        Ok(MemoryInfo {
            kind,
            device_id,
            allocator_type,
        })
    }

    /// The entries of a host's `OrtKeyValuePairs`, in its order; NULL has none.
    ///
    /// # Safety
    /// `pairs` is NULL or live key/value pairs of this host.
    pub unsafe fn read_pairs(&self, pairs: *const OrtKeyValuePairs) -> Vec<(String, String)> {
        if pairs.is_null() {
            return Vec::new();
        }
        let mut keys: *const *const c_char = std::ptr::null();
        let mut values: *const *const c_char = std::ptr::null();
        let mut n: usize = 0;
        // SAFETY: live pairs and places for the arrays ORT owns.
        unsafe { slot!(self, GetKeyValuePairs)(pairs, &mut keys, &mut values, &mut n) };
        if n == 0 || keys.is_null() || values.is_null() {
            return Vec::new();
        }
        (0..n)
            .filter_map(|i| {
                // SAFETY: ORT gives `n` entries in each array, alive with the pairs.
                let (k, v) = unsafe { (*keys.add(i), *values.add(i)) };
                if k.is_null() || v.is_null() {
                    return None;
                }
                // SAFETY: NUL-terminated strings owned by the pairs.
                let (k, v) = unsafe { (CStr::from_ptr(k), CStr::from_ptr(v)) };
                Some((
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                ))
            })
            .collect()
    }

    /// New host-made key/value pairs holding `pairs`; the caller (ORT) releases them.
    pub fn make_pairs<'a>(
        &self,
        pairs: impl IntoIterator<Item = (&'a str, String)>,
    ) -> *mut OrtKeyValuePairs {
        let mut out: *mut OrtKeyValuePairs = std::ptr::null_mut();
        // SAFETY: a place for the result.
        unsafe { slot!(self, CreateKeyValuePairs)(&mut out) };
        if out.is_null() {
            return out;
        }
        for (k, v) in pairs {
            let (k, v) = (c_string(k), c_string(&v));
            // SAFETY: the pairs just made; ORT copies the strings.
            unsafe { slot!(self, AddKeyValuePair)(out, k.as_ptr(), v.as_ptr()) };
        }
        out
    }

    /// The native handle (`CUstream` for CUDA) of one of the host's streams.
    ///
    /// # Safety
    /// `stream` is a live `OrtSyncStream` of this host.
    pub unsafe fn sync_stream_handle(&self, stream: *mut ort_sys::OrtSyncStream) -> u64 {
        // SAFETY: per the contract.
        unsafe { slot!(self, SyncStream_GetHandle)(stream) }.addr() as u64
    }
}

/// `s` as a C string; interior NULs (never in cuda-arena's own text) become spaces.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| {
        let cleaned: String = s.chars().map(|c| if c == '\0' { ' ' } else { c }).collect();
        CString::new(cleaned).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_below_the_minimum_are_refused_and_above_the_known_ones_capped() {
        for v in [0, 1, MIN_ORT_API_VERSION - 1] {
            let e = negotiate_version(v).expect_err("too old");
            assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT", "{v}");
        }
        assert_eq!(negotiate_version(MIN_ORT_API_VERSION).ok(), Some(23));
        assert_eq!(MAX_ORT_API_VERSION, 30, "ort-sys with api-30");
        assert_eq!(
            negotiate_version(MAX_ORT_API_VERSION + 1).ok(),
            Some(MAX_ORT_API_VERSION)
        );
        assert_eq!(negotiate_version(u32::MAX).ok(), Some(MAX_ORT_API_VERSION));
    }

    #[test]
    fn a_null_api_is_an_invalid_argument() {
        // SAFETY: NULL is the case under test; nothing is called.
        let e = unsafe { HostApi::new(std::ptr::null(), 30) }.expect_err("NULL");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    }
}
