//! The live allocator handles, and the values C holds for them.
//!
//! A `cuda_arena_allocator*` is not an address: it packs a slot index and that slot's
//! generation (`generation << INDEX_BITS | index`). Every call looks its slot up and checks
//! the generation under the slot's read lock before it touches the handle, so a destroyed
//! handle, destroyed twice or used after its destroy, is `ERR_ARENA_RELEASED` and never a
//! read of freed memory. A slot's generation only grows, and a slot whose generation is
//! spent is never used again, so no value is ever handed out twice in a process: a dead
//! handle cannot come back to life as someone else's allocator. Generations start at a random
//! point per copy of the library, so a handle of another copy loaded in the same process is
//! not one of this copy's either.
//!
//! Slots live in segments that are allocated on demand and never freed or moved (each twice
//! the size of the one before), so a slot can be read without a table-wide lock. We write this
//! rather than use a concurrent slab crate because those key their shards by thread and cap
//! the number of threads (panicking past it), and what we need is this small.
//!
//! The common path takes no lock at all (issue 15): a slot's read lock is a counter every
//! thread using that handle writes, and sixteen threads allocating through one handle spent
//! their time passing that cache line around. Each thread keeps the last few handles it used
//! (an `Arc` of each) and checks, with one read of the slot's `live` value, that the handle
//! is still alive. A destroy clears `live` before it takes the handle out, so a call that
//! starts after the destroy is `ERR_ARENA_RELEASED`; one already past the check runs on the
//! allocator it holds, which the destroy may be retiring meanwhile: it then completes or fails
//! with `ERR_ARENA_RELEASED` as the allocator's own calls do, and never touches freed memory
//! (it holds the `Arc`).

use crate::codes::{clear_last_in, fail_in};
use crate::thread_state::{ThreadState, RECENT_HANDLES, THREAD};
use cuda_arena_core::{Allocator, ArenaError, Factory, ForeignStreams};
use parking_lot::{Mutex, RwLock};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Handles alive at once: up to 2^20, far more than any host needs, while the largest
/// segment stays at 2^20 slots.
const INDEX_BITS: u32 = 20;
/// The first segment holds 2^6 slots; segment k holds 2^(6+k).
const FIRST_SEGMENT_BITS: u32 = 6;
/// Enough segments for 2^INDEX_BITS slots: 64 · (2^15 − 1) ≥ 2^20.
const SEGMENTS: usize = (INDEX_BITS - FIRST_SEGMENT_BITS + 1) as usize;
/// The last generation a slot may carry; the bits above the index.
const MAX_GENERATION: usize = usize::MAX >> INDEX_BITS;

/// What a live handle holds: one user of a shared allocator.
#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) factory: Arc<Factory>,
    pub(crate) allocator: Arc<dyn Allocator>,
    /// `allocator.is_stream_aware()`, which never changes: asked once, not on every
    /// allocation on a stream.
    pub(crate) stream_aware: bool,
    /// The host's stream tokens, shared by every user of the allocator.
    pub(crate) streams: Arc<ForeignStreams>,
}

#[derive(Debug, Default)]
struct SlotState {
    /// The generation of the last handle placed here; 0 when the slot was never used.
    generation: usize,
    /// `Some` while that handle is alive.
    handle: Option<Arc<Handle>>,
}

/// Aligned to its own cache lines, so threads on different handles do not share the lines
/// their locks write.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot {
    state: RwLock<SlotState>,
    /// The value of the live handle in this slot, 0 when none: what the lock-free path checks.
    /// Set after the handle is in place, cleared before it is taken out.
    live: AtomicUsize,
}

struct Table {
    segments: [OnceLock<Box<[Slot]>>; SEGMENTS],
    /// Slots free for reuse, and the first index never used.
    free: Mutex<(Vec<u32>, u32)>,
}

static TABLE: Table = Table {
    segments: [const { OnceLock::new() }; SEGMENTS],
    free: Mutex::new((Vec::new(), 0)),
};

/// Segment and offset of slot `index`.
fn locate(index: usize) -> (usize, usize) {
    let shifted = index + (1 << FIRST_SEGMENT_BITS);
    let segment = (shifted.ilog2() - FIRST_SEGMENT_BITS) as usize;
    (
        segment,
        shifted - (1 << (segment as u32 + FIRST_SEGMENT_BITS)),
    )
}

/// The slot `index`, if its segment exists.
fn slot(index: usize) -> Option<&'static Slot> {
    let (segment, offset) = locate(index);
    TABLE.segments.get(segment)?.get()?.get(offset)
}

/// The slot `index`, making its segment on first use; `None` when the system has no memory
/// for it (reported, not an abort).
fn slot_or_make(index: usize) -> Option<&'static Slot> {
    let (segment, offset) = locate(index);
    let cell = TABLE.segments.get(segment)?;
    if cell.get().is_none() {
        let n = 1usize << (segment as u32 + FIRST_SEGMENT_BITS);
        let mut slots = Vec::new();
        slots.try_reserve_exact(n).ok()?;
        slots.resize_with(n, Slot::default);
        // Another thread may have made it meanwhile; then ours goes.
        let _ = cell.set(slots.into_boxed_slice());
    }
    cell.get()?.get(offset)
}

fn encode(index: usize, generation: usize) -> *mut c_void {
    std::ptr::without_provenance_mut(generation << INDEX_BITS | index)
}

fn decode(a: *const c_void) -> (usize, usize) {
    let v = a.addr();
    (v & ((1 << INDEX_BITS) - 1), v >> INDEX_BITS)
}

fn not_a_handle() -> ArenaError {
    ArenaError::InvalidArgument {
        reason: "the allocator is not a handle from cuda_arena_create".into(),
    }
}

fn released() -> ArenaError {
    ArenaError::Released {
        what: "the allocator handle (destroyed)".into(),
    }
}

/// The generation a slot's first handle follows in this copy of the library: random, below
/// 2^42 (a slot still has over 2^43 generations left), so that two copies loaded in one
/// process (each with its own table) hand out different values, and a handle of one is no
/// handle of the other.
fn first_generation() -> usize {
    use std::hash::{BuildHasher, Hasher};
    static FIRST: OnceLock<usize> = OnceLock::new();
    *FIRST.get_or_init(|| {
        // std seeds each RandomState from the system's random source.
        let random = std::hash::RandomState::new().build_hasher().finish();
        (random & ((1 << 42) - 1)) as usize
    })
}

/// Why the handle `a` with `generation` is not live in a slot that holds `state`.
fn dead(a: *const c_void, generation: usize, state: &SlotState) -> ArenaError {
    if a.is_null() {
        ArenaError::InvalidArgument {
            reason: "the allocator is NULL".into(),
        }
    } else if generation != 0 && generation <= state.generation {
        released()
    } else {
        not_a_handle()
    }
}

/// Makes `handle` live; the value C will hold for it.
pub(crate) fn insert(handle: Handle) -> Result<*mut c_void, (ArenaError, Handle)> {
    let index = {
        let mut free = TABLE.free.lock();
        match free.0.pop() {
            Some(i) => Some(i as usize),
            None if (free.1 as usize) < 1 << INDEX_BITS => {
                free.1 += 1;
                Some(free.1 as usize - 1)
            }
            None => None,
        }
    };
    let Some((index, slot)) = index.and_then(|i| match slot_or_make(i) {
        Some(slot) => Some((i, slot)),
        None => {
            // No memory for its segment: the index stays free for a later try.
            TABLE.free.lock().0.push(i as u32);
            None
        }
    }) else {
        let e = ArenaError::InvalidArgument {
            reason: format!(
                "no room for another allocator handle (at most {} alive at once, memory \
                 permitting); destroy some first",
                1usize << INDEX_BITS
            ),
        };
        return Err((e, handle));
    };
    let mut state = slot.state.write();
    // A slot is on the free list only while empty and with generations left.
    state.generation = state.generation.max(first_generation()) + 1;
    state.handle = Some(Arc::new(handle));
    let value = encode(index, state.generation);
    slot.live.store(value.addr(), Ordering::Release);
    Ok(value)
}

/// Runs `f` on the live handle `a`, holding it alive (see the module docs for a destroy that
/// races the call).
pub(crate) fn with<T>(
    a: *const c_void,
    f: impl FnOnce(&Handle) -> Result<T, ArenaError>,
) -> Result<T, ArenaError> {
    run(a, |h, _| f(h), |_, _| {})
}

/// As [`with`], and records the outcome as this thread's last error (cleared on success), in
/// the same access to the thread's state; `f` gets that state too.
#[inline]
pub(crate) fn with_reported<T>(
    a: *const c_void,
    f: impl FnOnce(&Handle, &ThreadState) -> Result<T, ArenaError>,
) -> Result<T, ArenaError> {
    run(a, f, |t, r| match r {
        Ok(_) => clear_last_in(t),
        Err(e) => {
            fail_in(t, e);
        }
    })
}

/// The common path finds the handle in this thread's cache, still alive; the rest look it up
/// (and remember it, unless a call on this thread is running on a cached handle already).
/// A call made while this thread's locals are being destroyed (from a C `pthread_key`
/// destructor or a C++ `thread_local`'s, after ours) runs on a state of its own, uncached,
/// instead of failing: a free from such a destructor must not leak.
#[inline(always)]
fn run<T>(
    a: *const c_void,
    f: impl FnOnce(&Handle, &ThreadState) -> Result<T, ArenaError>,
    report: impl Fn(&ThreadState, &Result<T, ArenaError>),
) -> Result<T, ArenaError> {
    let mut call = Some((f, report));
    let done = THREAD.try_with(|t| call.take().map(|(f, report)| run_in(t, a, f, report)));
    match (done, call) {
        (Ok(Some(r)), _) => r,
        (_, Some((f, report))) => run_uncached(a, f, report),
        // The local was reachable and the call ran: `call` was taken.
        (_, None) => Err(ArenaError::InvalidArgument {
            reason: "this thread's state was unreachable".into(),
        }),
    }
}

/// [`run`] once this thread's locals are gone: out of line, so that every entry point's
/// common path stays as short as it was without it (inlined, it made one thread's trace
/// replay about 3 % slower on an H200).
#[cold]
#[inline(never)]
fn run_uncached<T>(
    a: *const c_void,
    f: impl FnOnce(&Handle, &ThreadState) -> Result<T, ArenaError>,
    report: impl Fn(&ThreadState, &Result<T, ArenaError>),
) -> Result<T, ArenaError> {
    run_in(&ThreadState::new(), a, f, report)
}

#[inline(always)]
fn run_in<T>(
    t: &ThreadState,
    a: *const c_void,
    f: impl FnOnce(&Handle, &ThreadState) -> Result<T, ArenaError>,
    report: impl Fn(&ThreadState, &Result<T, ArenaError>),
) -> Result<T, ArenaError> {
    let (index, generation) = decode(a);
    let value = a.addr();
    let at = index % RECENT_HANDLES;
    let mut looked_up = None;
    let r = {
        let recent = t.handles.try_borrow().ok();
        let hit = recent.as_deref().and_then(|r| match &r[at] {
            Some((v, h))
                if *v == value
                    && slot(index).is_some_and(|s| s.live.load(Ordering::Acquire) == value) =>
            {
                Some(h)
            }
            _ => None,
        });
        let handle: &Arc<Handle> = match hit {
            Some(h) => h,
            None => match look_up(a, index, generation) {
                Ok(h) => looked_up.insert(h),
                Err(e) => {
                    let r = Err(e);
                    report(t, &r);
                    return r;
                }
            },
        };
        f(handle, t)
    };
    if let Some(h) = looked_up {
        if let Ok(mut recent) = t.handles.try_borrow_mut() {
            recent[at] = Some((value, h));
        }
    }
    report(t, &r);
    r
}

/// The live handle `a`, from the table.
fn look_up(a: *const c_void, index: usize, generation: usize) -> Result<Arc<Handle>, ArenaError> {
    let Some(slot) = slot(index) else {
        return Err(dead(a, generation, &SlotState::default()));
    };
    let state = slot.state.read();
    match &state.handle {
        Some(h) if state.generation == generation => Ok(h.clone()),
        _ => Err(dead(a, generation, &state)),
    }
}

/// Takes the live handle `a` out of the table; the caller releases it. The value `a` stays
/// dead for good.
pub(crate) fn remove(a: *const c_void) -> Result<Arc<Handle>, ArenaError> {
    let (index, generation) = decode(a);
    let Some(slot) = slot(index) else {
        return Err(dead(a, generation, &SlotState::default()));
    };
    let mut state = slot.state.write();
    let handle = match state.handle.take() {
        Some(h) if state.generation == generation => h,
        other => {
            state.handle = other;
            return Err(dead(a, generation, &state));
        }
    };
    slot.live.store(0, Ordering::Release);
    let reusable = state.generation < MAX_GENERATION;
    drop(state);
    if reusable {
        // index < 2^INDEX_BITS, so it fits.
        TABLE.free.lock().0.push(index as u32);
    }
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_segments_that_double() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        assert_eq!(locate((1 << INDEX_BITS) - 1).0, SEGMENTS - 1);
    }

    #[test]
    fn a_value_that_was_never_a_handle_is_refused_without_a_lookup_past_the_table() {
        for v in [1usize, 0x7ffd_1234_5678, usize::MAX, (1 << INDEX_BITS) - 1] {
            let e = with(std::ptr::without_provenance(v), |_| Ok(())).expect_err("no handle");
            assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT", "{v:#x}");
        }
    }
}
