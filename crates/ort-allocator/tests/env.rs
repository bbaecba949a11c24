//! Registration with ONNX Runtime's process-wide environment (issue 12). One test registers:
//! the environment is shared by every test of this binary.
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;
use cuda_arena_ort::ort_sys::{OrtEpDevice, OrtSyncStream};
use cuda_arena_ort::{keep_until_exit, kept, release_kept, OrtEnvRef};
use std::ptr::null_mut;
use support::*;

#[test]
fn register_allocator_takes_the_view_and_ort_allocates_from_it_and_reads_its_stats() {
    let Some(host) = host() else { return };
    let api = api(&host);
    let f = factory("env-register", 1);
    let env = OrtEnvRef::create(host, "cuda-arena-test").expect("env");
    let p = keep_until_exit(view(host, &f, cpu()));
    let v = kept(p).expect("kept");
    unsafe { env.register_allocator(p) }.expect("ORT accepts an OrtDeviceAllocator view");

    // What sessions get from the env is ORT's wrapper of the view: its traffic and its stats
    // are the arena's.
    let shared_stats = |shared| {
        let mut out = null_mut();
        check(&host, unsafe { (api.AllocatorGetStats)(shared, &mut out) }).expect("stats");
        take_pairs(&host, out)
    };
    let mut shared = null_mut();
    check(&host, unsafe {
        (api.GetSharedAllocator)(env.as_ptr(), v.memory_info(), &mut shared)
    })
    .expect("the env has it");
    let mut q = null_mut();
    check(&host, unsafe { (api.AllocatorAlloc)(shared, 3000, &mut q) }).expect("alloc");
    assert_eq!(
        v.stats().expect("live").requested_in_use,
        3000,
        "ORT's alloc reached the arena"
    );
    let in_use = shared_stats(shared)
        .into_iter()
        .find(|(k, _)| k == "InUse")
        .map(|(_, v)| v);
    assert_eq!(in_use, v.stats().expect("live").get("InUse"));
    check(&host, unsafe { (api.AllocatorFree)(shared, q) }).expect("free");
    assert_eq!(v.stats().expect("live").in_use, 0);

    // A second registration for the same memory info replaces the first (ORT 1.30).
    let f2 = factory("env-register-2", 1);
    let second = keep_until_exit(view(host, &f2, cpu()));
    unsafe { env.register_allocator(second) }.expect("replaces");
    let mut shared = null_mut();
    check(&host, unsafe {
        (api.GetSharedAllocator)(env.as_ptr(), v.memory_info(), &mut shared)
    })
    .expect("the env has one");
    check(&host, unsafe { (api.AllocatorAlloc)(shared, 100, &mut q) }).expect("alloc");
    assert_eq!(
        kept(second)
            .expect("kept")
            .stats()
            .expect("live")
            .requested_in_use,
        100
    );
    assert_eq!(
        v.stats().expect("live").num_allocs,
        1,
        "the first view is no longer asked"
    );
    check(&host, unsafe { (api.AllocatorFree)(shared, q) }).expect("free");

    unsafe { env.unregister_allocator(v.memory_info()) }.expect("unregistered");
    let e = unsafe { env.unregister_allocator(v.memory_info()) }.expect_err("none registered");
    assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
}

#[test]
fn the_cpu_build_makes_no_sync_stream_for_any_device() {
    // Why AllocOnStream is tested through a sham host (tests/streams.rs).
    let Some(host) = host() else { return };
    let api = api(&host);
    let env = OrtEnvRef::create(host, "cuda-arena-test").expect("env");
    let mut devices: *const *const OrtEpDevice = std::ptr::null();
    let mut n = 0usize;
    check(&host, unsafe {
        (api.GetEpDevices)(env.as_ptr(), &mut devices, &mut n)
    })
    .expect("devices");
    assert!(n >= 1, "the CPU execution provider has a device");
    for i in 0..n {
        let device = unsafe { *devices.add(i) };
        let mut stream: *mut OrtSyncStream = null_mut();
        let s = unsafe { (api.CreateSyncStreamForEpDevice)(device, std::ptr::null(), &mut stream) };
        let made = check(&host, s).is_ok() && !stream.is_null();
        if made {
            unsafe { (api.ReleaseSyncStream)(stream) };
        }
        assert!(!made, "device {i} made a sync stream");
    }
}

#[test]
fn a_kept_view_releases_once_and_anything_else_is_refused_untouched() {
    let Some(host) = host() else { return };
    let f = factory("env-kept", 1);
    let p = keep_until_exit(view(host, &f, cpu()));
    assert_eq!(f.live_allocators(), 1);
    release_kept(p).expect("released");
    assert_eq!(
        f.live_allocators(),
        0,
        "its user let go: the allocator is retired"
    );
    assert_eq!(
        release_kept(p).map_err(|e| e.code()),
        Err("ERR_ARENA_RELEASED")
    );
    let mut local = 0u64;
    for other in [null_mut(), (&mut local as *mut u64).cast()] {
        assert_eq!(
            release_kept(other).map_err(|e| e.code()),
            Err("ERR_ARENA_INVALID_ARGUMENT")
        );
    }
    assert!(
        alloc(kept(p).expect("still there"), 100).is_null(),
        "a dead end"
    );
}
