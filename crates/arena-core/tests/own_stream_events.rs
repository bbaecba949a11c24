//! Issue 25: cuda-arena's own streams with events (`Stream::with_events`: the `CUstream`s the
//! Node binding's `createStream` makes on `cuda`). A chunk freed on own stream S is reused on
//! S at once, and on another stream T once S's work up to the free is known done (an event
//! recorded on S after the free and queried, as for a host's stream), or once T waited on an
//! event S recorded after the free (ONNX Runtime's rule, S's sync ids counted with its marks).
//! Without the events, a chunk of S stays S's until S is released, and threads each on their
//! own stream passed each other's memory back and forth through new pages. The events are
//! simulated ([`SimEvents`]): a stream's work completes when the test says so.

mod common;

use common::*;
use cuda_arena_core::{Allocator, SimEvents, Stream, StreamEvents};
use std::sync::Arc;

const S: u64 = 0x5000;
const T: u64 = 0x7000;

/// Each region exactly the request: a freed chunk is the only place a request of its size
/// fits, so whether another stream may take it shows.
const EXACT: &[(&str, &str)] = &[("arena.extend_strategy", "1")];

fn streams(sim: &Arc<SimEvents>) -> (Stream, Stream) {
    let events: Arc<dyn StreamEvents> = sim.clone();
    (
        Stream::with_events(S, events.clone()),
        Stream::with_events(T, events),
    )
}

#[test]
fn an_own_streams_chunk_goes_to_another_stream_once_its_work_up_to_the_free_is_done() {
    let (a, sim) = (virtual_arena(EXACT), SimEvents::new());
    let (s, t) = streams(&sim);
    let p = on(&a, &s, 4096);
    let _keep = on(&a, &s, 4096);
    a.free(p).expect("free");
    let q = on(&a, &t, 4096);
    assert_ne!(q, p, "S's work may still use it");
    assert!(sim.records(S) >= 1, "T's miss recorded an event on S");
    sim.finish(S);
    assert_eq!(on(&a, &t, 4096), p, "S's work up to the free is done");
    a.check_invariants().expect("invariants");
}

#[test]
fn an_own_streams_chunk_is_reused_on_that_stream_at_once_with_no_event() {
    let (a, sim) = (virtual_arena(&[]), SimEvents::new());
    let (s, _t) = streams(&sim);
    let p = on(&a, &s, 4096);
    a.free(p).expect("free");
    assert_eq!(on(&a, &s, 4096), p);
    assert_eq!(sim.records(S), 0, "reuse on the same stream needs no event");
}

#[test]
fn a_stream_that_waited_on_an_event_recorded_after_the_free_takes_the_chunk_before_the_work_is_done(
) {
    let (a, sim) = (virtual_arena(EXACT), SimEvents::new());
    let (s, t) = streams(&sim);
    let p = on(&a, &s, 4096);
    let _keep = on(&a, &s, 4096);
    a.free(p).expect("free");
    t.wait(&s.record());
    assert_eq!(
        on(&a, &t, 4096),
        p,
        "T's work is ordered after S's free on the device: ONNX Runtime's rule"
    );
    assert_eq!(sim.completed(S), 0, "none of S's work was seen done");
    a.check_invariants().expect("invariants");
}

#[test]
fn an_event_recorded_before_the_free_lets_no_other_stream_take_the_chunk() {
    let (a, sim) = (virtual_arena(EXACT), SimEvents::new());
    let (s, t) = streams(&sim);
    let p = on(&a, &s, 4096);
    let _keep = on(&a, &s, 4096);
    t.wait(&s.record());
    a.free(p).expect("free, after the event T waited on");
    assert_ne!(on(&a, &t, 4096), p, "S may use the chunk after that event");
}

#[test]
fn a_released_own_stream_leaves_its_chunks_to_every_stream() {
    let (a, sim) = (virtual_arena(EXACT), SimEvents::new());
    let (s, t) = streams(&sim);
    let p = on(&a, &s, 4096);
    a.free(p).expect("free");
    drop(s);
    assert_eq!(on(&a, &t, 4096), p);
    a.check_invariants().expect("invariants");
}
