//! The host stream each thread allocated on last (issue 25), so that another stream's miss
//! can tell a stream its thread left from one whose thread is only paused.
//!
//! Past the headroom, an event is recorded for a host stream that stopped freeing: a request
//! on a stream of its own ends with frees that nothing else would ever cover. But a thread
//! the OS pauses between two allocations on its own stream looks the same from outside, and
//! recording for it hands its free memory to the other threads, which it takes back when it
//! runs again: eight threads on two cores fell from 1.72x one thread's aggregate to 0.99x
//! (median of ten runs of the Rust thread benchmark on `mixed`). A stream that is some
//! thread's latest is not stalled; one whose threads all moved on to other streams (or
//! exited) is. The arena asks only when a sub-arena's last stream changes (`Arena::tag_with`),
//! so a thread that keeps to its stream and its sub-arena reads no thread-local; then one
//! thread-local read, and the stream's counter changes only when the thread changed streams.
//! A second thread arriving on a stream that is already its sub-arena's last is not counted:
//! that stream may then be recorded for while it pauses, as before this rule, never worse.

use super::stream_events::FreeEvents;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The counter of this thread's latest stream. Only the counter: the thread's last stream
/// keeps no events alive, and dropping this drops nothing but a number, even under an arena's
/// lock. Holding it is what makes the address comparison in [`allocating_on`] sound (no other
/// stream's counter can be made at that address meanwhile).
struct Latest(Cell<Option<Arc<AtomicU32>>>);

impl Drop for Latest {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::AcqRel);
        }
        LATEST_PTR.with(|p| p.set(std::ptr::null()));
    }
}

thread_local! {
    /// The address of the counter in `LATEST`: the common check, a plain read with no
    /// destructor to register.
    static LATEST_PTR: Cell<*const AtomicU32> = const { Cell::new(std::ptr::null()) };
    static LATEST: Latest = const { Latest(Cell::new(None)) };
}

/// This thread allocates on the stream of `events` now.
#[inline]
pub(crate) fn allocating_on(events: &FreeEvents) {
    let counter = events.threads_on();
    if LATEST_PTR.with(Cell::get) != Arc::as_ptr(counter) {
        switch_to(counter);
    }
}

#[cold]
fn switch_to(counter: &Arc<AtomicU32>) {
    // A thread whose locals are being destroyed counts on no stream: any answer is correct,
    // one that records an event only less lazy.
    let _ = LATEST.try_with(|l| {
        counter.fetch_add(1, Ordering::AcqRel);
        if let Some(old) = l.0.replace(Some(counter.clone())) {
            old.fetch_sub(1, Ordering::AcqRel);
        }
        LATEST_PTR.with(|p| p.set(Arc::as_ptr(counter)));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::stream_events::SimEvents;

    fn tracker(native: u64) -> Arc<FreeEvents> {
        Arc::new(FreeEvents::new(SimEvents::immediate(), native))
    }

    #[test]
    fn a_stream_is_a_threads_latest_until_the_thread_allocates_on_another() {
        let (s, t) = (tracker(7), tracker(8));
        assert!(!s.is_a_threads_latest());
        allocating_on(&s);
        allocating_on(&s);
        assert!(s.is_a_threads_latest());
        allocating_on(&t);
        assert!(!s.is_a_threads_latest());
        assert!(t.is_a_threads_latest());
    }

    #[test]
    fn a_stream_is_no_threads_latest_once_its_thread_exits() {
        let s = tracker(7);
        let held = s.clone();
        std::thread::spawn(move || allocating_on(&held))
            .join()
            .expect("thread");
        assert!(!s.is_a_threads_latest());
        assert_eq!(
            Arc::strong_count(s.threads_on()),
            1,
            "the exited thread let go of it"
        );
    }

    #[test]
    fn a_threads_latest_stream_does_not_keep_its_events_alive() {
        let s = tracker(7);
        allocating_on(&s);
        let gone = Arc::downgrade(&s);
        drop(s);
        assert!(gone.upgrade().is_none());
        let t = tracker(8);
        allocating_on(&t);
        assert!(t.is_a_threads_latest());
    }

    #[test]
    fn two_threads_on_one_stream_keep_it_latest_until_both_move_on() {
        let s = tracker(7);
        allocating_on(&s);
        let (held, other) = (s.clone(), tracker(8));
        std::thread::spawn(move || {
            allocating_on(&held);
            allocating_on(&other);
        })
        .join()
        .expect("thread");
        assert!(s.is_a_threads_latest(), "this thread is still on it");
        allocating_on(&tracker(9));
        assert!(!s.is_a_threads_latest());
    }
}
