//! Issue 11, item 14: allocator handles as the C ABI hands them out. A destroyed handle is
//! dead for good (its value is never handed out again), and calls that race a destroy get
//! `CUDA_ARENA_ERR_RELEASED`, never a read of freed memory. Called through the Rust side of
//! the same entry points C links to.

use cuda_arena::*;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::ptr::null_mut;

fn create() -> *mut cuda_arena_allocator {
    // SAFETY: NUL-terminated literals; no keys (n = 0); no error buffer.
    let a = unsafe {
        cuda_arena_create(
            c"host".as_ptr(),
            c"Cuda".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
            0,
            null_mut(),
            0,
        )
    };
    assert!(!a.is_null(), "create on host");
    a
}

#[test]
fn handle_values_are_never_handed_out_twice() {
    let keep = create(); // keeps the arena, so creates below are cheap joins
    let mut seen = BTreeSet::new();
    for _ in 0..10_000 {
        let a = create();
        assert!(seen.insert(a.addr()), "{a:p} handed out twice");
        cuda_arena_destroy(a);
    }
    for &v in seen.iter().take(100) {
        let dead = std::ptr::without_provenance_mut(v);
        assert!(cuda_arena_alloc(dead, 16).is_null());
        assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_ERR_RELEASED);
    }
    cuda_arena_destroy(keep);
}

#[test]
fn calls_racing_a_destroy_succeed_or_are_released() {
    for _ in 0..20 {
        let a = create().addr();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(move || {
                    let a: *mut cuda_arena_allocator = std::ptr::without_provenance_mut(a);
                    let mut released = false;
                    for i in 0..2_000usize {
                        let token: *mut c_void = std::ptr::without_provenance_mut(0x100 + i % 8);
                        let p = cuda_arena_alloc_on_stream(a, 4096, token);
                        let code = cuda_arena_last_error_code();
                        if released {
                            assert_eq!(code, CUDA_ARENA_ERR_RELEASED, "dead stays dead");
                        }
                        match code {
                            CUDA_ARENA_OK => {
                                let freed = cuda_arena_free(a, p);
                                assert!(freed == CUDA_ARENA_OK || freed == CUDA_ARENA_ERR_RELEASED);
                                released |= freed == CUDA_ARENA_ERR_RELEASED;
                            }
                            CUDA_ARENA_ERR_RELEASED => released = true,
                            other => panic!("code {other}"),
                        }
                    }
                })
            })
            .collect();
        cuda_arena_destroy(std::ptr::without_provenance_mut(a));
        assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_OK);
        for w in workers {
            w.join().expect("worker");
        }
    }
}

#[test]
fn a_handle_this_thread_used_last_is_released_once_destroyed_even_when_its_slot_is_reused() {
    let keep = create();
    let a = create();
    // Used from this thread: remembered by it.
    let p = cuda_arena_alloc(a, 64);
    assert!(!p.is_null());
    assert_eq!(cuda_arena_free(a, p), CUDA_ARENA_OK);
    cuda_arena_destroy(a);
    // The slot's next handle (other tests create handles too: make a few).
    let fresh: Vec<_> = (0..8).map(|_| create()).collect();
    assert!(
        cuda_arena_alloc(a, 64).is_null(),
        "a destroyed handle stays dead"
    );
    assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_ERR_RELEASED);
    for b in fresh {
        let q = cuda_arena_alloc(b, 64);
        assert!(!q.is_null(), "a live handle works");
        assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_OK);
        assert_eq!(cuda_arena_free(b, q), CUDA_ARENA_OK);
        cuda_arena_destroy(b);
    }
    cuda_arena_destroy(keep);
}

#[test]
fn one_handle_used_by_many_threads_at_once_serves_every_one() {
    let a = create().addr();
    let workers: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let a: *mut cuda_arena_allocator = std::ptr::without_provenance_mut(a);
                let token: *mut c_void = std::ptr::without_provenance_mut(0x1000 + t);
                let mut live = Vec::new();
                for i in 0..2_000usize {
                    let p = cuda_arena_alloc_on_stream(a, 256 + (i % 7) * 512, token);
                    assert!(!p.is_null(), "code {}", cuda_arena_last_error_code());
                    live.push(p);
                    if live.len() > 16 {
                        assert_eq!(cuda_arena_free(a, live.swap_remove(i % 16)), CUDA_ARENA_OK);
                    }
                }
                for p in live {
                    assert_eq!(cuda_arena_free(a, p), CUDA_ARENA_OK);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    // (The process shares this arena with the other tests: no stats to compare here.)
    cuda_arena_destroy(std::ptr::without_provenance_mut(a));
    assert_eq!(cuda_arena_last_error_code(), CUDA_ARENA_OK);
}
