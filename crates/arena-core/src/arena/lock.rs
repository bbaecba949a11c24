//! The sub-arenas' lock: one atomic exchange to take it, a plain store to give it back, and
//! waiters that park and are woken by the unlock, so a freed lock goes to a waiter at once.
//!
//! Why not a stock mutex: parking_lot's and std's also need an atomic read-modify-write to
//! release (to learn whether anyone sleeps). Measured on one thread (`cargo bench --bench
//! threads`, 2-core AMD EPYC VM), parking_lot's mutex cost about 1–2 ns more per operation than
//! a store release (of ~52 ns); through the C ABI (~105 ns) the difference was within the noise.
//! The single-thread bar of issue 15 allows 5% in all, so the cheaper release. Why not the lock
//! this one replaced, whose release was the same plain store: nobody could be woken, so its waiters slept
//! in fixed 20 µs naps, and under contention a freed lock sat idle until a napper woke (sixteen
//! threads on one arena fell to a fraction of one thread's throughput). Each thread now has a
//! sub-arena of its own, so the lock is rarely contended at all; when it is (a free from
//! another thread, a quota rebalance), waking is what keeps the others moving.
//!
//! A waiter counts itself in `parked`, then parks (parking_lot_core's queue for this lock's
//! address) while the lock is still held; an unlock stores `false` and, if `parked` is not 0,
//! wakes one. Without a fence between that store and that load, an unlock can read `parked`
//! before a waiter's count reaches it while the waiter still sees the lock held: that waiter
//! would miss its wake-up. It then wakes on its own after [`SAFETY_NET`] and tries again; this
//! needs the two threads inside the same few nanoseconds, so it is the exception, not the way
//! waiters get the lock.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::hint::spin_loop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Rounds of spinning before a waiter parks: the critical sections are tens of nanoseconds.
const SPINS: u32 = 40;
/// How long a parked waiter waits before it looks again by itself (see the module docs).
const SAFETY_NET: Duration = Duration::from_millis(1);

/// Mutual exclusion for `T`, as above.
#[derive(Debug, Default)]
pub struct ArenaLock<T> {
    locked: AtomicBool,
    /// Waiters parked, or about to park, on this lock.
    parked: AtomicU32,
    /// Held by an allocation or a free (taken by [`ArenaLock::lock_for_use`] or
    /// [`ArenaLock::try_lock_for_use`]), not by a reader of stats or logs: what tells a thread
    /// that finds the lock taken that another thread allocates beside it.
    in_use: AtomicBool,
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
    /// Taken for an allocation or a free (see the field `in_use` of [`ArenaLock`]).
    for_use: bool,
}

impl<T> ArenaLock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        ArenaLock {
            locked: AtomicBool::new(false),
            parked: AtomicU32::new(0),
            in_use: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// One atomic exchange (measured a little cheaper than a compare-and-swap here).
    #[inline]
    fn try_take(&self) -> bool {
        !self.locked.swap(true, Ordering::Acquire)
    }

    /// The key of this lock's queue of parked threads: its address, which it owns.
    fn key(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// The lock, if it is free now.
    #[inline]
    pub fn try_lock(&self) -> Option<ArenaGuard<'_, T>> {
        // Lazily: a guard made and dropped for nothing would release a lock another holds.
        self.try_take().then(|| ArenaGuard {
            lock: self,
            for_use: false,
        })
    }

    /// [`ArenaLock::try_lock`] for an allocation or a free.
    #[inline]
    pub fn try_lock_for_use(&self) -> Option<ArenaGuard<'_, T>> {
        let mut g = self.try_lock()?;
        self.in_use.store(true, Ordering::Relaxed);
        g.for_use = true;
        Some(g)
    }

    /// [`ArenaLock::lock`] for an allocation or a free.
    #[inline]
    pub fn lock_for_use(&self) -> ArenaGuard<'_, T> {
        let mut g = self.lock();
        self.in_use.store(true, Ordering::Relaxed);
        g.for_use = true;
        g
    }

    /// Whether the lock is held, as last seen, for an allocation or a free (a hint: read
    /// without the lock).
    #[inline]
    pub fn held_for_use(&self) -> bool {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The lock, if it is free now or comes free while this thread spins as
    /// [`ArenaLock::lock`] would before parking; `None` rather than park. For a thread that
    /// can do without this lock's value: one held across a driver call, or by a thread the
    /// scheduler took off its core (more threads than cores), is not waited for.
    #[inline]
    pub fn lock_unless_stalled(&self) -> Option<ArenaGuard<'_, T>> {
        (self.try_take() || self.spin()).then(|| ArenaGuard {
            lock: self,
            for_use: false,
        })
    }

    /// Waits for the lock and takes it.
    #[inline]
    pub fn lock(&self) -> ArenaGuard<'_, T> {
        if !self.try_take() {
            self.lock_slow();
        }
        ArenaGuard {
            lock: self,
            for_use: false,
        }
    }

    /// Spins a while for the lock; whether it was taken.
    #[cold]
    fn spin(&self) -> bool {
        for round in 0..SPINS {
            // Read before trying again, so waiters do not fight over the cache line.
            if !self.locked.load(Ordering::Relaxed) && self.try_take() {
                return true;
            }
            for _ in 0..(1u32 << (round / 8).min(5)) {
                spin_loop();
            }
        }
        false
    }

    #[cold]
    fn lock_slow(&self) {
        if self.spin() {
            return;
        }
        loop {
            self.parked.fetch_add(1, Ordering::SeqCst);
            // SAFETY: the key is this lock's own address, used by no other primitive; the
            // callbacks neither panic nor call into parking_lot.
            unsafe {
                parking_lot_core::park(
                    self.key(),
                    || self.locked.load(Ordering::SeqCst),
                    || {},
                    |_, _| {},
                    parking_lot_core::DEFAULT_PARK_TOKEN,
                    Some(Instant::now() + SAFETY_NET),
                );
            }
            self.parked.fetch_sub(1, Ordering::SeqCst);
            if !self.locked.load(Ordering::Relaxed) && self.try_take() {
                return;
            }
        }
    }

    #[cold]
    fn wake_one(&self) {
        // SAFETY: as in `lock_slow`; the callback neither panics nor calls into parking_lot.
        unsafe {
            parking_lot_core::unpark_one(self.key(), |_| parking_lot_core::DEFAULT_UNPARK_TOKEN);
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
        if self.for_use {
            self.lock.in_use.store(false, Ordering::Relaxed);
        }
        self.lock.locked.store(false, Ordering::Release);
        if self.lock.parked.load(Ordering::Relaxed) != 0 {
            self.lock.wake_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_try_lock_that_fails_leaves_the_lock_held() {
        let lock = ArenaLock::new(0u64);
        let held = lock.lock();
        assert!(lock.try_lock().is_none());
        assert!(lock.try_lock().is_none(), "still held by the first guard");
        drop(held);
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn lock_unless_stalled_gives_up_on_a_lock_held_throughout_without_parking() {
        let lock = ArenaLock::new(0u64);
        let held = lock.lock();
        assert!(lock.lock_unless_stalled().is_none());
        assert_eq!(
            lock.parked.load(Ordering::SeqCst),
            0,
            "it never counted itself parked"
        );
        drop(held);
        *lock.lock_unless_stalled().expect("free now") += 1;
        assert_eq!(*lock.lock(), 1);
    }

    #[test]
    fn lock_unless_stalled_excludes_like_lock() {
        let lock = Arc::new(ArenaLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    let mut taken = 0u64;
                    for _ in 0..20_000 {
                        if let Some(mut g) = lock.lock_unless_stalled() {
                            *g += 1;
                            taken += 1;
                        }
                    }
                    taken
                })
            })
            .collect();
        let taken: u64 = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        assert_eq!(*lock.lock(), taken, "no increment lost, none counted twice");
    }

    #[test]
    fn a_lock_taken_for_use_says_so_until_released_and_a_readers_does_not() {
        let lock = ArenaLock::new(0u64);
        let g = lock.lock_for_use();
        assert!(lock.held_for_use());
        drop(g);
        assert!(!lock.held_for_use());
        let g = lock.lock();
        assert!(!lock.held_for_use(), "a reader's hold");
        drop(g);
        let g = lock.try_lock_for_use().expect("free");
        assert!(lock.held_for_use());
        assert!(lock.try_lock_for_use().is_none());
        drop(g);
        assert!(!lock.held_for_use());
    }

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

    #[test]
    fn a_waiter_parks_and_is_woken_by_the_unlock() {
        let lock = Arc::new(ArenaLock::new(0u32));
        let g = lock.lock();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || *lock.lock() += 1)
        };
        // The waiter spins, then counts itself as parked.
        while lock.parked.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(g);
        waiter.join().expect("waiter");
        assert_eq!(*lock.lock(), 1);
        assert_eq!(lock.parked.load(Ordering::SeqCst), 0);
    }
}
