//! `AllocOnStream`: an `OrtSyncStream` names an arena stream by its native handle, which the
//! host's `SyncStream_GetHandle` gives. The CPU build of ONNX Runtime makes no sync stream
//! (see `tests/env.rs`), so these run through the sham host: the real function table with
//! `SyncStream_GetHandle` answering for stand-in streams (issue 12).
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;
use cuda_arena_ort::{clear_last_error, last_error, ViewOptions};
use support::*;

#[test]
fn streams_with_one_native_handle_are_one_arena_stream_and_other_handles_wait_for_its_reset() {
    let Some(host) = sham(30) else { return };
    let f = factory("streams-handle", 1);
    // ORT's own rule, which the region arena keeps bit for bit (the default mode may also
    // hand the chunk over after waiting for the device: issue 25).
    let region = [("arena.use_virtual_memory", "0")];
    let v = view_with(host, &f, cuda(0), &region, ViewOptions::default());
    let (mut a, mut a_again, mut b) = (
        FakeStream::new(0xa1),
        FakeStream::new(0xa1),
        FakeStream::new(0xb2),
    );
    let p = alloc_on_stream(&v, 4096, a.ptr());
    assert!(!p.is_null());
    assert!(
        handle_asked(0xa1) >= 1,
        "the handle came from the host's SyncStream_GetHandle"
    );
    free(&v, p);
    assert_eq!(
        alloc_on_stream(&v, 4096, a_again.ptr()),
        p,
        "the same handle reuses it at once"
    );
    free(&v, p);
    let q = alloc_on_stream(&v, 4096, b.ptr());
    assert_ne!(
        q, p,
        "another stream must not take it before the first stream's run ends"
    );
    free(&v, q);
    assert_eq!(v.streams().expect("live").len(), 2);
    // The run on 0xa1 ends (what OnSessionRunEnd and cuda_arena_reset_stream do).
    drop(v.streams().expect("live").forget(0xa1));
    assert_eq!(
        alloc_on_stream(&v, 4096, b.ptr()),
        p.min(q),
        "merged and free for every stream"
    );
}

#[test]
fn a_stream_without_a_native_handle_allocates_as_alloc() {
    let Some(host) = sham(30) else { return };
    let f = factory("streams-no-handle", 1);
    let v = view(host, &f, cuda(0));
    let mut s = FakeStream::new(0);
    let p = alloc_on_stream(&v, 4096, s.ptr());
    assert!(!p.is_null());
    assert_eq!(v.streams().expect("live").len(), 0);
    free(&v, p);
    assert_eq!(alloc(&v, 4096), p, "untagged: plain Alloc reuses it");
}

#[test]
fn a_failed_alloc_on_a_new_stream_remembers_no_stream() {
    let Some(host) = sham(30) else { return };
    let f = factory("streams-failed", 1);
    let v = view_with(
        host,
        &f,
        cuda(0),
        &[("arena.max_mem", "1048576")],
        Default::default(),
    );
    let mut s = FakeStream::new(0xc3);
    clear_last_error();
    assert!(alloc_on_stream(&v, 4 << 20, s.ptr()).is_null());
    assert_eq!(
        last_error().map(|e| e.code()),
        Some("ERR_ARENA_OUT_OF_MEMORY")
    );
    assert_eq!(
        v.streams().expect("live").len(),
        0,
        "a failed call changes nothing"
    );
    assert!(alloc_on_stream(&v, 0, s.ptr()).is_null(), "size 0 is NULL");
}

#[test]
fn calls_count_each_function_ort_called_and_the_streams_it_brought() {
    let Some(host) = sham(30) else { return };
    let f = factory("streams-calls", 1);
    let v = view(host, &f, cuda(0));
    let (mut a, mut b, mut none) = (
        FakeStream::new(0xa1),
        FakeStream::new(0xb2),
        FakeStream::new(0),
    );
    let p = alloc(&v, 1000);
    let r = reserve(&v, 2000);
    let q = alloc_on_stream(&v, 4096, a.ptr());
    let q2 = alloc_on_stream(&v, 4096, a.ptr());
    let s = alloc_on_stream(&v, 4096, b.ptr());
    let n = alloc_on_stream(&v, 4096, none.ptr());
    let z = alloc_on_stream(&v, 0, a.ptr());
    assert!(z.is_null(), "size 0 is NULL, not a failure");
    let too_big = alloc(&v, usize::MAX);
    assert!(too_big.is_null());
    for x in [p, r, q, q2, s, n] {
        free(&v, x);
    }
    free(&v, p);
    let c = v.calls();
    assert_eq!(
        (
            c.alloc,
            c.reserve,
            c.alloc_on_stream,
            c.alloc_on_stream_without_stream
        ),
        (2, 1, 5, 1)
    );
    assert_eq!((c.free, c.free_ignored, c.failed), (7, 1, 1));
    assert_eq!((c.get_stats, c.shrink), (0, 0));
    assert_eq!(c.new_streams, 2, "0xa1 and 0xb2, each once");
    assert_eq!(v.stream_handles(), vec![0xa1, 0xb2]);
    drop(v.streams().expect("live").forget(0xa1));
    let again = alloc_on_stream(&v, 4096, a.ptr());
    free(&v, again);
    assert_eq!(
        v.calls().new_streams,
        3,
        "a forgotten handle is a new stream when it comes back"
    );
    v.release();
    assert_eq!(
        v.stream_handles(),
        Vec::<u64>::new(),
        "a released view knows no streams"
    );
}
