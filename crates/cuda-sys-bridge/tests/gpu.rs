//! The GPU suite: runs on a machine with a CUDA driver, from binaries built elsewhere
//! (`cargo test -p cuda-sys-bridge --release --no-run`, then the binary with `--ignored`).
//! Ignored by default so CI, which has no GPU, does not run them.

use cuda_arena_core::{ArenaConfig, Factory, MemoryInfo, MemoryKind, Released, SharedKind};
use cuda_sys_bridge::{devices, CudaBackend};
use std::sync::Arc;

const MIB: u64 = 1 << 20;

fn backend() -> Arc<CudaBackend> {
    Arc::new(CudaBackend::new().expect("a CUDA driver and device"))
}

fn config(pairs: &[(&str, &str)]) -> ArenaConfig {
    ArenaConfig::from_pairs(pairs.iter().copied()).expect("valid")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
#[ignore = "needs a GPU"]
fn devices_reports_every_field() {
    let d = devices();
    assert!(!d.is_empty());
    for g in &d {
        println!("{g:?}");
        assert!(
            !g.name.is_empty()
                && g.total_memory > 0
                && g.free_memory > 0
                && g.free_memory <= g.total_memory
        );
        assert!(g.pci_bus_id.contains(':') && g.uuid.starts_with("GPU-"));
        assert!(g.compute_capability.0 >= 7);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn written_bytes_read_back_on_device_and_pinned_arenas() {
    let f = Factory::new("gpu-rw", backend());
    for kind in [MemoryKind::Cuda, MemoryKind::CudaPinned] {
        let a = f
            .create_allocator(MemoryInfo::new(kind, 0), None)
            .expect("arena")
            .allocator;
        for (i, size) in [1usize, 7, 255, 256, 4097, 65536, 1 << 20, 33 << 20]
            .into_iter()
            .enumerate()
        {
            let p = a.alloc(size as u64).expect("fits").expect("non-zero");
            let data = pattern(size, i as u8);
            a.write(p, &data).expect("write");
            let mut back = vec![0u8; size];
            a.read(p, &mut back).expect("read");
            assert_eq!(back, data, "{kind:?} {size}");
            a.fill(p, 0xAB, size as u64).expect("fill");
            a.read(p, &mut back).expect("read");
            assert!(back.iter().all(|&b| b == 0xAB));
            assert_eq!(
                a.write(p + size as u64, &[1]).map_err(|e| e.code()),
                Err("ERR_ARENA_UNKNOWN_POINTER")
            );
            a.free(p).expect("live");
        }
        f.release_allocator(&a);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn the_mempool_allocates_copies_and_trims() {
    let b = backend();
    let f = Factory::new("gpu-pool", b.clone());
    let pool = f
        .create_allocator(
            MemoryInfo::new(MemoryKind::Cuda, 0),
            Some(&config(&[("arena.use_cuda_mempool", "1")])),
        )
        .expect("pool");
    assert_eq!(pool.kind, Some(SharedKind::Mempool));
    let a = pool.allocator;
    let s = b.create_stream(0).expect("stream");
    let p = a
        .alloc_on_stream(3 * MIB, s.logical())
        .expect("fits")
        .expect("non-zero");
    let data = pattern(3 * MIB as usize, 9);
    a.write(p, &data).expect("write");
    let mut back = vec![0u8; data.len()];
    a.read(p, &mut back).expect("read");
    assert_eq!(back, data);
    assert!(
        a.stats().total_allocated >= 3 * MIB,
        "the pool reserves what it hands out"
    );
    assert_eq!(
        a.free(p + 256).map_err(|e| e.code()),
        Err("ERR_ARENA_UNKNOWN_POINTER")
    );
    a.free(p).expect("live");
    s.synchronize().expect("sync");
    assert!(
        a.stats().total_allocated >= 3 * MIB,
        "unlimited release threshold keeps it"
    );
    a.shrink().expect("trim");
    assert_eq!(a.stats().num_arena_shrinkages, 1);
    assert_eq!(a.stats().total_allocated, 0);
}

#[test]
#[ignore = "needs a GPU"]
fn a_chunk_freed_on_one_stream_is_reused_by_another_only_after_waiting() {
    let b = backend();
    let f = Factory::new("gpu-streams", b.clone());
    let a = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("arena")
        .allocator;
    let (s, t) = (
        b.create_stream(0).expect("s"),
        b.create_stream(0).expect("t"),
    );
    let p = a
        .alloc_on_stream(4096, s.logical())
        .expect("fits")
        .expect("non-zero");
    let keep = a
        .alloc_on_stream(4096, s.logical())
        .expect("fits")
        .expect("non-zero");
    a.free(p).expect("live");
    let q = a
        .alloc_on_stream(4096, t.logical())
        .expect("fits")
        .expect("non-zero");
    assert_ne!(q, p, "t has not waited on s");
    t.wait(&s.record().expect("record")).expect("wait");
    let r = a
        .alloc_on_stream(4096, t.logical())
        .expect("fits")
        .expect("non-zero");
    assert_eq!(r, p, "after waiting, t reuses s's chunk");
    t.synchronize().expect("sync");
    for x in [q, r, keep] {
        a.free(x).expect("live");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn more_than_the_card_has_is_out_of_memory_and_the_arena_keeps_working() {
    let b = backend();
    let total = devices()[0].total_memory;
    let f = Factory::new("gpu-oom", b);
    let a = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("arena")
        .allocator;
    let p = a.alloc(MIB).expect("fits").expect("non-zero");
    let before = a.stats();
    assert_eq!(
        a.alloc(total + MIB).map_err(|e| e.code()),
        Err("ERR_ARENA_OUT_OF_MEMORY")
    );
    assert_eq!(a.stats().in_use, before.in_use);
    let q = a.alloc(8 * MIB).expect("still works").expect("non-zero");
    a.free(q).expect("live");
    a.free(p).expect("live");
}

#[test]
#[ignore = "needs a GPU"]
fn releasing_every_allocator_gives_the_driver_its_memory_back() {
    let start = devices()[0].free_memory;
    {
        let b = backend();
        let f = Factory::new("gpu-teardown", b.clone());
        let a = f
            .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
            .expect("arena")
            .allocator;
        let pinned = f
            .create_allocator(MemoryInfo::new(MemoryKind::CudaPinned, 0), None)
            .expect("pinned")
            .allocator;
        let pool = f
            .create_allocator(
                MemoryInfo::new(MemoryKind::Cuda, 0),
                Some(&config(&[("arena.use_cuda_mempool", "1")])),
            )
            .expect("pool")
            .allocator;
        let held: Vec<u64> = (0..20)
            .map(|i| a.alloc((i + 1) * 7 * MIB).expect("fits").expect("non-zero"))
            .collect();
        let r = a.reserve(100 * MIB).expect("fits").expect("non-zero");
        let x = pool.alloc(64 * MIB).expect("fits").expect("non-zero");
        let y = pinned.alloc(4 * MIB).expect("fits").expect("non-zero");
        assert!(devices()[0].free_memory + 1000 * MIB < start + 2 * MIB);
        for p in held {
            a.free(p).expect("live");
        }
        a.free(r).expect("live");
        pool.free(x).expect("live");
        pinned.free(y).expect("live");
        for al in [&a, &pinned, &pool] {
            assert_eq!(f.release_allocator(al), Released::Destroyed);
        }
        drop((a, pinned, pool));
        assert_eq!(f.device_stats(0).expect("stats").raw_bytes_outstanding, 0);
    }
    let end = devices()[0].free_memory;
    assert!(
        end + 2 * MIB >= start,
        "free memory {end} is more than 2 MiB below the start {start}"
    );
}

#[test]
#[ignore = "needs a GPU"]
fn two_factories_in_one_process_have_separate_arenas() {
    let (f1, f2) = (
        Factory::new("gpu-a", backend()),
        Factory::new("gpu-b", backend()),
    );
    let a1 = f1
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("a1")
        .allocator;
    let a2 = f2
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("a2")
        .allocator;
    assert!(!Arc::ptr_eq(&a1, &a2));
    let p = a1.alloc(MIB).expect("fits").expect("non-zero");
    assert_eq!(
        a2.free(p).map_err(|e| e.code()),
        Err("ERR_ARENA_UNKNOWN_POINTER")
    );
    a1.write(p, &[1, 2, 3]).expect("write");
    a1.free(p).expect("live");
}
