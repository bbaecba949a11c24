//! Issue 25: in virtual-memory mode an unmap waits for the device (on CUDA, for the whole
//! context) only when queued work may still use its pages. Pages whose chunks were last used
//! on host streams whose events say their work is past those frees are unmapped with no wait;
//! a chunk handed out with no stream, a stream without events, or a free not yet known done
//! makes the unmap wait, as every unmap did before. `AddressSpaceVm::waiting_unmaps` counts the
//! unmaps that would have waited on CUDA.

mod common;

use common::*;
use cuda_arena_core::{
    AddressSpaceAllocator, AddressSpaceVm, Allocator, Arena, DeviceLimits, ForeignStreams,
    SimEvents, Stream, StreamEvents, VirtualMemory,
};
use std::sync::Arc;

const PAGE: u64 = 2 * MIB;

/// An arena in virtual-memory mode, the virtual memory it maps from (to count its unmaps),
/// and host streams with `events`.
fn setup(
    events: Arc<dyn StreamEvents>,
) -> (Arena<AddressSpaceAllocator>, AddressSpaceVm, ForeignStreams) {
    let raw = AddressSpaceAllocator::new(DeviceLimits::with_total(GIB)).with_granularity(PAGE);
    let vm = raw.vm();
    let shared: Arc<dyn VirtualMemory> = Arc::new(vm.clone());
    let a = Arena::with_virtual_memory(raw, shared, config(&[])).expect("arena");
    (a, vm, ForeignStreams::with_events(Some(events)))
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
    vm.waiting_unmaps()
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
