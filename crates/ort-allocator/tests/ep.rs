//! The plugin-EP allocator calls with memory infos and options made by the real ONNX Runtime
//! (issue 12): CreateAllocatorImpl, ReleaseAllocatorImpl, OnSessionRunEndImpl.
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;
use cuda_arena_core::SharedKind;
use cuda_arena_ort::ort_sys::{
    OrtAllocatorType, OrtDeviceMemoryType, OrtMemType, OrtMemoryInfo, OrtMemoryInfoDeviceType,
};
use cuda_arena_ort::{kept, EpAllocators, HostApi, OrtAllocatorView};
use std::sync::Arc;
use support::*;

/// A memory info made by the host, released on drop.
struct Info(HostApi, *mut OrtMemoryInfo);

impl Info {
    fn new(host: HostApi, name: &std::ffi::CStr, device: i32, t: OrtAllocatorType) -> Info {
        let mut p = std::ptr::null_mut();
        let s = unsafe {
            (api(&host).CreateMemoryInfo)(
                name.as_ptr(),
                t,
                device,
                OrtMemType::OrtMemTypeDefault,
                &mut p,
            )
        };
        check(&host, s).expect("a memory info");
        Info(host, p)
    }
    fn cuda(host: HostApi, device: i32) -> Info {
        Info::new(host, c"Cuda", device, OrtAllocatorType::OrtDeviceAllocator)
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        unsafe { (api(&self.0).ReleaseMemoryInfo)(self.1) }
    }
}

fn eps(host: HostApi, name: &str, devices: usize) -> EpAllocators {
    unsafe { EpAllocators::new(factory(name, devices), host, std::ptr::null(), None) }
}

fn the_view(
    p: std::ptr::NonNull<cuda_arena_ort::ort_sys::OrtAllocator>,
) -> &'static OrtAllocatorView {
    unsafe { OrtAllocatorView::from_ptr(p.as_ptr()) }.expect("a view")
}

#[test]
fn create_allocator_shares_one_arena_per_device_and_release_counts_its_users() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-share", 2);
    let (d0, d1) = (Info::cuda(host, 0), Info::cuda(host, 1));
    let a = unsafe { ep.create_allocator(d0.1, std::ptr::null(), false) }.expect("a");
    let b = unsafe { ep.create_allocator(d0.1, std::ptr::null(), false) }.expect("b");
    let c = unsafe { ep.create_allocator(d1.1, std::ptr::null(), false) }.expect("c");
    let (va, vb, vc) = (
        the_view(a.allocator),
        the_view(b.allocator),
        the_view(c.allocator),
    );
    assert!(Arc::ptr_eq(
        &va.allocator().expect("live"),
        &vb.allocator().expect("live")
    ));
    assert!(!Arc::ptr_eq(
        &va.allocator().expect("live"),
        &vc.allocator().expect("live")
    ));
    assert_eq!(ep.factory().users(SharedKind::DeviceArena, 0), 2);
    assert_eq!(
        va.memory_info(),
        d0.1.cast_const(),
        "Info answers ORT's own memory info"
    );
    let p = alloc(va, 1000);
    ep.release_allocator(a.allocator.as_ptr())
        .expect("released");
    assert_eq!(ep.factory().users(SharedKind::DeviceArena, 0), 1);
    free(vb, p);
    ep.release_allocator(b.allocator.as_ptr())
        .expect("released");
    ep.release_allocator(c.allocator.as_ptr())
        .expect("released");
    assert_eq!(ep.factory().live_allocators(), 0, "all memory back");
    assert_eq!(ep.live_allocators(), 0);
}

#[test]
fn options_are_arena_keys_and_this_factorys_environment_keys_and_nothing_else() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-options", 1);
    let d0 = Info::cuda(host, 0);
    let pairs = make_pairs(
        &host,
        &[
            ("arena.extend_strategy", "1"),
            // The region arena, which extend_strategy shapes (issue 25).
            ("arena.use_virtual_memory", "0"),
            ("ep_factory.ep-options.arena.max_mem", "1048576"),
            ("ep_factory.other-ep.arena.max_mem", "2048"),
            ("session.use_env_allocators", "1"),
        ],
    );
    let a = unsafe { ep.create_allocator(d0.1, pairs, false) }.expect("created");
    unsafe { (api(&host).ReleaseKeyValuePairs)(pairs) };
    let v = the_view(a.allocator);
    assert_eq!(v.stats().expect("live").limit, 1048576);
    let p = alloc(v, 1000);
    assert_eq!(
        v.stats().expect("live").total_allocated,
        1024,
        "same as requested"
    );
    free(v, p);
    ep.release_allocator(a.allocator.as_ptr())
        .expect("released");
}

#[test]
fn a_second_create_with_other_options_joins_the_arena_and_warns_in_the_log() {
    let Some(host) = sham(30) else { return };
    let logger = fake_logger(40);
    let ep = unsafe { EpAllocators::new(factory("ep-warn", 1), host, logger, None) };
    let d0 = Info::cuda(host, 0);
    let first = make_pairs(&host, &[("arena.max_mem", "1048576")]);
    let second = make_pairs(&host, &[("arena.max_mem", "2097152")]);
    let a = unsafe { ep.create_allocator(d0.1, first, false) }.expect("a");
    assert!(a.warnings.is_empty());
    let b = unsafe { ep.create_allocator(d0.1, second, false) }.expect("joins");
    assert_eq!(b.warnings.len(), 1);
    assert!(b.warnings[0].contains("arena.max_mem"), "{:?}", b.warnings);
    assert_eq!(
        the_view(b.allocator).stats().expect("live").limit,
        1048576,
        "kept its options"
    );
    let log = logged(logger);
    assert!(
        log.iter()
            .any(|(level, m)| *level == 2 && m.contains("arena.max_mem")),
        "{log:?}"
    );
    for p in [first, second] {
        unsafe { (api(&host).ReleaseKeyValuePairs)(p) };
    }
    ep.release_allocator(a.allocator.as_ptr())
        .expect("released");
    ep.release_allocator(b.allocator.as_ptr())
        .expect("released");
}

#[test]
fn invalid_options_are_an_invalid_config_and_change_nothing() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-invalid", 1);
    let d0 = Info::cuda(host, 0);
    let pairs = make_pairs(&host, &[("ep_factory.ep-invalid.arena.max_mem", "-5")]);
    let e = unsafe { ep.create_allocator(d0.1, pairs, false) }.expect_err("invalid");
    unsafe { (api(&host).ReleaseKeyValuePairs)(pairs) };
    assert_eq!(e.code(), "ERR_ARENA_INVALID_CONFIG");
    assert_eq!(
        (ep.live_allocators(), ep.factory().live_allocators()),
        (0, 0)
    );
}

#[test]
fn a_memory_info_cuda_arena_does_not_serve_is_refused() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-unknown", 1);
    let mut p = std::ptr::null_mut();
    let s = unsafe {
        (api(&host).CreateMemoryInfo_V2)(
            c"SomeNpu".as_ptr(),
            OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_NPU,
            0,
            0,
            OrtDeviceMemoryType::OrtDeviceMemoryType_DEFAULT,
            0,
            OrtAllocatorType::OrtDeviceAllocator,
            &mut p,
        )
    };
    check(&host, s).expect("a memory info");
    let info = Info(host, p);
    let e = unsafe { ep.create_allocator(info.1, std::ptr::null(), false) }.expect_err("not ours");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    let e = unsafe { ep.create_allocator(std::ptr::null(), std::ptr::null(), false) }
        .expect_err("NULL");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    assert_eq!(ep.factory().live_allocators(), 0);
}

#[test]
fn the_read_only_memory_info_gets_a_new_plain_allocator_each_time() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-readonly", 1);
    let ro = Info::new(host, c"Cuda", 0, OrtAllocatorType::OrtReadOnlyAllocator);
    let a = unsafe { ep.create_allocator(ro.1, std::ptr::null(), false) }.expect("a");
    let b = unsafe { ep.create_allocator(ro.1, std::ptr::null(), false) }.expect("b");
    let (va, vb) = (the_view(a.allocator), the_view(b.allocator));
    assert!(!Arc::ptr_eq(
        &va.allocator().expect("live"),
        &vb.allocator().expect("live")
    ));
    assert_eq!(
        ep.factory().users(SharedKind::DeviceArena, 0),
        0,
        "no arena"
    );
    let p = reserve(va, 1000);
    assert_eq!(
        va.stats().expect("live").total_allocated,
        1000,
        "no rounding, no region"
    );
    free(va, p);
    ep.release_allocator(a.allocator.as_ptr())
        .expect("released");
    ep.release_allocator(b.allocator.as_ptr())
        .expect("released");
    assert_eq!(ep.factory().live_allocators(), 0);
}

#[test]
fn replace_makes_a_new_arena_and_the_old_one_lives_until_its_users_release_it() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-replace", 1);
    let d0 = Info::cuda(host, 0);
    let old = unsafe { ep.create_allocator(d0.1, std::ptr::null(), false) }.expect("old");
    let new = unsafe { ep.create_allocator(d0.1, std::ptr::null(), true) }.expect("new");
    let (vo, vn) = (the_view(old.allocator), the_view(new.allocator));
    assert!(!Arc::ptr_eq(
        &vo.allocator().expect("live"),
        &vn.allocator().expect("live")
    ));
    let p = alloc(vo, 1000);
    assert!(!p.is_null(), "the replaced arena still serves its holder");
    free(vo, p);
    ep.release_allocator(old.allocator.as_ptr())
        .expect("released");
    assert_eq!(ep.factory().live_allocators(), 1);
    ep.release_allocator(new.allocator.as_ptr())
        .expect("released");
    assert_eq!(ep.factory().live_allocators(), 0);
}

#[test]
fn a_release_of_anything_but_a_live_allocator_is_refused_untouched() {
    let Some(host) = host() else { return };
    let ep = eps(host, "ep-release", 1);
    let d0 = Info::cuda(host, 0);
    let a = unsafe { ep.create_allocator(d0.1, std::ptr::null(), false) }.expect("a");
    ep.release_allocator(a.allocator.as_ptr())
        .expect("released");
    let mut local = 0u64;
    for bad in [
        a.allocator.as_ptr(),
        std::ptr::null_mut(),
        (&mut local as *mut u64).cast(),
    ] {
        let e = ep.release_allocator(bad).expect_err("not live");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
    }
    assert_eq!(
        ep.factory().live_allocators(),
        0,
        "nothing was counted twice"
    );
}

#[test]
fn run_end_resets_a_streams_chunks_on_that_device_only() {
    let Some(host) = sham(30) else { return };
    let ep = eps(host, "ep-run-end", 2);
    let d0 = Info::cuda(host, 0);
    // ORT's own rule, which the region arena keeps bit for bit (the default mode may also
    // hand the chunk over after waiting for the device: issue 25).
    let pairs = make_pairs(&host, &[("arena.use_virtual_memory", "0")]);
    let a = unsafe { ep.create_allocator(d0.1, pairs, false) }.expect("a");
    unsafe { (api(&host).ReleaseKeyValuePairs)(pairs) };
    let v = the_view(a.allocator);
    let (mut s, mut t) = (FakeStream::new(0x51), FakeStream::new(0x52));
    let p = alloc_on_stream(v, 4096, s.ptr());
    free(v, p);
    let q = alloc_on_stream(v, 4096, t.ptr());
    assert_ne!(q, p, "still tagged with stream 0x51");
    free(v, q);
    ep.run_end(1, 0x51);
    ep.run_end(0, 0x9999);
    let r = alloc_on_stream(v, 4096, t.ptr());
    assert_eq!(
        r, q,
        "another device's run end and an unknown handle change nothing"
    );
    free(v, r);
    ep.run_end(0, 0x51);
    assert_eq!(
        alloc_on_stream(v, 4096, t.ptr()),
        p.min(q),
        "reset and merged"
    );
    ep.release_allocator(a.allocator.as_ptr())
        .expect("released");
}

#[test]
fn dropping_the_allocators_releases_what_ort_still_holds_and_keeps_the_structs() {
    let Some(host) = host() else { return };
    let f = factory("ep-drop", 1);
    let ep = unsafe { EpAllocators::new(f.clone(), host, std::ptr::null(), None) };
    let d0 = Info::cuda(host, 0);
    let a = unsafe { ep.create_allocator(d0.1, std::ptr::null(), false) }.expect("a");
    drop(ep);
    assert_eq!(f.live_allocators(), 0, "its users let go");
    let v = kept(a.allocator.as_ptr()).expect("kept until exit");
    assert!(
        v.is_released() && alloc(v, 100).is_null(),
        "a late call is a dead end"
    );
}
