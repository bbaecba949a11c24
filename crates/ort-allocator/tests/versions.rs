//! Version negotiation against the real ONNX Runtime (issue 12).
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;
use cuda_arena_ort::{HostApi, MAX_ORT_API_VERSION, MIN_ORT_API_VERSION};
use support::*;

#[test]
fn get_api_gives_the_librarys_own_version_and_null_past_it() {
    let Some(ort) = ort() else { return };
    let newest = ort.api_version().expect("a version string like 1.30.0");
    assert!(!ort.get_api(newest).is_null());
    assert!(!ort.get_api(MIN_ORT_API_VERSION).is_null());
    assert!(
        ort.get_api(newest + 1).is_null(),
        "GetApi({}) past the library",
        newest + 1
    );
}

#[test]
fn the_library_api_is_the_newest_version_both_sides_know() {
    let Some(ort) = ort() else { return };
    let newest = ort.api_version().expect("version");
    let host = ort.host_api(u32::MAX).expect("a host API");
    assert_eq!(host.version(), newest.min(MAX_ORT_API_VERSION));
    assert_eq!(ort.host_api(MIN_ORT_API_VERSION).expect("23").version(), 23);
    let e = ort.host_api(MIN_ORT_API_VERSION - 1).expect_err("too old");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
}

#[test]
fn versions_below_23_are_refused_with_a_coded_error() {
    let Some(real) = host() else { return };
    for v in [0, 1, 22] {
        let e = unsafe { HostApi::new(real.as_ptr(), v) }.expect_err("too old");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT", "version {v}");
    }
}

#[test]
fn the_struct_says_the_asked_version_capped_at_the_newest_layout_known() {
    let Some(real) = host() else { return };
    let f = factory("versions", 1);
    for (asked, expected) in [
        (23, 23),
        (25, 25),
        (31, MAX_ORT_API_VERSION),
        (u32::MAX, MAX_ORT_API_VERSION),
    ] {
        let host = unsafe { HostApi::new(real.as_ptr(), asked) }.expect("accepted");
        let v = view(host, &f, cuda(0));
        assert_eq!(ort_struct(&v).version, expected, "asked {asked}");
        assert_eq!(v.version(), expected);
    }
}

#[test]
fn shrink_is_offered_from_version_25_and_alloc_on_stream_only_for_stream_aware_memory() {
    let Some(real) = host() else { return };
    let f = factory("versions-fields", 1);
    let v24 = view(
        unsafe { HostApi::new(real.as_ptr(), 24) }.expect("24"),
        &f,
        cuda(0),
    );
    assert!(ort_struct(&v24).Shrink.is_none());
    assert!(ort_struct(&v24).AllocOnStream.is_some());
    let v30 = view(real, &f, cuda(0));
    assert!(ort_struct(&v30).Shrink.is_some());
    let cpu_view = view(real, &f, cpu());
    assert!(
        ort_struct(&cpu_view).AllocOnStream.is_none(),
        "the CPU arena has no streams"
    );
    assert!(ort_struct(&cpu_view).Reserve.is_some() && ort_struct(&cpu_view).GetStats.is_some());
}
