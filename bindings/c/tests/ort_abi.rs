//! Issue 12: the ONNX Runtime entry points of the C ABI, called through their Rust side with
//! the real ONNX Runtime's `OrtApi`, memory infos and key/value pairs; at their edges (NULL,
//! old versions, released views, foreign pointers, double releases). Skips loudly without
//! ONNX Runtime unless CUDA_ARENA_REQUIRE_ORT=1.
#![allow(clippy::undocumented_unsafe_blocks)]

use cuda_arena::*;
use cuda_arena_ort::ort_sys::{
    OrtAllocator, OrtAllocatorType, OrtApi, OrtKeyValuePairs, OrtMemType, OrtMemoryInfo, OrtStatus,
};
use cuda_arena_ort::OrtLibrary;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

fn api() -> Option<&'static OrtApi> {
    static LIB: OnceLock<Option<OrtLibrary>> = OnceLock::new();
    let lib = LIB.get_or_init(|| {
        let path = std::env::var_os("CUDA_ARENA_ORT_LIB")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let arch = if cfg!(target_arch = "aarch64") {
                    "arm64"
                } else {
                    "x64"
                };
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../node_modules/onnxruntime-node/bin/napi-v6/linux")
                    .join(arch)
                    .join("libonnxruntime.so.1")
            });
        if !path.exists() {
            let required = std::env::var("CUDA_ARENA_REQUIRE_ORT").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "CUDA_ARENA_REQUIRE_ORT=1 but no ONNX Runtime at {}",
                path.display()
            );
            eprintln!(
                "\n*** SKIPPED: no ONNX Runtime at {} (npm ci, or CUDA_ARENA_ORT_LIB) ***\n",
                path.display()
            );
            return None;
        }
        Some(unsafe { OrtLibrary::open(&path) }.expect("loads"))
    });
    let api = lib.as_ref()?.get_api(30);
    Some(unsafe { &*api })
}

const V: u32 = 30;

fn handle(memory: &CStr) -> *mut cuda_arena_allocator {
    let a = unsafe {
        cuda_arena_create(
            c"host".as_ptr(),
            memory.as_ptr(),
            0,
            null(),
            null(),
            0,
            null_mut(),
            0,
        )
    };
    assert!(!a.is_null());
    a
}

fn view(api: &OrtApi, a: *mut cuda_arena_allocator, version: u32) -> *mut OrtAllocator {
    unsafe { cuda_arena_ort_allocator(a, api, version, null(), null_mut(), 0) }
}

fn alloc(v: *mut OrtAllocator, size: usize) -> *mut c_void {
    unsafe { ((*v).Alloc.expect("Alloc"))(v, size) }
}

fn free(v: *mut OrtAllocator, p: *mut c_void) {
    unsafe { ((*v).Free.expect("Free"))(v, p) }
}

/// A status's message (released), or None.
fn message(api: &OrtApi, s: *mut OrtStatus) -> Option<String> {
    if s.is_null() {
        return None;
    }
    let m = unsafe { CStr::from_ptr((api.GetErrorMessage)(s)) }
        .to_string_lossy()
        .into_owned();
    unsafe { (api.ReleaseStatus)(s) };
    Some(m)
}

fn last_error() -> String {
    let mut buf = [0 as std::ffi::c_char; 512];
    cuda_arena_last_error(buf.as_mut_ptr(), buf.len());
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_null_api_or_a_version_below_23_is_refused_and_newer_versions_are_capped() {
    let Some(api) = api() else { return };
    let a = handle(c"Cpu");
    let mut err = [0 as std::ffi::c_char; 256];
    let v = unsafe { cuda_arena_ort_allocator(a, null(), V, null(), err.as_mut_ptr(), err.len()) };
    assert!(v.is_null());
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_INVALID_ARGUMENT
    );
    assert!(unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .starts_with("ERR_ARENA_INVALID_ARGUMENT"));
    for old in [0, 1, 22] {
        assert!(view(api, a, old).is_null(), "version {old}");
        assert_eq!(
            cuda_arena_last_error_code(),
            CUDA_ARENA_ERR_INVALID_ARGUMENT
        );
    }
    for (asked, expected) in [(23, 23), (31, 30), (u32::MAX, 30)] {
        let v = view(api, a, asked);
        assert!(!v.is_null());
        assert_eq!(unsafe { (*v).version }, expected);
        assert_eq!(cuda_arena_ort_allocator_release(v), CUDA_ARENA_OK);
    }
    cuda_arena_destroy(a);
}

#[test]
fn a_null_or_destroyed_handle_makes_no_view() {
    let Some(api) = api() else { return };
    assert!(view(api, null_mut(), V).is_null());
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_INVALID_ARGUMENT
    );
    let a = handle(c"Cpu");
    cuda_arena_destroy(a);
    assert!(view(api, a, V).is_null());
    assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_ERR_RELEASED);
}

#[test]
fn the_view_is_its_own_user_and_its_release_returns_the_memory_and_leaves_a_dead_end() {
    let Some(api) = api() else { return };
    let a = handle(c"Cuda");
    let v = view(api, a, V);
    cuda_arena_destroy(a);
    let p = alloc(v, 5000);
    assert!(
        !p.is_null(),
        "the view keeps the arena after its handle is destroyed"
    );
    free(v, p);
    assert_eq!(cuda_arena_ort_allocator_release(v), CUDA_ARENA_OK);
    assert!(alloc(v, 5000).is_null(), "a dead end after the release");
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_RELEASED,
        "in the C last error"
    );
    free(v, p);
    let mut out = null_mut();
    let s = unsafe { ((*v).GetStats.expect("GetStats"))(v, &mut out) };
    assert!(message(api, s.0).is_some_and(|m| m.starts_with("ERR_ARENA_RELEASED")));
    assert!(!unsafe { ((*v).Info.expect("Info"))(v) }.is_null());
    assert_eq!(
        cuda_arena_ort_allocator_release(v),
        CUDA_ARENA_ERR_RELEASED,
        "double release"
    );
    let mut local = 0u64;
    let foreign: *mut OrtAllocator = (&mut local as *mut u64).cast();
    assert_eq!(
        cuda_arena_ort_allocator_release(foreign),
        CUDA_ARENA_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        cuda_arena_ort_allocator_release(null_mut()),
        CUDA_ARENA_ERR_INVALID_ARGUMENT
    );
}

#[test]
fn a_failed_alloc_or_a_foreign_free_through_the_view_is_the_c_last_error() {
    let Some(api) = api() else { return };
    let keys = [c"arena.max_mem".as_ptr()];
    let values = [c"1048576".as_ptr()];
    let a = unsafe {
        cuda_arena_create(
            c"host".as_ptr(),
            c"CudaPinned".as_ptr(),
            0,
            keys.as_ptr(),
            values.as_ptr(),
            1,
            null_mut(),
            0,
        )
    };
    let v = view(api, a, V);
    assert!(alloc(v, 4 << 20).is_null());
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_OUT_OF_MEMORY,
        "{}",
        last_error()
    );
    let mut local = 0u64;
    free(v, (&mut local as *mut u64).cast());
    assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_ERR_UNKNOWN_POINTER);
    assert!(
        unsafe { (*v).AllocOnStream }.is_none(),
        "pinned memory has no streams"
    );
    cuda_arena_ort_allocator_release(v);
    cuda_arena_destroy(a);
}

/// A memory info made by ORT; the caller releases it.
fn memory_info(api: &OrtApi, name: &CStr, t: OrtAllocatorType) -> *mut OrtMemoryInfo {
    let mut p = null_mut();
    let s = unsafe {
        (api.CreateMemoryInfo)(name.as_ptr(), t, 0, OrtMemType::OrtMemTypeDefault, &mut p)
    };
    assert!(message(api, s.0).is_none());
    p
}

fn pairs(api: &OrtApi, kv: &[(&CStr, &CStr)]) -> *mut OrtKeyValuePairs {
    let mut p = null_mut();
    unsafe { (api.CreateKeyValuePairs)(&mut p) };
    for (k, v) in kv {
        unsafe { (api.AddKeyValuePair)(p, k.as_ptr(), v.as_ptr()) };
    }
    p
}

fn ep(api: &OrtApi, name: &CStr) -> *mut cuda_arena_ort_ep {
    let ep = unsafe {
        cuda_arena_ort_ep_create(
            c"host".as_ptr(),
            name.as_ptr(),
            api,
            V,
            null(),
            null_mut(),
            0,
        )
    };
    assert!(!ep.is_null(), "{}", last_error());
    ep
}

fn create(
    ep: *mut cuda_arena_ort_ep,
    info: *const OrtMemoryInfo,
    kv: *const OrtKeyValuePairs,
) -> (*mut OrtStatus, *mut OrtAllocator) {
    let mut out: *mut OrtAllocator = std::ptr::without_provenance_mut(1);
    let s = unsafe { cuda_arena_ort_ep_create_allocator(ep, info, kv, 0, &mut out) };
    (s, out)
}

#[test]
fn the_ep_calls_share_an_arena_warn_on_other_options_and_count_its_users() {
    let Some(api) = api() else { return };
    let ep = ep(api, c"cuda-arena-c-ep-share");
    let info = memory_info(api, c"Cuda", OrtAllocatorType::OrtDeviceAllocator);
    let first = pairs(
        api,
        &[(
            c"ep_factory.cuda-arena-c-ep-share.arena.max_mem",
            c"1048576",
        )],
    );
    let second = pairs(api, &[(c"arena.max_mem", c"2097152")]);
    let (s, a) = create(ep, info, first);
    assert!(s.is_null() && !a.is_null());
    let (s, b) = create(ep, info, second);
    assert!(s.is_null() && !b.is_null());
    let mut w = [0 as std::ffi::c_char; 512];
    assert!(cuda_arena_last_warning(w.as_mut_ptr(), w.len()) > 0);
    assert!(unsafe { CStr::from_ptr(w.as_ptr()) }
        .to_string_lossy()
        .contains("arena.max_mem"));
    let p = alloc(a, 1000);
    free(b, p); // one arena behind both
    assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_OK);
    let s = cuda_arena_ort_ep_run_end(ep, 0, std::ptr::without_provenance_mut(0x5));
    assert!(s.is_null());
    cuda_arena_ort_ep_release_allocator(ep, a);
    assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_OK);
    cuda_arena_ort_ep_release_allocator(ep, a);
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_INVALID_ARGUMENT,
        "released before"
    );
    cuda_arena_ort_ep_release_allocator(ep, b);
    unsafe {
        (api.ReleaseKeyValuePairs)(first);
        (api.ReleaseKeyValuePairs)(second);
        (api.ReleaseMemoryInfo)(info);
    }
    cuda_arena_ort_ep_destroy(ep);
    cuda_arena_ort_ep_destroy(ep);
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_RELEASED,
        "destroyed twice"
    );
}

#[test]
fn ep_failures_are_ort_statuses_with_the_code_and_no_allocator() {
    let Some(api) = api() else { return };
    let ep = ep(api, c"cuda-arena-c-ep-fail");
    let info = memory_info(api, c"Cuda", OrtAllocatorType::OrtDeviceAllocator);
    let bad = pairs(api, &[(c"arena.extend_strategy", c"7")]);
    let (s, out) = create(ep, info, bad);
    assert!(out.is_null(), "*out is NULL on failure");
    assert!(message(api, s).is_some_and(|m| m.starts_with("ERR_ARENA_INVALID_CONFIG")));
    let (s, out) = create(ep, null(), null());
    assert!(out.is_null());
    assert!(message(api, s).is_some_and(|m| m.starts_with("ERR_ARENA_INVALID_ARGUMENT")));
    let s = unsafe { cuda_arena_ort_ep_create_allocator(ep, info, null(), 0, null_mut()) };
    assert!(message(api, s).is_some_and(|m| m.contains("out is NULL")));
    let s = cuda_arena_ort_ep_run_end(ep, -1, std::ptr::without_provenance_mut(0x5));
    assert!(message(api, s).is_some_and(|m| m.starts_with("ERR_ARENA_INVALID_ARGUMENT")));
    cuda_arena_ort_ep_destroy(ep);
    let (s, out) = create(ep, info, null());
    assert!(out.is_null());
    assert!(
        message(api, s).is_some_and(|m| m.starts_with("ERR_ARENA_RELEASED")),
        "a destroyed EP handle"
    );
    let (s, _) = create(null_mut(), info, null());
    assert!(message(api, s).is_some_and(|m| m.starts_with("ERR_ARENA_INVALID_ARGUMENT")));
    unsafe {
        (api.ReleaseKeyValuePairs)(bad);
        (api.ReleaseMemoryInfo)(info);
    }
}

#[test]
fn an_ep_handle_needs_a_backend_a_name_and_an_api() {
    let Some(api) = api() else { return };
    let make = |backend: &CStr, name: &CStr, api: *const OrtApi, version: u32| unsafe {
        cuda_arena_ort_ep_create(
            backend.as_ptr(),
            name.as_ptr(),
            api,
            version,
            null(),
            null_mut(),
            0,
        )
    };
    assert!(make(c"gpu", c"x", api, V).is_null());
    assert!(make(c"host", c"", api, V).is_null());
    assert!(make(c"host", c"x", null(), V).is_null());
    assert!(make(c"host", c"x", api, 22).is_null());
    assert_eq!(
        cuda_arena_last_error_code(),
        CUDA_ARENA_ERR_INVALID_ARGUMENT
    );
    let null_backend =
        unsafe { cuda_arena_ort_ep_create(null(), c"x".as_ptr(), api, V, null(), null_mut(), 0) };
    assert!(null_backend.is_null());
}
