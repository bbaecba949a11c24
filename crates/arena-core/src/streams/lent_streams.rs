//! A host stream lent to one call without touching its count (issue 25).
//!
//! A thread that finds a host stream in its remembered lookups used to take a counted reference
//! for the call (`Weak::upgrade`) and give it back after: two atomic read-modify-writes on a line
//! every thread on the stream shares. Without them the GPU's trace replays through the C ABI ran
//! in 0.92–0.96 of the time (docs/benchmarks.md, "Twenty-second session"). Instead the thread
//! publishes the stream's address in a slot of its own (a plain store), checks that its lookup
//! is still current, and uses the stream; the set that forgets a
//! stream waits, before it drops its reference, until no slot holds the stream's address. So a
//! stream is released exactly when it was before: once forgotten and no call is using it.
//!
//! The check after the store must see a forget that the forgetting thread's scan could miss:
//! that needs a full fence between the two, on one side or the other. The common side takes
//! only a compiler fence; the rare side (a forget) makes every running thread of the process
//! execute one with `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, as liburcu and folly's hazard
//! pointers do. Where the kernel does not offer it (or not Linux), both sides take a fence.
//!
//! A call must not forget, on the same thread, the stream it has lent: the forget would wait for
//! itself. Nothing in a lent call looks streams up or forgets them.

use parking_lot::Mutex;
use std::cell::OnceCell;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// One thread's slot: the address of the stream it has lent, 0 when none. Written twice by
/// every lent call, so each has cache lines of its own (two: adjacent-line prefetch): slots
/// that shared a line would pass it between the threads' cores on every allocation.
#[derive(Debug, Default)]
#[repr(align(128))]
struct LendSlot {
    lent: AtomicUsize,
}

/// Every registered slot, scanned by a forget.
static SLOTS: Mutex<Vec<Arc<LendSlot>>> = Mutex::new(Vec::new());

/// Whether the process registered for private expedited membarriers (set once, before
/// [`REGISTERED`] completes).
static MEMBARRIER: AtomicBool = AtomicBool::new(false);

/// Registration, done once before the first slot is used.
static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers the process for `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`; whether it can
/// use it.
fn registered() -> bool {
    *REGISTERED.get_or_init(|| {
        let ok = membarrier::register();
        MEMBARRIER.store(ok, Ordering::Release);
        ok
    })
}

/// The common side's fence: a compiler fence where forgets run a membarrier, else a full one.
#[inline(always)]
fn light() {
    if !MEMBARRIER.load(Ordering::Relaxed) {
        fence(Ordering::SeqCst);
    }
    compiler_fence(Ordering::SeqCst);
}

/// The forget's side: a full fence on every running thread of the process.
fn heavy() {
    if registered() && membarrier::barrier() {
        return;
    }
    // A child of fork(2) may not have inherited the registration: once more.
    if MEMBARRIER.load(Ordering::Relaxed) && membarrier::register() && membarrier::barrier() {
        return;
    }
    // Unregistered (every slot then takes a full fence itself), or the barrier failed after
    // registering, which the kernel does not do: a fence here, and a pause long enough for any
    // store buffer to drain, rather than a wrong answer.
    fence(Ordering::SeqCst);
    if MEMBARRIER.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(1));
        fence(Ordering::SeqCst);
    }
}

#[cfg(target_os = "linux")]
mod membarrier {
    const CMD_QUERY: libc::c_int = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    #[allow(unsafe_code)]
    fn call(cmd: libc::c_int) -> libc::c_long {
        // SAFETY: membarrier takes two integers and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_int) }
    }

    /// Whether the kernel offers private expedited barriers and registered this process.
    pub(super) fn register() -> bool {
        let offered = call(CMD_QUERY);
        let both = libc::c_long::from(CMD_PRIVATE_EXPEDITED | CMD_REGISTER_PRIVATE_EXPEDITED);
        offered >= 0 && offered & both == both && call(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    }

    /// Runs a full fence on every running thread of the process; whether it did.
    pub(super) fn barrier() -> bool {
        call(CMD_PRIVATE_EXPEDITED) == 0
    }
}

#[cfg(not(target_os = "linux"))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn barrier() -> bool {
        false
    }
}

/// A thread's lending: its slot, registered on first use and taken out when it is dropped
/// (with the thread's locals).
#[derive(Debug)]
pub(crate) struct Lender {
    slot: OnceCell<Arc<LendSlot>>,
}

impl Lender {
    pub(crate) const fn new() -> Self {
        Lender {
            slot: OnceCell::new(),
        }
    }

    #[inline(always)]
    fn slot(&self) -> &LendSlot {
        match self.slot.get() {
            Some(slot) => slot,
            None => self.register(),
        }
    }

    /// A thread's first loan: out of line, off the common path.
    #[cold]
    #[inline(never)]
    fn register(&self) -> &LendSlot {
        self.slot.get_or_init(|| {
            // Before the slot can be used: `light` then knows which fence it needs.
            registered();
            let slot = Arc::new(LendSlot::default());
            SLOTS.lock().push(slot.clone());
            slot
        })
    }

    /// Lends the stream at `addr` for as long as the guard lives, if `current()` (asked after
    /// the slot is published) says the lookup that found it is still current: then the set that
    /// holds it keeps it alive until the guard is dropped. None if not current, or if this
    /// thread already lends one (a nested call takes a counted reference instead).
    #[inline(always)]
    pub(crate) fn lend(&self, addr: usize, current: impl FnOnce() -> bool) -> Option<Lent<'_>> {
        let slot = self.slot();
        // Only this thread writes its slot.
        if slot.lent.load(Ordering::Relaxed) != 0 {
            return None;
        }
        slot.lent.store(addr, Ordering::Relaxed);
        light();
        let lent = Lent(slot);
        current().then_some(lent)
    }
}

impl Drop for Lender {
    fn drop(&mut self) {
        if let Some(mine) = self.slot.take() {
            SLOTS.lock().retain(|s| !Arc::ptr_eq(s, &mine));
        }
    }
}

/// A stream lent by a thread; returned when dropped.
#[derive(Debug)]
pub(crate) struct Lent<'a>(&'a LendSlot);

impl Drop for Lent<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: the call's uses of the stream come before a forget's drop of it.
        self.0.lent.store(0, Ordering::Release);
    }
}

/// Waits until no thread lends any of `addrs`, streams that every set that lends them has
/// forgotten (so no new loan of them can begin): after it, dropping them releases them as
/// dropping them always did. Called with no lock held.
pub(crate) fn wait_until_returned(addrs: &[usize]) {
    if addrs.is_empty() {
        return;
    }
    // Every loan published before the forget is visible from here on; every one after it
    // sees the forget and is refused.
    heavy();
    let slots: Vec<Arc<LendSlot>> = SLOTS.lock().clone();
    for slot in &slots {
        while addrs.contains(&slot.lent.load(Ordering::Acquire)) {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_loan_is_refused_when_its_lookup_is_stale_and_leaves_the_slot_empty() {
        let l = Lender::new();
        assert!(l.lend(8, || false).is_none());
        assert_eq!(l.slot().lent.load(Ordering::Relaxed), 0);
        let lent = l.lend(8, || true).expect("current");
        assert_eq!(l.slot().lent.load(Ordering::Relaxed), 8);
        drop(lent);
        assert_eq!(l.slot().lent.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_nested_loan_is_refused() {
        let l = Lender::new();
        let outer = l.lend(8, || true).expect("current");
        assert!(l.lend(16, || true).is_none());
        assert_eq!(
            l.slot().lent.load(Ordering::Relaxed),
            8,
            "the outer loan stands"
        );
        drop(outer);
    }

    #[test]
    fn a_dropped_lender_leaves_the_registry() {
        let l = Lender::new();
        l.register();
        let mine = Arc::clone(l.slot.get().expect("registered"));
        assert!(SLOTS.lock().iter().any(|s| Arc::ptr_eq(s, &mine)));
        drop(l);
        assert!(!SLOTS.lock().iter().any(|s| Arc::ptr_eq(s, &mine)));
    }

    #[test]
    fn waiting_for_a_stream_ends_only_once_its_loan_is_returned() {
        let l = Lender::new();
        let returned = AtomicU64::new(0);
        std::thread::scope(|t| {
            let lent = l.lend(24, || true).expect("current");
            let waiter = t.spawn(|| {
                wait_until_returned(&[24]);
                returned.load(Ordering::SeqCst)
            });
            // The waiter cannot finish while the loan stands, however long it runs.
            for _ in 0..1000 {
                std::thread::yield_now();
                assert!(!waiter.is_finished());
            }
            returned.store(1, Ordering::SeqCst);
            drop(lent);
            assert_eq!(waiter.join().expect("waiter"), 1);
        });
    }
}
