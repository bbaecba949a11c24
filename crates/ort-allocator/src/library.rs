//! Opening `libonnxruntime` at run time, for hosts that do not link it (a Node addon next to
//! onnxruntime-node, the tests): `OrtGetApiBase`, its version, and the `OrtApi` of a version
//! both sides know.

use crate::host::{HostApi, MAX_ORT_API_VERSION, MIN_ORT_API_VERSION};
use cuda_arena_core::{ArenaError, Result};
use ort_sys::{OrtApi, OrtApiBase};
use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// glibc's `RTLD_NOLOAD`: open only a library that is loaded already.
#[cfg(target_os = "linux")]
const RTLD_NOLOAD: std::ffi::c_int = 4;

/// A loaded `libonnxruntime`. It is never unloaded: allocators built from its `OrtApi` may be
/// called until the process exits.
#[derive(Debug)]
pub struct OrtLibrary {
    _lib: ManuallyDrop<libloading::Library>,
    base: NonNull<OrtApiBase>,
    path: PathBuf,
}

// SAFETY: `OrtApiBase` is a static table of thread-safe functions.
unsafe impl Send for OrtLibrary {}
// SAFETY: as above.
unsafe impl Sync for OrtLibrary {}

/// A path as a message shows it: escaped and cut short, whatever the caller gave.
fn shown(path: &Path) -> String {
    cuda_arena_core::escaped(&path.to_string_lossy())
}

fn not_loadable(path: &Path, why: impl std::fmt::Display) -> ArenaError {
    ArenaError::InvalidArgument {
        reason: format!(
            "ONNX Runtime could not be loaded from {}: {why}",
            shown(path)
        ),
    }
}

impl OrtLibrary {
    /// Loads the library at `path` (or finds it loaded: the same path gives the same library
    /// and so the same process-wide environment).
    ///
    /// # Safety
    /// Loading runs the library's initialisers: `path` must be an ONNX Runtime library.
    pub unsafe fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // SAFETY: per the contract.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| not_loadable(path, e))?;
        // SAFETY: as above.
        unsafe { Self::from_library(lib, path) }
    }

    /// The library at `path` if this process has loaded it already (onnxruntime-node did),
    /// else `None`; never loads it.
    ///
    /// # Safety
    /// As [`OrtLibrary::open`].
    #[cfg(target_os = "linux")]
    pub unsafe fn open_loaded(path: impl AsRef<Path>) -> Result<Option<Self>> {
        use libloading::os::unix::{Library, RTLD_NOW};
        let path = path.as_ref();
        // SAFETY: per the contract; with RTLD_NOLOAD nothing new is loaded.
        match unsafe { Library::open(Some(path), RTLD_NOW | RTLD_NOLOAD) } {
            // SAFETY: as above.
            Ok(lib) => unsafe { Self::from_library(lib.into(), path) }.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// # Safety
    /// `lib` is an ONNX Runtime library.
    unsafe fn from_library(lib: libloading::Library, path: &Path) -> Result<Self> {
        type GetApiBase = unsafe extern "C" fn() -> *const OrtApiBase;
        // SAFETY: ONNX Runtime exports `OrtGetApiBase` with this signature.
        let get_base = unsafe { lib.get::<GetApiBase>(b"OrtGetApiBase\0") }
            .map_err(|e| not_loadable(path, e))?;
        // SAFETY: the symbol just found, called as ORT documents.
        let base = NonNull::new(unsafe { get_base() }.cast_mut())
            .ok_or_else(|| not_loadable(path, "OrtGetApiBase returned NULL"))?;
        Ok(OrtLibrary {
            _lib: ManuallyDrop::new(lib),
            base,
            path: path.to_path_buf(),
        })
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// ORT's version string, e.g. `"1.30.0"`.
    pub fn version_string(&self) -> String {
        // SAFETY: a live `OrtApiBase`; the string is static.
        let p = unsafe { (self.base.as_ref().GetVersionString)() };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The newest API version the library offers: ORT 1.N offers versions 1 to N.
    pub fn api_version(&self) -> Option<u32> {
        self.version_string().split('.').nth(1)?.parse().ok()
    }

    /// `GetApi(version)`: the library's `OrtApi` for `version`, NULL when it does not offer it
    /// (ORT then prints why on stderr).
    pub fn get_api(&self, version: u32) -> *const OrtApi {
        // SAFETY: a live `OrtApiBase`; any version may be asked for.
        unsafe { (self.base.as_ref().GetApi)(version) }
    }

    /// The library's `OrtApi` at the newest version both it and this crate know, at most
    /// `wanted`: `ERR_ARENA_INVALID_ARGUMENT` when that is below [`MIN_ORT_API_VERSION`].
    pub fn host_api(&self, wanted: u32) -> Result<HostApi> {
        let offered = self.api_version().unwrap_or(MIN_ORT_API_VERSION);
        let version = wanted.min(offered).min(MAX_ORT_API_VERSION);
        if version < MIN_ORT_API_VERSION {
            return Err(ArenaError::InvalidArgument {
                reason: format!(
                    "ONNX Runtime {} at {} offers API version {offered}; cuda-arena needs \
                     {MIN_ORT_API_VERSION} or newer",
                    self.version_string(),
                    shown(&self.path)
                ),
            });
        }
        let api = self.get_api(version);
        // SAFETY: what `GetApi(version)` returned; the library is never unloaded.
        unsafe { HostApi::new(api, version) }.map_err(|_| ArenaError::InvalidArgument {
            reason: format!(
                "ONNX Runtime {} at {} refused API version {version}",
                self.version_string(),
                shown(&self.path)
            ),
        })
    }
}
