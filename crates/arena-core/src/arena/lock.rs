//! The arena's lock: one atomic exchange to take it, one plain store to give it back.
//!
//! A general-purpose mutex (std's, parking_lot's) also needs an atomic read-modify-write to
//! release, to learn whether anyone sleeps on it; at ~8 ns per atomic on the machines we
//! measure, that is a quarter of an alloc+free pair. The arena's critical sections are tens
//! of nanoseconds, except when the raw allocator is called (growth, shrink), so waiters spin
//! briefly, then yield, then sleep in short steps: nobody sleeps on the lock, so releasing it
//! needs to wake nobody.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::hint::spin_loop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const SPINS: u32 = 64;
const YIELDS: u32 = 64;
const NAP: Duration = Duration::from_micros(20);

/// Mutual exclusion for `T`, as above.
#[derive(Debug, Default)]
pub struct ArenaLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time (the `locked` flag,
// taken with Acquire and released with Release, orders every access), so sharing the lock
// is as safe as sending `T`.
unsafe impl<T: Send> Sync for ArenaLock<T> {}

/// Access to the locked value; releases the lock when dropped.
#[derive(Debug)]
pub struct ArenaGuard<'a, T> {
    lock: &'a ArenaLock<T>,
}

impl<T> ArenaLock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        ArenaLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// One atomic exchange (measured a little cheaper than a compare-and-swap here).
    #[inline]
    fn try_take(&self) -> bool {
        !self.locked.swap(true, Ordering::Acquire)
    }

    /// Waits for the lock and takes it.
    #[inline]
    pub fn lock(&self) -> ArenaGuard<'_, T> {
        if !self.try_take() {
            self.lock_slow();
        }
        ArenaGuard { lock: self }
    }

    #[cold]
    fn lock_slow(&self) {
        let mut round = 0u32;
        loop {
            // Read before trying again, so waiters do not fight over the cache line.
            if !self.locked.load(Ordering::Relaxed) && self.try_take() {
                return;
            }
            round = round.saturating_add(1);
            if round < SPINS {
                for _ in 0..(1u32 << (round / 8).min(6)) {
                    spin_loop();
                }
            } else if round < SPINS + YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
    }
}

impl<T> Deref for ArenaGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: a guard exists only while its thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ArenaGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: a guard exists only while its thread holds the lock, and `&mut self`
        // keeps this the only reference derived from it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ArenaGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn increments_from_many_threads_are_not_lost() {
        let lock = Arc::new(ArenaLock::new(0u64));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(*lock.lock(), 160_000);
    }

    #[test]
    fn a_holder_that_sleeps_does_not_lose_waiters() {
        let lock = Arc::new(ArenaLock::new(Vec::new()));
        let g = lock.lock();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock().push(2))
        };
        std::thread::sleep(Duration::from_millis(30));
        drop(g);
        waiter.join().expect("waiter");
        lock.lock().push(3);
        assert_eq!(*lock.lock(), vec![2, 3]);
    }
}
