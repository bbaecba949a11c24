//! The sub-arenas' lock: parking_lot's mutex. Waiters spin briefly, then park, and an unlock
//! that finds one parked wakes it, so the lock goes to a waiter as soon as it is free.
//!
//! It replaced a lock whose waiters slept in fixed 20 µs naps (so that unlocking was a plain
//! store, with nobody to wake): under contention a freed lock sat idle until a napper woke, and
//! sixteen threads on one arena fell to a fraction of one thread's throughput (issue 15). Each
//! thread now has a sub-arena of its own, so the lock is rarely contended at all; when it is (a
//! free from another thread, a quota rebalance), hand-off is what keeps the others moving.

use parking_lot::{Mutex, MutexGuard};

/// Mutual exclusion for `T`, as above.
#[derive(Debug, Default)]
pub struct ArenaLock<T> {
    inner: Mutex<T>,
}

/// Access to the locked value; releases the lock when dropped.
pub type ArenaGuard<'a, T> = MutexGuard<'a, T>;

impl<T> ArenaLock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        ArenaLock {
            inner: Mutex::new(value),
        }
    }

    /// Waits for the lock and takes it.
    #[inline]
    pub fn lock(&self) -> ArenaGuard<'_, T> {
        self.inner.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

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
