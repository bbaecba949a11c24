//! The allocator factory: sharing, counting, teardown, isolation, options, the memory pool.

mod common;
use common::*;
use cuda_arena_core::{
    named_factory, AllocatorType, ArenaConfig, DeviceLimits, Factory, MemoryInfo, MemoryKind,
    Released, SharedKind, SimBackend, SimKind, Stream,
};
use std::sync::Arc;

fn factory(kind: SimKind, devices: usize) -> Factory {
    let limits = vec![DeviceLimits::with_total(GIB); devices];
    Factory::new("test", Arc::new(SimBackend::new(kind, &limits)))
}

fn cuda(device: u32) -> MemoryInfo {
    MemoryInfo::new(MemoryKind::Cuda, device)
}

#[test]
fn the_device_arena_is_created_once_and_shared() {
    let f = factory(SimKind::Virtual, 1);
    let a = f.create_allocator(cuda(0), None).expect("created");
    let b = f.create_allocator(cuda(0), None).expect("shared");
    assert!(Arc::ptr_eq(&a.allocator, &b.allocator));
    assert_eq!(a.kind, Some(SharedKind::DeviceArena));
    assert_eq!(f.users(SharedKind::DeviceArena, 0), 2);
    assert!(a.warnings.is_empty() && b.warnings.is_empty());
}

#[test]
fn the_last_release_returns_all_memory_to_the_device() {
    let f = factory(SimKind::Host, 1);
    let a = f
        .create_allocator(cuda(0), None)
        .expect("created")
        .allocator;
    let b = f.create_allocator(cuda(0), None).expect("shared").allocator;
    let p = alloc(&*a, 5000);
    let _r = a.reserve(1 << 20).expect("fits");
    assert!(f.device_stats(0).expect("device").raw_bytes_outstanding > 0);
    assert_eq!(f.release_allocator(&a), Released::Counted(1));
    drop(a);
    a_is_still_usable(&*b, p);
    assert_eq!(f.release_allocator(&b), Released::Destroyed);
    drop(b);
    let s = f.device_stats(0).expect("device");
    assert_eq!(s.raw_bytes_outstanding, 0);
    assert_eq!(s.raw_allocs, s.raw_frees);
}

fn a_is_still_usable(a: &dyn cuda_arena_core::Allocator, p: u64) {
    assert_eq!(a.requested_size(p), Ok(5000));
}

#[test]
fn devices_are_isolated() {
    let f = factory(SimKind::Virtual, 2);
    let a0 = f
        .create_allocator(cuda(0), None)
        .expect("device 0")
        .allocator;
    let a1 = f
        .create_allocator(cuda(1), None)
        .expect("device 1")
        .allocator;
    assert!(!Arc::ptr_eq(&a0, &a1));
    let p = alloc(&*a0, 4096);
    assert_eq!(code(a1.free(p)), "ERR_ARENA_UNKNOWN_POINTER");
    assert!(f.device_stats(1).expect("device 1").raw_bytes_outstanding == 0);
    assert!(f.device_stats(0).expect("device 0").raw_bytes_outstanding > 0);
    assert_eq!(
        code(f.create_allocator(cuda(2), None)),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
    assert_eq!(code(f.device_stats(2)), "ERR_ARENA_INVALID_ARGUMENT");
}

#[test]
fn read_only_allocators_bypass_the_arena_and_are_not_shared() {
    let f = factory(SimKind::Host, 1);
    let info = MemoryInfo {
        allocator_type: AllocatorType::ReadOnly,
        ..cuda(0)
    };
    let a = f.create_allocator(info, None).expect("plain");
    let b = f.create_allocator(info, None).expect("plain");
    assert_eq!(a.kind, None);
    assert!(!Arc::ptr_eq(&a.allocator, &b.allocator));
    let p = alloc(&*a.allocator, 1000);
    assert_eq!(
        a.allocator.allocated_size(p),
        Ok(1000),
        "no rounding: straight to the raw allocator"
    );
    assert_eq!(
        f.device_stats(0).expect("device").raw_bytes_outstanding,
        1000
    );
    assert_eq!(
        f.release_allocator(&a.allocator),
        Released::Destroyed,
        "a read-only allocator has one user"
    );
    assert_eq!(
        f.device_stats(0).expect("device").raw_bytes_outstanding,
        0,
        "its memory came back at release, though `a` still holds it"
    );
    assert_eq!(f.release_allocator(&a.allocator), Released::Untracked);
    assert_eq!(f.release_allocator(&b.allocator), Released::Destroyed);
}

#[test]
fn differing_options_keep_the_arena_and_warn_naming_the_keys() {
    let f = factory(SimKind::Virtual, 1);
    let first = config(&[("arena.max_mem", "1073741824")]);
    f.create_allocator(cuda(0), Some(&first)).expect("created");
    let other = config(&[
        ("arena.max_mem", "2147483648"),
        ("arena.extend_strategy", "1"),
    ]);
    let second = f.create_allocator(cuda(0), Some(&other)).expect("shared");
    assert_eq!(second.warnings.len(), 1);
    assert!(
        second.warnings[0].contains("arena.max_mem")
            && second.warnings[0].contains("arena.extend_strategy")
    );
    assert_eq!(
        second.allocator.stats().limit,
        1 << 30,
        "the first options stay in force"
    );
    let same = f.create_allocator(cuda(0), Some(&first)).expect("shared");
    assert!(same.warnings.is_empty());
}

#[test]
fn replace_makes_a_new_arena_with_the_new_options() {
    let f = factory(SimKind::Virtual, 1);
    let old = f
        .create_allocator(cuda(0), Some(&config(&[("arena.max_mem", "4194304")])))
        .expect("created");
    let new = f
        .create_shared_allocator(
            cuda(0),
            Some(&config(&[("arena.max_mem", "8388608")])),
            true,
        )
        .expect("replaced");
    assert!(!Arc::ptr_eq(&old.allocator, &new.allocator));
    assert_eq!(new.allocator.stats().limit, 8 << 20);
    assert_eq!(f.users(SharedKind::DeviceArena, 0), 1);
    let p = alloc(&*old.allocator, 4096);
    assert!(old.allocator.stats().total_allocated > 0);
    assert_eq!(
        f.release_allocator(&old.allocator),
        Released::Destroyed,
        "the replaced one is still counted for its own users"
    );
    assert_eq!(
        old.allocator.free(p).map_err(|e| e.code()),
        Err("ERR_ARENA_RELEASED")
    );
    assert_eq!(f.release_allocator(&new.allocator), Released::Destroyed);
    assert_eq!(f.live_allocators(), 0);
    assert_eq!(f.device_stats(0).expect("device").raw_bytes_outstanding, 0);
}

/// Issue 11: memory came back only once every reference to an allocator was dropped, so a
/// stale one (a C handle kept to detect use after destroy, a stream's registration) pinned it.
#[test]
fn the_last_release_returns_all_memory_while_references_remain() {
    let f = factory(SimKind::Virtual, 1);
    let a = f.create_allocator(cuda(0), None).expect("created");
    let stale = a.allocator.clone();
    let p = alloc(&*a.allocator, 1 << 20);
    let q = a
        .allocator
        .reserve(4096)
        .expect("reserve")
        .expect("non-zero");
    assert!(f.device_stats(0).expect("device").raw_bytes_outstanding > 0);
    assert_eq!(f.release_allocator(&a.allocator), Released::Destroyed);
    assert_eq!(f.device_stats(0).expect("device").raw_bytes_outstanding, 0);
    assert_eq!(stale.stats().total_allocated, 0);
    for (what, code) in [
        ("alloc", stale.alloc(1).map(|_| ()).map_err(|e| e.code())),
        ("free", stale.free(p).map_err(|e| e.code())),
        ("free of a reserve", stale.free(q).map_err(|e| e.code())),
        (
            "reserve",
            stale.reserve(1).map(|_| ()).map_err(|e| e.code()),
        ),
        ("shrink", stale.shrink().map_err(|e| e.code())),
        (
            "allocated_size",
            stale.allocated_size(p).map(|_| ()).map_err(|e| e.code()),
        ),
    ] {
        assert_eq!(code, Err("ERR_ARENA_RELEASED"), "{what}");
    }
}

#[test]
fn pinned_and_cpu_arenas_have_no_streams_and_the_device_arena_does() {
    let f = factory(SimKind::Host, 1);
    let pinned = f
        .create_allocator(MemoryInfo::new(MemoryKind::CudaPinned, 0), None)
        .expect("pinned");
    let cpu = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cpu, 0), None)
        .expect("cpu");
    let device = f.create_allocator(cuda(0), None).expect("device");
    assert!(!pinned.allocator.is_stream_aware() && !cpu.allocator.is_stream_aware());
    assert!(device.allocator.is_stream_aware());
    assert_eq!(
        code(pinned.allocator.alloc_on_stream(256, &Stream::new())),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
    assert_eq!(pinned.allocator.info().kind, MemoryKind::CudaPinned);
    assert_eq!(
        code(f.create_allocator(MemoryInfo::new(MemoryKind::Cpu, 1), None)),
        "ERR_ARENA_INVALID_ARGUMENT"
    );
}

#[test]
fn device_pinned_and_mempool_are_independent_shared_allocators() {
    let f = factory(SimKind::Virtual, 1);
    let pool_opts = config(&[("arena.use_cuda_mempool", "1")]);
    let arena = f.create_allocator(cuda(0), None).expect("arena");
    let pool = f.create_allocator(cuda(0), Some(&pool_opts)).expect("pool");
    let pinned = f
        .create_allocator(MemoryInfo::new(MemoryKind::CudaPinned, 0), None)
        .expect("pinned");
    assert_eq!(pool.kind, Some(SharedKind::Mempool));
    assert!(!Arc::ptr_eq(&arena.allocator, &pool.allocator));
    assert!(!Arc::ptr_eq(&arena.allocator, &pinned.allocator));
    assert_eq!(f.users(SharedKind::Mempool, 0), 1);
    assert_eq!(f.users(SharedKind::DeviceArena, 0), 1);
    assert_eq!(f.users(SharedKind::PinnedArena, 0), 1);
}

#[test]
fn an_invalid_config_creates_nothing() {
    let f = factory(SimKind::Virtual, 1);
    let bad = ArenaConfig {
        max_power_of_two_extend_bytes: 3,
        ..ArenaConfig::default()
    };
    assert_eq!(
        code(f.create_allocator(cuda(0), Some(&bad))),
        "ERR_ARENA_INVALID_CONFIG"
    );
    assert_eq!(f.users(SharedKind::DeviceArena, 0), 0);
}

#[test]
fn the_mempool_reports_ort_stats_and_shrinks_per_call() {
    let f = factory(SimKind::Virtual, 1);
    let pool = f
        .create_allocator(cuda(0), Some(&config(&[("arena.use_cuda_mempool", "1")])))
        .expect("pool")
        .allocator;
    let p = alloc(&*pool, 1000);
    let r = pool.reserve(3000).expect("fits").expect("non-zero");
    let s = pool.stats();
    assert_eq!(
        (s.num_allocs, s.num_reserves, s.in_use, s.requested_in_use),
        (2, 0, 4000, 4000)
    );
    assert_eq!(
        (s.limit, s.num_arena_extensions, s.max_alloc_size),
        (0, 0, 3000)
    );
    pool.free(p).expect("live");
    pool.free(r).expect("live");
    pool.shrink().expect("trim");
    pool.shrink().expect("trim");
    let s = pool.stats();
    assert_eq!(
        (s.num_arena_shrinkages, s.total_allocated, s.in_use),
        (2, 0, 0)
    );
}

#[test]
fn d8_a_foreign_free_on_the_mempool_is_unknown_pointer() {
    let f = factory(SimKind::Virtual, 1);
    let pool = f
        .create_allocator(cuda(0), Some(&config(&[("arena.use_cuda_mempool", "1")])))
        .expect("pool")
        .allocator;
    let p = alloc(&*pool, 1000);
    let before = pool.stats();
    assert_eq!(code(pool.free(p + 256)), "ERR_ARENA_UNKNOWN_POINTER");
    assert_eq!(code(pool.free(0xdead_0000)), "ERR_ARENA_UNKNOWN_POINTER");
    assert_eq!(pool.stats(), before);
}

#[test]
fn d9_an_unset_release_threshold_keeps_freed_memory_in_the_pool() {
    let f = factory(SimKind::Virtual, 1);
    let pool = f
        .create_allocator(cuda(0), Some(&config(&[("arena.use_cuda_mempool", "1")])))
        .expect("pool")
        .allocator;
    let p = alloc(&*pool, 1 << 20);
    pool.free(p).expect("live");
    assert_eq!(pool.stats().total_allocated, 1 << 20, "kept for reuse");
    assert_eq!(alloc(&*pool, 1 << 20), p, "and reused");
}

#[test]
fn d9_an_explicit_zero_threshold_hands_freed_memory_back() {
    let f = factory(SimKind::Virtual, 1);
    let opts = config(&[
        ("arena.use_cuda_mempool", "1"),
        ("arena.cuda_mempool_release_threshold", "0"),
    ]);
    let pool = f
        .create_allocator(cuda(0), Some(&opts))
        .expect("pool")
        .allocator;
    let p = alloc(&*pool, 1 << 20);
    pool.free(p).expect("live");
    assert_eq!(pool.stats().total_allocated, 0);
    assert_eq!(f.device_stats(0).expect("device").raw_bytes_outstanding, 0);
}

#[test]
fn the_mempool_reuses_a_block_only_on_the_stream_that_freed_it() {
    let f = factory(SimKind::Virtual, 1);
    let pool = f
        .create_allocator(cuda(0), Some(&config(&[("arena.use_cuda_mempool", "1")])))
        .expect("pool")
        .allocator;
    let (s, t) = (Stream::new(), Stream::new());
    let p = pool
        .alloc_on_stream(4096, &s)
        .expect("fits")
        .expect("non-zero");
    pool.free(p).expect("live");
    let q = pool
        .alloc_on_stream(4096, &t)
        .expect("fits")
        .expect("non-zero");
    assert_ne!(q, p);
    let r = pool
        .alloc_on_stream(4096, &s)
        .expect("fits")
        .expect("non-zero");
    assert_eq!(r, p);
}

#[test]
fn factories_are_shared_process_wide_by_name() {
    let make = || {
        Ok(Factory::new(
            "shared-by-name",
            Arc::new(SimBackend::new(SimKind::Virtual, &[])),
        ))
    };
    let a = named_factory("shared-by-name", "virtual:1", make).expect("made");
    let b = named_factory("shared-by-name", "virtual:1", make).expect("found");
    assert!(Arc::ptr_eq(&a, &b));
    let err = named_factory("shared-by-name", "host:1", make).expect_err("other backend");
    assert_eq!(err.code(), "ERR_ARENA_INVALID_ARGUMENT");
    let from_thread = std::thread::spawn(move || {
        named_factory("shared-by-name", "virtual:1", make).expect("found")
    })
    .join()
    .expect("thread");
    assert!(Arc::ptr_eq(&a, &from_thread));
    drop((a, b, from_thread));
    let fresh = named_factory("shared-by-name", "host:1", make).expect("the old one is gone");
    assert_eq!(fresh.name(), "shared-by-name");
}

/// Issue 11, item 7: the host-owned stream handles of a shared allocator are one set for all
/// its users, so a handle one user resets is reset for every user.
#[test]
fn the_users_of_a_shared_allocator_share_its_foreign_streams() {
    let f = factory(SimKind::Virtual, 1);
    let a = f.create_allocator(cuda(0), None).expect("a");
    let b = f.create_allocator(cuda(0), None).expect("b");
    let s = a.streams.get(0xabc).expect("stream");
    assert_eq!(b.streams.get(0xabc).expect("same").id(), s.id());
    assert!(b.streams.forget(0xabc).is_some());
    assert!(a.streams.is_empty());
}

#[test]
fn a_retained_allocator_needs_one_more_release_and_a_retired_one_cannot_be_retained() {
    // Issue 12: an ONNX Runtime view of a C handle is its own user of the allocator.
    let f = factory(SimKind::Virtual, 1);
    let a = f
        .create_allocator(cuda(0), None)
        .expect("created")
        .allocator;
    assert_eq!(f.retain_allocator(&a).expect("held"), 2);
    assert_eq!(f.release_allocator(&a), Released::Counted(1));
    assert_eq!(f.release_allocator(&a), Released::Destroyed);
    let e = f.retain_allocator(&a).expect_err("no user holds it");
    assert_eq!(e.code(), "ERR_ARENA_RELEASED");
    assert_eq!(f.live_allocators(), 0);
}
