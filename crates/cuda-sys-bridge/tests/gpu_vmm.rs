//! The GPU suite of the virtual-memory mode (issue 14): CUDA's virtual-memory form through
//! the arena, on a real device. Built anywhere (`cargo test -p cuda-sys-bridge --release
//! --no-run`, `scripts/gpu/build-device.sh` copies it to `.device/gpu-vmm-tests`), run on the
//! GPU machine with `--ignored` (`scripts/gpu/vmm.sh`). Ignored by default: CI has no GPU.
//!
//! Without a driver every test here is skipped with its reason ("needs a GPU"); the no-driver
//! behaviour (`ERR_NO_CUDA`) is `tests/no_cuda.rs`'s.

use cuda_arena_core::{
    Allocator, ArenaConfig, Factory, MemoryInfo, MemoryKind, Released, VirtualMemory,
};
use cuda_sys_bridge::{devices, CudaBackend};
use std::sync::Arc;
use std::time::Instant;

const MIB: u64 = 1 << 20;

fn backend() -> Arc<CudaBackend> {
    Arc::new(CudaBackend::new().expect("a CUDA driver and device"))
}

fn vm_config(pairs: &[(&str, &str)]) -> ArenaConfig {
    let mut all = vec![("arena.use_virtual_memory", "1")];
    all.extend_from_slice(pairs);
    ArenaConfig::from_pairs(all).expect("valid")
}

fn device_arena(f: &Factory, pairs: &[(&str, &str)]) -> Arc<dyn Allocator> {
    let c = f
        .create_allocator(
            MemoryInfo::new(MemoryKind::Cuda, 0),
            Some(&vm_config(pairs)),
        )
        .expect("virtual-memory arena");
    assert!(
        c.warnings.is_empty(),
        "the device has virtual memory management: {:?}",
        c.warnings
    );
    c.allocator
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn driver_used() -> u64 {
    let d = &devices()[0];
    d.total_memory - d.free_memory
}

#[test]
#[ignore = "needs a GPU"]
fn pages_are_mapped_on_demand_and_hold_what_is_written() {
    let b = backend();
    let g = b
        .virtual_memory_of(0)
        .expect("virtual memory")
        .granularity();
    let f = Factory::new("gpu-vmm-rw", b);
    let a = device_arena(&f, &[]);
    let base = driver_used();
    let sizes = [
        1usize,
        255,
        4097,
        65536,
        MIB as usize,
        3 * MIB as usize + 5,
        33 * MIB as usize,
    ];
    let mut live = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let p = a.alloc(size as u64).expect("fits").expect("non-zero");
        let data = pattern(size, i as u8);
        a.write(p, &data).expect("write");
        live.push((p, data));
    }
    let s = a.stats();
    let dev = f.device_stats(0).expect("stats");
    println!(
        "mapped {} MiB for {} bytes in use; the driver says {} MiB more used",
        s.total_allocated / MIB,
        s.in_use,
        driver_used().saturating_sub(base) / MIB
    );
    assert!(s.total_allocated >= s.in_use && s.total_allocated.is_multiple_of(g));
    assert_eq!(dev.raw_bytes_outstanding, s.total_allocated);
    assert!(driver_used() + 2 * MIB >= base + s.total_allocated);
    for (p, data) in &live {
        let mut back = vec![0u8; data.len()];
        a.read(*p, &mut back).expect("read");
        assert_eq!(&back, data);
        a.fill(*p, 0x5A, data.len() as u64).expect("fill");
        a.read(*p, &mut back).expect("read");
        assert!(back.iter().all(|&b| b == 0x5A));
        // Chunks are cut to size and lie back to back, so the byte after one allocation may
        // be the first of the next, live one: a copy that straddles the end is what must fail.
        assert_eq!(
            a.write(*p + data.len() as u64 - 1, &[1, 2])
                .map_err(|e| e.code()),
            Err("ERR_ARENA_UNKNOWN_POINTER")
        );
    }
    for (p, _) in live {
        a.free(p).expect("live");
    }
    assert_eq!(f.release_allocator(&a), Released::Destroyed);
}

#[test]
#[ignore = "needs a GPU"]
fn data_survives_the_unmapping_of_the_pages_between() {
    let f = Factory::new("gpu-vmm-unmap", backend());
    // Threshold 0: every wholly free page goes back at the free that leaves it free.
    let a = device_arena(&f, &[("arena.vm_unmap_threshold_bytes", "0")]);
    let (x, y, z) = (
        a.alloc(6 * MIB).expect("fits").expect("x"),
        a.alloc(40 * MIB).expect("fits").expect("y"),
        a.alloc(6 * MIB).expect("fits").expect("z"),
    );
    let (dx, dz) = (pattern(6 * MIB as usize, 1), pattern(6 * MIB as usize, 2));
    a.write(x, &dx).expect("write");
    a.write(z, &dz).expect("write");
    let before = a.stats().total_allocated;
    let used = driver_used();
    a.free(y).expect("live");
    let after = a.stats().total_allocated;
    println!(
        "freeing 40 MiB between two live blocks: mapped {} → {} MiB, driver used {} → {} MiB",
        before / MIB,
        after / MIB,
        used / MIB,
        driver_used() / MIB
    );
    assert!(
        after + 36 * MIB <= before,
        "the free pages between were unmapped"
    );
    assert!(driver_used() + 36 * MIB <= used + 2 * MIB);
    for (p, d) in [(x, &dx), (z, &dz)] {
        let mut back = vec![0u8; d.len()];
        a.read(p, &mut back).expect("read");
        assert_eq!(&back, d, "a neighbour of the unmapped pages lost its bytes");
    }
    let w = a.alloc(30 * MIB).expect("fits again").expect("w");
    let dw = pattern(30 * MIB as usize, 3);
    a.write(w, &dw).expect("write into pages mapped again");
    let mut back = vec![0u8; dw.len()];
    a.read(w, &mut back).expect("read");
    assert_eq!(back, dw);
    for p in [x, z, w] {
        a.free(p).expect("live");
    }
    assert_eq!(f.release_allocator(&a), Released::Destroyed);
}

#[test]
#[ignore = "needs a GPU"]
fn wrong_calls_are_refused_and_change_nothing() {
    let b = backend();
    let vm = b.virtual_memory_of(0).expect("virtual memory management");
    let g = vm.granularity();
    println!(
        "granularity {g} bytes, device memory {} MiB",
        vm.total_memory() / MIB
    );
    assert!(g.is_power_of_two() && g >= 64 << 10);
    let codes = |r: cuda_arena_core::Result<()>| r.map_err(|e| e.code());
    assert_eq!(
        vm.reserve(g + 1).map_err(|e| e.code()),
        Err("ERR_ARENA_INVALID_ARGUMENT")
    );
    let base = vm.reserve(16 * g).expect("address space");
    assert_eq!(
        codes(vm.map(base + 1, g)),
        Err("ERR_ARENA_INVALID_ARGUMENT")
    );
    assert_eq!(
        codes(vm.map(base + 15 * g, 2 * g)),
        Err("ERR_ARENA_UNKNOWN_POINTER")
    );
    assert_eq!(codes(vm.unmap(base, g)), Err("ERR_ARENA_UNKNOWN_POINTER"));
    vm.map(base, 2 * g).expect("fits");
    assert_eq!(
        codes(vm.map(base + g, g)),
        Err("ERR_ARENA_INVALID_ARGUMENT")
    );
    assert_eq!(
        codes(vm.release(base, 16 * g)),
        Err("ERR_ARENA_INVALID_ARGUMENT")
    );
    assert_eq!(
        codes(vm.write(base + 2 * g - 1, &[1, 2])),
        Err("ERR_ARENA_UNKNOWN_POINTER")
    );
    assert_eq!(vm.mapped_bytes(), 2 * g);
    vm.write(base + g - 1, &[7, 8]).expect("mapped");
    let mut back = [0u8; 2];
    vm.read(base + g - 1, &mut back).expect("mapped");
    assert_eq!(back, [7, 8]);
    vm.unmap(base, 2 * g).expect("mapped");
    vm.release(base, 16 * g).expect("empty");
    assert_eq!(vm.mapped_bytes(), 0);
}

#[test]
#[ignore = "needs a GPU"]
fn more_than_the_card_has_is_out_of_memory_and_the_arena_keeps_working() {
    let f = Factory::new("gpu-vmm-oom", backend());
    let a = device_arena(&f, &[]);
    let total = devices()[0].total_memory;
    let p = a.alloc(64 * MIB).expect("fits").expect("p");
    a.free(p).expect("live");
    let keep = a.alloc(MIB).expect("fits").expect("keep");
    let before = a.stats();
    assert_eq!(
        a.alloc(total + MIB).map_err(|e| e.code()),
        Err("ERR_ARENA_OUT_OF_MEMORY")
    );
    assert_eq!(a.stats().in_use, before.in_use);
    let q = a.alloc(256 * MIB).expect("still works").expect("q");
    a.fill(q, 1, 256 * MIB).expect("fill");
    a.free(q).expect("live");
    a.free(keep).expect("live");
    assert_eq!(f.release_allocator(&a), Released::Destroyed);
}

#[test]
#[ignore = "needs a GPU"]
fn shrink_and_release_give_the_driver_its_memory_back() {
    let start = driver_used();
    {
        let f = Factory::new("gpu-vmm-teardown", backend());
        let a = device_arena(&f, &[]);
        let held: Vec<u64> = (0..20)
            .map(|i| a.alloc((i + 1) * 7 * MIB + 333).expect("fits").expect("p"))
            .collect();
        let r = a.reserve(100 * MIB).expect("fits").expect("r");
        assert!(driver_used() > start + 1000 * MIB);
        for (i, &p) in held.iter().enumerate() {
            if i % 2 == 0 {
                a.free(p).expect("live");
            }
        }
        let waits = f.device_stats(0).expect("stats").device_waits;
        a.shrink().expect("shrink");
        let s = a.stats();
        let after = f.device_stats(0).expect("stats");
        assert_eq!(after.raw_bytes_outstanding, s.total_allocated);
        // (Other tests share the device: their waits may count too.)
        assert!(
            after.device_waits > waits,
            "pages used on no stream: the unmap waited for the device"
        );
        for (i, &p) in held.iter().enumerate() {
            if i % 2 == 1 {
                a.free(p).expect("live");
            }
        }
        a.free(r).expect("live");
        a.shrink().expect("shrink");
        let s = a.stats();
        assert_eq!((s.total_allocated, s.num_arena_extensions), (0, 0));
        assert!(
            driver_used() <= start + 2 * MIB,
            "nothing mapped after shrink"
        );
        let again = a.alloc(5 * MIB).expect("fits after shrink").expect("again");
        a.free(again).expect("live");
        assert_eq!(f.release_allocator(&a), Released::Destroyed);
        assert_eq!(f.device_stats(0).expect("stats").raw_bytes_outstanding, 0);
    }
    let end = driver_used();
    assert!(
        end <= start + 2 * MIB,
        "used memory {end} is more than 2 MiB above the start {start}"
    );
}

#[test]
#[ignore = "needs a GPU"]
fn a_warm_arena_maps_nothing_and_mapping_costs_are_printed() {
    let f = Factory::new("gpu-vmm-warm", backend());
    let a = device_arena(&f, &[]);
    let sizes: Vec<u64> = (0..64).map(|i| (i % 7 + 1) * 3 * MIB + i * 4096).collect();
    let round = |a: &Arc<dyn Allocator>| {
        let ps: Vec<u64> = sizes
            .iter()
            .map(|&s| a.alloc(s).expect("fits").expect("p"))
            .collect();
        for p in ps {
            a.free(p).expect("live");
        }
    };
    let t = Instant::now();
    round(&a);
    let cold = t.elapsed();
    let maps = f.device_stats(0).expect("stats").raw_allocs;
    let t = Instant::now();
    for _ in 0..100 {
        round(&a);
    }
    let warm = t.elapsed() / 100;
    assert_eq!(
        f.device_stats(0).expect("stats").raw_allocs,
        maps,
        "a warm arena maps nothing"
    );
    println!(
        "one round of 64 allocations and frees: {:.1} µs cold ({maps} maps, {} MiB), {:.2} µs warm",
        cold.as_secs_f64() * 1e6,
        a.stats().total_allocated / MIB,
        warm.as_secs_f64() * 1e6
    );
    assert_eq!(f.release_allocator(&a), Released::Destroyed);

    // What one page costs the driver: map (create, map, set access) and unmap (synchronise,
    // unmap), 2 MiB at a time and in runs of 16.
    let b = backend();
    let vm = b.virtual_memory_of(0).expect("virtual memory");
    let g = vm.granularity();
    let base = vm.reserve(1024 * g).expect("address space");
    for run in [1u64, 16] {
        let n = 256 / run;
        let t = Instant::now();
        for i in 0..n {
            vm.map(base + i * run * g, run * g).expect("fits");
        }
        let map = t.elapsed();
        let t = Instant::now();
        for i in 0..n {
            vm.unmap(base + i * run * g, run * g).expect("mapped");
        }
        let unmap = t.elapsed();
        println!(
            "runs of {run} page(s) of {} MiB: map {:.1} µs/page, unmap {:.1} µs/page",
            g / MIB,
            map.as_secs_f64() * 1e6 / 256.0,
            unmap.as_secs_f64() * 1e6 / 256.0
        );
    }
    vm.release(base, 1024 * g).expect("empty");
}

/// Issue 25 on a real device: the default config's device arena, eight threads each on a
/// stream of its own, each writing what it allocates and handing every other allocation to the
/// next thread, which reads it back and frees it (PyTorch's autograd thread frees what the main
/// thread allocated). Every byte reads back; shrink gives the driver every page back.
#[test]
#[ignore = "needs a GPU"]
fn threads_on_their_own_streams_share_the_default_arena_and_free_each_others_memory() {
    let b = backend();
    let f = Factory::new("gpu-vmm-threads", b.clone());
    let c = f
        .create_allocator(MemoryInfo::new(MemoryKind::Cuda, 0), None)
        .expect("the default device arena");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let a = c.allocator;
    const THREADS: usize = 8;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| std::sync::mpsc::channel::<(u64, Vec<u8>)>())
        .unzip();
    std::thread::scope(|scope| {
        for (t, rx) in receivers.into_iter().enumerate() {
            let (a, b) = (a.clone(), b.clone());
            let next = senders[(t + 1) % THREADS].clone();
            scope.spawn(move || {
                let s = b.create_stream(0).expect("stream");
                for i in 0..200usize {
                    let size = 1 + (i * 7919 + t * 104_729) % (6 << 20);
                    let p = a
                        .alloc_on_stream(size as u64, s.logical())
                        .expect("fits")
                        .expect("non-zero");
                    let data = pattern(size.min(4096), (t * 31 + i) as u8);
                    a.write(p, &data).expect("write");
                    if i % 2 == 0 {
                        next.send((p, data)).expect("next thread alive");
                    } else {
                        let mut back = vec![0u8; data.len()];
                        a.read(p, &mut back).expect("read");
                        assert_eq!(back, data, "thread {t} allocation {i}");
                        a.free(p).expect("live");
                    }
                }
                drop(next);
                s.synchronize().expect("sync");
                // What the previous thread handed over: read back here, freed here.
                let mut got = 0;
                while got < 100 {
                    let (p, data) = rx.recv().expect("previous thread sends 100");
                    let mut back = vec![0u8; data.len()];
                    a.read(p, &mut back).expect("read");
                    assert_eq!(back, data, "thread {t}'s handed-over allocation");
                    a.free(p).expect("live");
                    got += 1;
                }
            });
        }
        drop(senders);
    });
    let s = a.stats();
    println!(
        "8 threads: max in use {} MiB, mapped {} MiB before shrink",
        s.max_in_use / MIB,
        s.total_allocated / MIB
    );
    assert_eq!(s.in_use, 0);
    a.shrink().expect("shrink");
    assert_eq!(a.stats().total_allocated, 0, "every page unmapped");
    assert_eq!(f.device_stats(0).expect("stats").raw_bytes_outstanding, 0);
    assert_eq!(f.release_allocator(&a), Released::Destroyed);
}
