//! `AllocOnStream`: an `OrtSyncStream` names an arena stream by its native handle, which the
//! host's `SyncStream_GetHandle` gives. The CPU build of ONNX Runtime makes no sync stream
//! (see `tests/env.rs`), so these run through the sham host: the real function table with
//! `SyncStream_GetHandle` answering for stand-in streams (issue 12).
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;
use cuda_arena_ort::{clear_last_error, last_error};
use support::*;

#[test]
fn streams_with_one_native_handle_are_one_arena_stream_and_other_handles_wait_for_its_reset() {
    let Some(host) = sham(30) else { return };
    let f = factory("streams-handle", 1);
    let v = view(host, &f, cuda(0));
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
