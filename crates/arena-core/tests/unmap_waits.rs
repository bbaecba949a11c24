//! Issue 25: in virtual-memory mode an unmap waits for the device (on CUDA, for the whole
//! context) only when queued work may still use its pages. Pages whose chunks were last used
//! on host streams whose events say their work is past those frees are unmapped with no wait;
//! a chunk handed out with no stream, a stream without events, or a free not yet known done
//! makes the unmap wait, as every unmap did before. `AddressSpaceVm::waiting_unmaps` counts the
//! unmaps that would have waited on CUDA, and the device's stats (`RawStats::device_waits`,
//! `deviceWaits` in Node) count them with every other wait for the device, as users see them.

mod common;

use common::*;
use cuda_arena_core::trace::synthetic::named_trace;
use cuda_arena_core::trace::{replay, TraceOp};
use cuda_arena_core::{
    AddressSpaceAllocator, AddressSpaceVm, Allocator, Arena, DeviceLimits, ForeignStreams,
    HostAllocator, RawAllocator, SimEvents, Stream, StreamEvents, VirtualMemory,
};
use std::sync::Arc;

const PAGE: u64 = 2 * MIB;

/// An arena in virtual-memory mode, the virtual memory it maps from (to count its unmaps),
/// and host streams with `events`.
fn setup(
    events: Arc<dyn StreamEvents>,
) -> (Arena<AddressSpaceAllocator>, AddressSpaceVm, ForeignStreams) {
    setup_with(events, &[])
}

/// [`setup`] with config `pairs`.
fn setup_with(
    events: Arc<dyn StreamEvents>,
    pairs: &[(&str, &str)],
) -> (Arena<AddressSpaceAllocator>, AddressSpaceVm, ForeignStreams) {
    let raw = AddressSpaceAllocator::new(DeviceLimits::with_total(GIB)).with_granularity(PAGE);
    let vm = raw.vm();
    let shared: Arc<dyn VirtualMemory> = Arc::new(vm.clone());
    let a = Arena::with_virtual_memory(raw, shared, config(pairs)).expect("arena");
    (a, vm, ForeignStreams::with_events(Some(events)))
}

/// The waits for the device the virtual memory counted: unmaps that waited and
/// synchronizations. The device's stats say the same.
fn device_waits(a: &Arena<AddressSpaceAllocator>, vm: &AddressSpaceVm) -> u64 {
    let waits = vm.waiting_unmaps() + vm.synchronizations();
    assert_eq!(a.raw().raw_stats().device_waits, waits, "deviceWaits");
    waits
}

/// Allocates and frees 64 MiB on `s` (no stream: `None`).
fn use_once(a: &Arena<AddressSpaceAllocator>, s: Option<&Stream>) {
    let p = match s {
        Some(s) => a.alloc_on_stream(64 * MIB, s),
        None => a.alloc(64 * MIB),
    };
    a.free(p.expect("fits").expect("addr")).expect("free");
}

/// Shrinks (unmapping every wholly free page) and says how many unmaps waited so far.
fn shrink(a: &Arena<AddressSpaceAllocator>, vm: &AddressSpaceVm) -> u64 {
    a.shrink().expect("shrink");
    assert_eq!(vm.mapped_bytes(), 0, "every page unmapped");
    a.check_invariants().expect("invariants");
    device_waits(a, vm);
    vm.waiting_unmaps()
}

#[test]
fn device_stats_count_an_unmap_that_waits_for_the_device() {
    let (a, vm, _streams) = setup(SimEvents::immediate());
    use_once(&a, None);
    assert_eq!(a.raw().raw_stats().device_waits, 0, "nothing waited yet");
    a.shrink().expect("shrink");
    assert_eq!(device_waits(&a, &vm), 1, "no stream: the unmap waited");
}

#[test]
fn on_host_device_stats_count_the_unmaps_cuda_would_wait_in_as_on_virtual() {
    let raw = HostAllocator::new(DeviceLimits::with_total(GIB));
    let vm: Arc<dyn VirtualMemory> = Arc::new(raw.vm());
    let a = Arena::with_virtual_memory(raw, vm, config(&[])).expect("arena");
    let streams = ForeignStreams::with_events(Some(SimEvents::immediate()));
    let s = streams.get(7).expect("stream");
    let p = a.alloc_on_stream(8 * MIB, &s).expect("fits").expect("addr");
    a.free(p).expect("free");
    s.free_events().expect("events").advance();
    a.shrink().expect("shrink");
    assert_eq!(a.raw().raw_stats().device_waits, 0, "known done: no wait");
    let q = a.alloc(8 * MIB).expect("fits").expect("addr");
    a.free(q).expect("free");
    a.shrink().expect("shrink");
    assert_eq!(a.raw().raw_stats().device_waits, 1, "no stream: one wait");
}

/// Three passes of a `mixed` sample (allocations up to 64 MiB) under the strict headroom, so
/// that pages go back and come again every pass, all on one host stream whose events say its
/// work is done (`on_stream`) or all on no stream. Returns the unmaps and the waits for the
/// device.
fn churning_passes(on_stream: bool) -> (u64, u64) {
    let (a, vm, streams) = setup_with(
        SimEvents::immediate(),
        &[("arena.vm_churn_headroom_percent", "0")],
    );
    let s = streams.get(7).expect("stream");
    let trace: Vec<TraceOp> = named_trace("mixed", 20_000, 3)
        .expect("mixed")
        .into_iter()
        .map(|op| match op {
            TraceOp::Alloc { id, size, .. } => TraceOp::Alloc {
                id,
                size: size.min(64 * MIB),
                stream: u32::from(on_stream),
            },
            other => other,
        })
        .collect();
    for _ in 0..3 {
        replay(&a, &trace, std::slice::from_ref(&s), false).expect("replay");
    }
    a.check_invariants().expect("invariants");
    (a.raw().raw_stats().raw_frees, device_waits(&a, &vm))
}

/// Issue 25: a server in a steady state on one host stream (ONNX Runtime's, PyTorch's) whose
/// events say its work is done unmaps and maps pages past the headroom, but never stalls on
/// the device to do it; the same work on no stream waits at its unmaps.
#[test]
fn warm_passes_on_a_host_stream_whose_work_is_done_unmap_pages_without_waiting() {
    let (unmaps, waits) = churning_passes(true);
    assert!(unmaps > 0, "pages were unmapped");
    assert_eq!(waits, 0);
    let (unmaps, waits) = churning_passes(false);
    assert!(
        unmaps > 0 && waits > 0,
        "on no stream: {unmaps} unmaps, {waits} waits"
    );
}

#[test]
fn pages_a_host_streams_events_say_are_past_its_free_are_unmapped_with_no_wait() {
    let (a, vm, streams) = setup(SimEvents::immediate());
    let s = streams.get(7).expect("stream");
    use_once(&a, Some(&s));
    s.free_events().expect("events").advance();
    assert_eq!(shrink(&a, &vm), 0);
}

#[test]
fn pages_of_a_free_not_yet_known_done_are_unmapped_after_a_wait() {
    let (a, vm, streams) = setup(SimEvents::new());
    let s = streams.get(7).expect("stream");
    use_once(&a, Some(&s));
    s.free_events().expect("events").advance();
    assert_eq!(shrink(&a, &vm), 1, "the stream's work has not finished");
}

#[test]
fn a_chunk_handed_out_with_no_stream_makes_the_next_unmap_wait() {
    let (a, vm, _streams) = setup(SimEvents::immediate());
    use_once(&a, None);
    assert_eq!(
        shrink(&a, &vm),
        1,
        "its work is on no stream the arena knows"
    );
}

#[test]
fn a_stream_without_events_makes_the_unmap_wait() {
    let (a, vm, _streams) = setup(SimEvents::immediate());
    let s = Stream::new();
    use_once(&a, Some(&s));
    assert_eq!(shrink(&a, &vm), 1);
    drop(s);
}

#[test]
fn a_released_stream_without_events_leaves_work_no_event_covers() {
    let (a, vm, streams) = setup(SimEvents::immediate());
    let logical = Stream::new();
    let p = a
        .alloc_on_stream(MIB, &logical)
        .expect("fits")
        .expect("addr");
    a.free(p).expect("free");
    drop(logical);
    let s = streams.get(7).expect("stream");
    use_once(&a, Some(&s));
    s.free_events().expect("events").advance();
    assert_eq!(shrink(&a, &vm), 1, "the released stream's chunks merged in");
}

#[test]
fn once_an_unmap_has_waited_later_ones_of_known_done_frees_need_not() {
    let (a, vm, streams) = setup(SimEvents::immediate());
    use_once(&a, None);
    assert_eq!(shrink(&a, &vm), 1);
    let s = streams.get(7).expect("stream");
    use_once(&a, Some(&s));
    s.free_events().expect("events").advance();
    assert_eq!(shrink(&a, &vm), 1, "no new wait");
}

#[test]
fn memory_of_no_stream_freed_after_a_wait_makes_the_next_unmap_wait_again() {
    let (a, vm, _streams) = setup(SimEvents::immediate());
    let p = alloc(&a, 64 * MIB); // handed out with no stream, used by work the arena cannot see
    use_once(&a, None);
    a.shrink()
        .expect("shrink: waits for the device, p still in use");
    let waited = vm.waiting_unmaps();
    assert_eq!(waited, 1);
    a.free(p).expect("free: p's work may be queued up to now");
    assert_eq!(
        shrink(&a, &vm),
        waited + 1,
        "p's pages wait for the device again"
    );
}

/// Thread B, in a part of its own, frees 1 MiB on host stream S (handle 7), whose work up to
/// that free stays queued until the test says. B is returned to be kept alive: a thread that
/// ends gives its sub-arena's number to the next one.
fn another_part_freeing_on_host_stream(
    a: &Arc<Arena<AddressSpaceAllocator>>,
    streams: &ForeignStreams,
) -> (Worker, Stream) {
    let s = streams.get(7).expect("stream");
    let (a2, s2) = (a.clone(), s.clone());
    let b = Worker::new();
    b.run(move || {
        let p = on(&*a2, &s2, MIB);
        a2.free(p).expect("free on S");
    });
    (b, s)
}

/// S's frees so far covered by an event, S's work done, and the event seen complete.
fn settle(sim: &SimEvents, s: &Stream) {
    let events = s.free_events().expect("events");
    events.advance();
    sim.finish(7);
    events.advance();
}

/// What must outlive a test of another part's host stream: thread B, S's set and S itself (a
/// released stream is forgotten, its pending work with it).
type Alive = (Worker, ForeignStreams, Stream);

/// An arena whose thread B freed on host stream S in a part of its own, S's work pending
/// (`s_done`: or known done); its virtual memory; and what must stay alive.
fn beside_another_parts_host_stream(
    s_done: bool,
) -> (Arc<Arena<AddressSpaceAllocator>>, AddressSpaceVm, Alive) {
    let sim = SimEvents::new();
    let (a, vm, streams) = setup(sim.clone());
    let a = Arc::new(a);
    let (b, s) = another_part_freeing_on_host_stream(&a, &streams);
    if s_done {
        settle(&sim, &s);
    }
    (a, vm, (b, streams, s))
}

/// Thread B's part: 32 buffers of 4 MiB on no stream, the even ones freed (64 MiB of wholly
/// free pages whose work is on no stream the arena knows: unmapping them waits), the odd ones
/// kept. Returns the kept buffers.
fn a_part_with_free_pages_of_no_stream(
    a: &Arc<Arena<AddressSpaceAllocator>>,
    b: &Worker,
) -> Vec<u64> {
    let a = a.clone();
    b.run(move || {
        let all: Vec<u64> = (0..32).map(|_| alloc(&*a, 4 * MIB)).collect();
        let mut kept = Vec::new();
        for (i, p) in all.into_iter().enumerate() {
            if i % 2 == 0 {
                a.free(p).expect("free");
            } else {
                kept.push(p);
            }
        }
        kept
    })
}

/// Issue 25: past the arena-wide headroom, a thread's mapping unmaps free pages of another
/// thread's part, and such an unmap waits for the device when their work is on no stream the
/// arena knows. It must not while a host stream has work pending, in whichever part: that
/// work may wait on this very caller (a stream held at a gate it opens later), as the headroom
/// of the caller's own part already knew. The mapping holds more pages instead; once the
/// stream's events say its work is done, the next mapping unmaps them.
#[test]
fn the_headroom_never_waits_for_the_device_in_another_part_while_a_host_stream_has_work_pending() {
    let (sim, a, vm, streams) = {
        let sim = SimEvents::new();
        let (a, vm, streams) = setup(sim.clone());
        (sim, Arc::new(a), vm, streams)
    };
    let b = Worker::new();
    let kept = a_part_with_free_pages_of_no_stream(&a, &b);
    let s = streams.get(7).expect("stream");
    let caller = Worker::new();
    let (a2, s2) = (a.clone(), s.clone());
    let waits = vm.clone();
    let (waited, big) = caller.run(move || {
        // S's work up to this free is queued and, here, never completes.
        let p = on(&*a2, &s2, MIB);
        a2.free(p).expect("free on S");
        let big = on(&*a2, &s2, 64 * MIB);
        (waits.waiting_unmaps() + waits.synchronizations(), big)
    });
    assert_eq!(waited, 0, "no wait for the device while S has work pending");
    a.check_invariants().expect("invariants");
    // S's work completes: the next mapping past the headroom may wait on B's pages again.
    settle(&sim, &s);
    let (a3, s3) = (a.clone(), s.clone());
    let more = caller.run(move || on(&*a3, &s3, 64 * MIB));
    assert!(
        vm.waiting_unmaps() > 0,
        "B's free pages went back once nothing pending could wait on the caller"
    );
    for p in [big, more].into_iter().chain(kept) {
        a.free(p).expect("free");
    }
    a.check_invariants().expect("invariants");
}

/// The other way round: the caller's own headroom unmaps its own free pages of no stream (a
/// wait for the device) while host stream S of another thread's part has its frees pending
/// (`s_done`: or known done). Returns the waits for the device the caller's allocation made.
fn own_headroom_waits_beside_another_parts_host_stream(s_done: bool) -> u64 {
    let (a, vm, alive) = beside_another_parts_host_stream(s_done);
    let caller = Worker::new();
    let kept = a_part_with_free_pages_of_no_stream(&a, &caller);
    let (a3, waits) = (a.clone(), vm.clone());
    let (waited, big) = caller.run(move || {
        let big = alloc(&*a3, 96 * MIB);
        (waits.waiting_unmaps() + waits.synchronizations(), big)
    });
    for p in std::iter::once(big).chain(kept) {
        a.free(p).expect("free");
    }
    a.check_invariants().expect("invariants");
    drop(alive);
    waited
}

/// As above, for the caller's own headroom: it never waits for the device while a host
/// stream of another thread's part has work pending.
#[test]
fn the_own_headroom_never_waits_for_the_device_while_another_parts_host_stream_has_work_pending() {
    assert_eq!(
        own_headroom_waits_beside_another_parts_host_stream(false),
        0
    );
}

/// The same allocation once S's events say its work is done: the caller's free pages go back,
/// after a wait for the device (what the test above keeps from happening).
#[test]
fn the_own_headroom_waits_for_the_device_once_every_host_streams_work_is_known_done() {
    assert!(own_headroom_waits_beside_another_parts_host_stream(true) > 0);
}

/// A thread taking turns on one 64 MiB buffer, on a stream without events and on no stream
/// (past the headroom a turn on no stream waits for the device once, and the stream's free
/// memory then serves it), while host stream S of another thread's part has its frees pending
/// (`s_done`: or known done). Returns the waits for the device: synchronizations and unmaps
/// that waited.
fn turns_beside_another_parts_host_stream(s_done: bool) -> u64 {
    let (a, vm, alive) = beside_another_parts_host_stream(s_done);
    let a3 = a.clone();
    Worker::new().run(move || {
        let own = Stream::new();
        for turn in 0..6 {
            let p = match turn % 2 {
                0 => on(&*a3, &own, 64 * MIB),
                _ => alloc(&*a3, 64 * MIB),
            };
            a3.free(p).expect("free");
        }
    });
    a.check_invariants().expect("invariants");
    drop(alive);
    vm.synchronizations() + vm.waiting_unmaps()
}

/// Issue 25: the wait that lets a stream's free memory serve no stream is a wait for the
/// device: never while a host stream of another thread's part has work pending.
#[test]
fn a_stream_and_no_stream_taking_turns_never_wait_for_the_device_while_another_parts_host_stream_has_work_pending(
) {
    assert_eq!(turns_beside_another_parts_host_stream(false), 0);
}

/// The same turns once S's work is known done: the device is waited for (what the test above
/// keeps from happening).
#[test]
fn a_stream_and_no_stream_taking_turns_wait_for_the_device_once_every_host_streams_work_is_known_done(
) {
    assert!(turns_beside_another_parts_host_stream(true) > 0);
}
