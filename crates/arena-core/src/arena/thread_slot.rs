//! A small number for each live thread, for picking its sub-arena (`sub_arenas.rs`), and
//! whether the thread still allocates from the shared one.
//!
//! A thread takes the lowest number no live thread holds the first time it asks, and gives it
//! back when it exits. So threads alive at once hold distinct numbers (each its own sub-arena
//! while there are no more of them than sub-arenas), and a thread that replaces one that
//! exited takes over its number, and with it the sub-arena and the memory cached there: a
//! program that runs one short-lived thread after another does not spread its memory over
//! ever more sub-arenas. Asking costs one thread-local read after the first time.

use parking_lot::Mutex;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Numbers given back, lowest first, and the next number never handed out.
static POOL: Mutex<(BinaryHeap<Reverse<u32>>, u32)> = Mutex::new((BinaryHeap::new(), 0));

/// The number this thread holds; given back when the thread's locals are destroyed.
#[derive(Debug)]
struct Held(u32);

impl Held {
    fn take() -> Self {
        let mut pool = POOL.lock();
        match pool.0.pop() {
            Some(Reverse(n)) => Held(n),
            None => {
                let n = pool.1;
                pool.1 = pool.1.saturating_add(1);
                Held(n)
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        POOL.lock().0.push(Reverse(self.0));
    }
}

thread_local! {
    /// Whether this thread has left the shared sub-arena (see [`left_shared`]).
    static LEFT_SHARED: Cell<bool> = const { Cell::new(false) };
    /// This thread's number once it has one (`u32::MAX` before): a plain read, where `HELD`,
    /// having a destructor, is checked for registration on every access.
    static NUMBER: Cell<u32> = const { Cell::new(u32::MAX) };
    static HELD: Held = Held::take();
}

/// This thread's number. A thread whose locals are already being destroyed (an allocator
/// used from another thread-local's destructor) may get a number another thread holds, or 0:
/// any number is correct, a shared one only slower.
#[inline]
pub(crate) fn current() -> u32 {
    NUMBER.with(|n| match n.get() {
        u32::MAX => first(n),
        v => v,
    })
}

/// Whether this thread has met another in the shared sub-arena and allocates from its own
/// since: one thread-local read.
#[inline]
pub(crate) fn left_shared() -> bool {
    LEFT_SHARED.with(Cell::get)
}

/// From now on this thread allocates from a sub-arena of its own.
#[cold]
pub(crate) fn leave_shared() {
    LEFT_SHARED.with(|l| l.set(true));
}

#[cold]
fn first(n: &Cell<u32>) -> u32 {
    let v = HELD.try_with(|h| h.0).unwrap_or(0);
    n.set(v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_alive_at_once_hold_distinct_numbers() {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let numbers: Vec<u32> = (0..8)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let n = current();
                    barrier.wait();
                    n
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        let mut sorted = numbers.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), numbers.len(), "{numbers:?}");
    }

    #[test]
    fn a_thread_starts_shared_and_leaves_for_good() {
        std::thread::spawn(|| {
            assert!(!left_shared());
            leave_shared();
            assert!(left_shared());
            leave_shared();
            assert!(left_shared());
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_thread_asking_twice_gets_the_same_number() {
        assert_eq!(current(), current());
    }

    #[test]
    fn a_number_given_back_is_handed_out_again() {
        let first = std::thread::spawn(current).join().expect("thread");
        // Other tests' threads come and go meanwhile; the number must be free again at some
        // point, and nobody else holds it while we do.
        let mut seen = false;
        for _ in 0..1000 {
            let n = std::thread::spawn(current).join().expect("thread");
            if n <= first {
                seen = true;
                break;
            }
        }
        assert!(seen, "number {first} was never handed out again");
    }
}
