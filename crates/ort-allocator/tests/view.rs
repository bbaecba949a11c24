//! The `OrtAllocator` view, called through its struct as ONNX Runtime calls it, with ORT's own
//! functions reading what it answers (issue 12).
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;
use cuda_arena_core::{MemoryKind, STATS_KEYS};
use cuda_arena_ort::ort_sys::{OrtAllocatorType, OrtErrorCode, OrtMemType};
use cuda_arena_ort::{clear_last_error, last_error, ViewOptions};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;
use support::*;

#[test]
fn info_is_a_memory_info_ort_reads_back_as_cpu_cuda_or_cuda_pinned_with_the_device() {
    let Some(host) = host() else { return };
    let api = api(&host);
    let f = factory("view-info", 2);
    for (info, mem_type) in [
        (cpu(), OrtMemType::OrtMemTypeDefault),
        (cuda(1), OrtMemType::OrtMemTypeDefault),
        (
            cuda_arena_core::MemoryInfo::new(MemoryKind::CudaPinned, 1),
            OrtMemType::OrtMemTypeCPUOutput,
        ),
    ] {
        let v = view(host, &f, info);
        let p = unsafe { (ort_struct(&v).Info.expect("Info"))(v.as_ptr()) };
        assert_eq!(p, v.memory_info());
        let mut name: *const c_char = std::ptr::null();
        check(&host, unsafe { (api.MemoryInfoGetName)(p, &mut name) }).expect("name");
        assert_eq!(
            unsafe { CStr::from_ptr(name) }.to_str(),
            Ok(info.kind.name())
        );
        let mut id: c_int = -1;
        check(&host, unsafe { (api.MemoryInfoGetId)(p, &mut id) }).expect("id");
        assert_eq!(id as u32, info.device_id);
        let mut t: i32 = -7;
        check(&host, unsafe {
            (api.MemoryInfoGetType)(p, (&mut t as *mut i32).cast())
        })
        .expect("type");
        assert_eq!(t, OrtAllocatorType::OrtDeviceAllocator as i32, "{info}");
        let mut m: i32 = -7;
        check(&host, unsafe {
            (api.MemoryInfoGetMemType)(p, (&mut m as *mut i32).cast())
        })
        .expect("mem type");
        assert_eq!(m, mem_type as i32, "{info}");
        // And the view reads ORT's answer back as what it serves.
        assert_eq!(unsafe { host.read_memory_info(p) }.expect("read"), info);
    }
}

#[test]
fn get_stats_through_ort_gives_every_key_with_the_allocators_values() {
    let Some(host) = host() else { return };
    let f = factory("view-stats", 1);
    let v = view(host, &f, cpu());
    let p = alloc(&v, 1000);
    let r = reserve(&v, 5000);
    assert!(!p.is_null() && !r.is_null());
    let mut out = null_mut();
    check(&host, unsafe {
        (api(&host).AllocatorGetStats)(v.as_ptr(), &mut out)
    })
    .expect("stats");
    let pairs = take_pairs(&host, out);
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, STATS_KEYS);
    let stats = v.stats().expect("live");
    for (k, value) in &pairs {
        assert_eq!(Some(value.clone()), stats.get(k), "{k}");
    }
    assert_eq!(stats.num_reserves, 1);
    assert_eq!(stats.in_use, 1024 + 5000);
    free(&v, p);
    free(&v, r);
}

#[test]
fn alloc_reserve_and_free_give_writable_memory_and_return_it() {
    let Some(host) = host() else { return };
    let f = factory("view-alloc", 1);
    let v = view(host, &f, cpu());
    let p = alloc(&v, 4096);
    let r = reserve(&v, 3000);
    assert!(!p.is_null() && !r.is_null());
    assert_eq!(p.addr() % 256, 0, "256-byte aligned");
    unsafe {
        std::ptr::write_bytes(p.cast::<u8>(), 0xab, 4096);
        std::ptr::write_bytes(r.cast::<u8>(), 0xcd, 3000);
    }
    let s = v.stats().expect("live");
    assert_eq!(
        (s.num_allocs, s.num_reserves, s.reserved_bytes),
        (2, 1, 3000)
    );
    free(&v, p);
    free(&v, r);
    let s = v.stats().expect("live");
    assert_eq!((s.in_use, s.reserved_bytes), (0, 0));
    assert!(alloc(&v, 0).is_null(), "size 0 is NULL");
    assert!(reserve(&v, 0).is_null());
}

#[test]
fn a_failed_alloc_is_null_with_the_reason_as_last_error_and_in_the_hosts_log() {
    let Some(host) = sham(30) else { return };
    let f = factory("view-oom", 1);
    let logger = fake_logger(1);
    let options = ViewOptions {
        logger,
        ..ViewOptions::default()
    };
    let v = view_with(host, &f, cpu(), &[("arena.max_mem", "1048576")], options);
    clear_last_error();
    let before = v.stats().expect("live");
    assert!(alloc(&v, 2 << 20).is_null());
    assert_eq!(
        last_error().map(|e| e.code()),
        Some("ERR_ARENA_OUT_OF_MEMORY")
    );
    assert!(reserve(&v, 2 << 20).is_null());
    assert_eq!(
        v.stats().expect("live"),
        before,
        "a failed call changes nothing"
    );
    let log = logged(logger);
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log
        .iter()
        .all(|(level, m)| *level == 3 && m.contains("ERR_ARENA_OUT_OF_MEMORY")));
}

#[test]
fn free_of_foreign_interior_or_freed_pointers_is_logged_and_ignored() {
    let Some(host) = sham(30) else { return };
    let f = factory("view-foreign", 1);
    let logger = fake_logger(2);
    let options = ViewOptions {
        logger,
        ..ViewOptions::default()
    };
    let v = view_with(host, &f, cpu(), &[], options);
    let p = alloc(&v, 1000);
    let q = alloc(&v, 1000);
    free(&v, q);
    let before = v.stats().expect("live");
    let mut local = 0u64;
    for bad in [
        (&mut local as *mut u64).cast::<c_void>(),
        unsafe { p.cast::<u8>().add(256) }.cast(),
        q,
    ] {
        clear_last_error();
        free(&v, bad);
        assert_eq!(
            last_error().map(|e| e.code()),
            Some("ERR_ARENA_UNKNOWN_POINTER")
        );
    }
    free(&v, null_mut());
    assert_eq!(v.stats().expect("live"), before);
    let log = logged(logger);
    assert_eq!(log.len(), 3);
    assert!(log
        .iter()
        .all(|(level, m)| *level == 2 && m.contains("ignores the address")));
    free(&v, p);
}

#[test]
fn get_stats_with_a_null_out_is_an_invalid_argument_status() {
    let Some(host) = host() else { return };
    let f = factory("view-null-out", 1);
    let v = view(host, &f, cpu());
    let get_stats = ort_struct(&v).GetStats.expect("GetStats");
    let s = unsafe { get_stats(v.as_ptr(), null_mut()) };
    let (code, message) = status_code(&host, s).expect("an error status");
    assert_eq!(code, OrtErrorCode::ORT_INVALID_ARGUMENT as i32);
    assert!(
        message.starts_with("ERR_ARENA_INVALID_ARGUMENT"),
        "{message}"
    );
}

#[test]
fn shrink_returns_wholly_free_regions() {
    let Some(host) = host() else { return };
    let f = factory("view-shrink", 1);
    let v = view(host, &f, cuda(0));
    let p = alloc(&v, 4 << 20);
    free(&v, p);
    let held = v.stats().expect("live").total_allocated;
    assert!(held > 0);
    let shrink = ort_struct(&v).Shrink.expect("Shrink");
    assert_eq!(status_code(&host, unsafe { shrink(v.as_ptr()) }), None);
    let s = v.stats().expect("live");
    assert_eq!(s.total_allocated, 0);
    assert!(s.num_arena_shrinkages >= 1);
}

#[test]
fn a_view_used_after_its_release_gives_null_ignores_frees_and_answers_errors() {
    let Some(host) = host() else { return };
    let f = factory("view-released", 1);
    let v = view(host, &f, cuda(0));
    let p = alloc(&v, 1000);
    assert!(v.release(), "released now");
    assert!(!v.release(), "a second release does nothing");
    assert_eq!(
        f.live_allocators(),
        0,
        "the last user: the allocator is retired"
    );
    assert_eq!(f.device_stats(0).expect("device").raw_bytes_outstanding, 0);
    clear_last_error();
    assert!(alloc(&v, 1000).is_null());
    assert_eq!(last_error().map(|e| e.code()), Some("ERR_ARENA_RELEASED"));
    assert!(reserve(&v, 1000).is_null());
    free(&v, p);
    let info = unsafe { (ort_struct(&v).Info.expect("Info"))(v.as_ptr()) };
    assert_eq!(info, v.memory_info(), "Info still answers");
    let mut out = null_mut();
    let st = unsafe { (ort_struct(&v).GetStats.expect("GetStats"))(v.as_ptr(), &mut out) };
    assert!(status_code(&host, st).is_some_and(|(_, m)| m.starts_with("ERR_ARENA_RELEASED")));
    let st = unsafe { (ort_struct(&v).Shrink.expect("Shrink"))(v.as_ptr()) };
    assert!(status_code(&host, st).is_some_and(|(_, m)| m.starts_with("ERR_ARENA_RELEASED")));
}

#[test]
fn alloc_on_stream_after_release_is_null_without_asking_the_host_for_the_stream() {
    let Some(host) = sham(30) else { return };
    let f = factory("view-released-stream", 1);
    let v = view(host, &f, cuda(0));
    v.release();
    let mut s = FakeStream::new(0x7e1e);
    clear_last_error();
    assert!(alloc_on_stream(&v, 1000, s.ptr()).is_null());
    assert_eq!(last_error().map(|e| e.code()), Some("ERR_ARENA_RELEASED"));
    assert_eq!(
        handle_asked(0x7e1e),
        0,
        "a released view calls nothing of the host's"
    );
}

#[test]
fn alloc_on_stream_with_a_null_stream_allocates_as_alloc() {
    let Some(host) = host() else { return };
    let f = factory("view-null-stream", 1);
    let v = view(host, &f, cuda(0));
    let p = alloc_on_stream(&v, 4096, null_mut());
    assert!(!p.is_null());
    assert_eq!(v.streams().expect("live").len(), 0, "no stream remembered");
    free(&v, p);
    // A chunk freed with no stream is reused by plain Alloc at once.
    assert_eq!(alloc(&v, 4096), p);
}
