//! The real ONNX Runtime for the tests: `CUDA_ARENA_ORT_LIB`, or onnxruntime-node's library in
//! the repository's node_modules. Without it the tests say so loudly and pass, unless
//! `CUDA_ARENA_REQUIRE_ORT=1` (CI), which makes its absence a failure. Plus a "sham" host: the
//! real function table with a few slots replaced, for what the CPU build cannot make (an
//! `OrtSyncStream`, an `OrtLogger`).
#![allow(dead_code, clippy::undocumented_unsafe_blocks)]

use cuda_arena_core::{
    ArenaConfig, DeviceLimits, Factory, MemoryInfo, MemoryKind, SimBackend, SimKind,
};
use cuda_arena_ort::ort_sys::{
    self, OrtAllocator, OrtApi, OrtKeyValuePairs, OrtLogger, OrtLoggingLevel, OrtStatusPtr,
    OrtSyncStream,
};
use cuda_arena_ort::{AllocatorUser, HostApi, OrtAllocatorView, OrtLibrary, ViewOptions};
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Where the library is looked for.
pub fn library_path() -> PathBuf {
    if let Some(p) = std::env::var_os("CUDA_ARENA_ORT_LIB") {
        return PathBuf::from(p);
    }
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../node_modules/onnxruntime-node/bin/napi-v6/linux")
        .join(arch)
        .join("libonnxruntime.so.1")
}

/// The loaded library, or `None` (announced) when it is absent and not required.
pub fn ort() -> Option<&'static OrtLibrary> {
    static LIB: OnceLock<Option<OrtLibrary>> = OnceLock::new();
    LIB.get_or_init(|| {
        let path = library_path();
        let required = std::env::var("CUDA_ARENA_REQUIRE_ORT").is_ok_and(|v| v == "1");
        if !path.exists() {
            assert!(
                !required,
                "CUDA_ARENA_REQUIRE_ORT=1 but ONNX Runtime is not at {} (npm ci installs \
                 onnxruntime-node; or set CUDA_ARENA_ORT_LIB)",
                path.display()
            );
            eprintln!(
                "\n*** SKIPPED: ONNX Runtime is not at {} (run npm ci, or set CUDA_ARENA_ORT_LIB). \
                 CI sets CUDA_ARENA_REQUIRE_ORT=1, which makes this a failure. ***\n",
                path.display()
            );
            return None;
        }
        // SAFETY: onnxruntime-node's ONNX Runtime library.
        Some(unsafe { OrtLibrary::open(&path) }.expect("ONNX Runtime loads"))
    })
    .as_ref()
}

/// The real host at the newest version both sides know.
pub fn host() -> Option<HostApi> {
    Some(ort()?.host_api(u32::MAX).expect("a host API"))
}

/// The real function table (complete: the library is at least API 30).
pub fn api(host: &HostApi) -> &'static OrtApi {
    unsafe { &*host.as_ptr() }
}

/// A factory over simulated host memory with `devices` devices of 1 GiB.
pub fn factory(name: &str, devices: usize) -> Arc<Factory> {
    let limits = vec![DeviceLimits::with_total(1 << 30); devices];
    Arc::new(Factory::new(
        name,
        Arc::new(SimBackend::new(SimKind::Host, &limits)),
    ))
}

pub fn cpu() -> MemoryInfo {
    MemoryInfo::new(MemoryKind::Cpu, 0)
}

pub fn cuda(device: u32) -> MemoryInfo {
    MemoryInfo::new(MemoryKind::Cuda, device)
}

/// A view of the shared allocator for `info` of `factory` with `pairs`, for `host`.
pub fn view_with(
    host: HostApi,
    factory: &Arc<Factory>,
    info: MemoryInfo,
    pairs: &[(&str, &str)],
    options: ViewOptions,
) -> Box<OrtAllocatorView> {
    let config = ArenaConfig::from_pairs(pairs.iter().copied()).expect("config");
    let created = factory
        .create_allocator(info, Some(&config))
        .expect("created");
    let user = AllocatorUser::from_factory(factory.clone(), created);
    unsafe { OrtAllocatorView::new(user, host, options) }.expect("a view")
}

pub fn view(host: HostApi, factory: &Arc<Factory>, info: MemoryInfo) -> Box<OrtAllocatorView> {
    view_with(host, factory, info, &[], ViewOptions::default())
}

/// The struct ORT sees.
pub fn ort_struct(v: &OrtAllocatorView) -> &OrtAllocator {
    unsafe { &*v.as_ptr() }
}

/// Calls through the struct as ORT does.
pub fn alloc(v: &OrtAllocatorView, size: usize) -> *mut c_void {
    let a = v.as_ptr();
    unsafe { (ort_struct(v).Alloc.expect("Alloc"))(a, size) }
}

pub fn reserve(v: &OrtAllocatorView, size: usize) -> *mut c_void {
    let a = v.as_ptr();
    unsafe { (ort_struct(v).Reserve.expect("Reserve"))(a, size) }
}

pub fn free(v: &OrtAllocatorView, p: *mut c_void) {
    let a = v.as_ptr();
    unsafe { (ort_struct(v).Free.expect("Free"))(a, p) }
}

pub fn alloc_on_stream(v: &OrtAllocatorView, size: usize, s: *mut OrtSyncStream) -> *mut c_void {
    let a = v.as_ptr();
    unsafe { (ort_struct(v).AllocOnStream.expect("AllocOnStream"))(a, size, s) }
}

/// `Err(message)` for a status, which is released.
pub fn check(host: &HostApi, s: OrtStatusPtr) -> Result<(), String> {
    unsafe { host.check(s) }
}

/// The error code of a status (which is released).
pub fn status_code(host: &HostApi, s: OrtStatusPtr) -> Option<(i32, String)> {
    if s.0.is_null() {
        return None;
    }
    let code = unsafe { (api(host).GetErrorCode)(s.0) } as i32;
    let message = check(host, s).expect_err("a status");
    Some((code, message))
}

/// Every entry of host-made pairs, which are released.
pub fn take_pairs(host: &HostApi, p: *mut OrtKeyValuePairs) -> Vec<(String, String)> {
    let pairs = unsafe { host.read_pairs(p) };
    unsafe { (api(host).ReleaseKeyValuePairs)(p) };
    pairs
}

/// Host-made pairs holding `pairs` (release with `ReleaseKeyValuePairs`).
pub fn make_pairs(host: &HostApi, pairs: &[(&str, &str)]) -> *mut OrtKeyValuePairs {
    host.make_pairs(pairs.iter().map(|(k, v)| (*k, v.to_string())))
}

/// A stand-in for an `OrtSyncStream` of a plugin EP: the sham host's `SyncStream_GetHandle`
/// answers its `handle`.
#[repr(C)]
pub struct FakeStream {
    pub handle: usize,
}

impl FakeStream {
    pub fn new(handle: usize) -> Box<FakeStream> {
        Box::new(FakeStream { handle })
    }
    pub fn ptr(&mut self) -> *mut OrtSyncStream {
        (self as *mut FakeStream).cast()
    }
}

/// The handles the sham host's `SyncStream_GetHandle` answered, in order.
pub static HANDLES_ASKED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// How often the sham host was asked for the stream with `handle`.
pub fn handle_asked(handle: usize) -> usize {
    HANDLES_ASKED
        .lock()
        .iter()
        .filter(|&&h| h == handle)
        .count()
}

unsafe extern "system" fn fake_stream_handle(stream: *mut OrtSyncStream) -> *mut c_void {
    let handle = unsafe { (*stream.cast::<FakeStream>()).handle };
    HANDLES_ASKED.lock().push(handle);
    std::ptr::without_provenance_mut(handle)
}

/// What the sham host's `Logger_LogMessage` received: (logger, level, message).
pub static LOGGED: Mutex<Vec<(usize, i32, String)>> = Mutex::new(Vec::new());

unsafe extern "system" fn fake_log(
    logger: *const OrtLogger,
    level: OrtLoggingLevel,
    message: *const c_char,
    _file: *const ort_sys::os_char,
    _line: c_int,
    _func: *const c_char,
) -> OrtStatusPtr {
    let message = unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned();
    LOGGED.lock().push((logger.addr(), level as i32, message));
    OrtStatusPtr(std::ptr::null_mut())
}

/// The messages logged to `logger` so far.
pub fn logged(logger: *const OrtLogger) -> Vec<(i32, String)> {
    LOGGED
        .lock()
        .iter()
        .filter(|(l, _, _)| *l == logger.addr())
        .map(|(_, level, m)| (*level, m.clone()))
        .collect()
}

/// A logger token only the sham host understands.
pub fn fake_logger(n: usize) -> *const OrtLogger {
    std::ptr::without_provenance(0x1000 + n * 16)
}

/// The real table with `SyncStream_GetHandle` and `Logger_LogMessage` replaced, at `version`.
pub fn sham(version: u32) -> Option<HostApi> {
    static TABLE: OnceLock<usize> = OnceLock::new();
    let real = host()?;
    let table = *TABLE.get_or_init(|| {
        let mut copy = Box::new(std::mem::MaybeUninit::<OrtApi>::uninit());
        unsafe {
            std::ptr::copy_nonoverlapping(real.as_ptr(), copy.as_mut_ptr(), 1);
            let t = copy.as_mut_ptr();
            std::ptr::addr_of_mut!((*t).SyncStream_GetHandle).write(fake_stream_handle);
            std::ptr::addr_of_mut!((*t).Logger_LogMessage).write(fake_log);
        }
        Box::leak(copy).as_ptr().expose_provenance()
    });
    let p: *const OrtApi = std::ptr::with_exposed_provenance(table);
    Some(unsafe { HostApi::new(p, version) }.expect("sham host"))
}
