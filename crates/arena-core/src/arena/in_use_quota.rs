//! `MaxInUse` exact across sub-arenas, with no shared counter on the common path.
//!
//! Each sub-arena counts its own `InUse` under its own lock; the arena's `InUse` is their sum.
//! Its high-water mark cannot be read off per-sub-arena peaks (the sum of peaks is not the peak
//! of the sum), and one shared atomic `InUse` would be a cache line every allocation and free of
//! every thread writes: on a many-core host that line, not the arena, bounds throughput.
//!
//! So the mark is kept by escrow. The global ledger (under the arena's global lock) holds
//! `MaxInUse` and gives each sub-arena a *quota*; two invariants hold whenever no rebalance is in
//! progress:
//!
//! 1. a sub-arena's `InUse` never exceeds its quota (so one whose quota is 0 has `InUse` 0), and
//! 2. the quotas add up to at most `MaxInUse`.
//!
//! Hence the arena's `InUse` can never pass `MaxInUse` unseen. An allocation whose charge fits
//! its sub-arena's quota only compares two numbers under the lock it holds anyway. One that does
//! not fit *rebalances*: holding the global lock, it locks every other sub-arena with a quota (the
//! others are at 0 and cannot move without the global lock), so all of them are frozen at one
//! instant; the sum is then exact, `MaxInUse` becomes the larger of itself and that sum plus the
//! charge, the charge is applied before anything is unlocked (so that value was really reached),
//! and the slack `MaxInUse − sum` is handed out again as quotas, to each sub-arena as much as it
//! has needed before (its own peak above its current use), any rest to the one that asked.
//! Frees only lower a sub-arena's use and touch no quota.
//!
//! A rebalance first asks one or two other sub-arenas in turn, without waiting, for quota they
//! hold and do not use; one with enough lends the charge and half of its unused rest, and no
//! other sub-arena is locked (with 16 threads out of phase, three rebalances in four end so,
//! and the threads' aggregate rose by about a sixth). Otherwise it takes, without waiting, the
//! locks of the other sub-arenas with a quota.
//! When some are held by their threads (which, with more threads than cores, may be off their
//! cores mid-allocation, so waiting for them costs a time slice) and the quota the ones at
//! hand leave unused covers the charge, that quota moves among them and the asker; the busy
//! ones keep theirs. The sum of quotas and `MaxInUse` stay, and no use passes its quota, so
//! the arena's `InUse` still cannot pass `MaxInUse` unseen. Only a new maximum, or unused
//! quota held by busy sub-arenas alone, waits for them.
//!
//! Lock order: the global lock before any sub-arena lock. A thread holding a sub-arena lock
//! never waits for the global lock (it tries once; on failure it lets go of its sub-arena, takes
//! the global lock, and starts over), and only the global lock's holder waits for a second
//! sub-arena lock, so no cycle can form. The `shuttle_checks` below check both properties (the
//! mark equals the true peak of the sum, nothing deadlocks) under a randomized scheduler.
//!
//! When the threads rise and fall together, as in a server replaying the same work on every
//! thread, each sub-arena's quota covers its own peak and rebalances stop after warm-up; when
//! they are out of phase, rebalances happen when one thread's use outgrows its share of the
//! slack. One thread alone holds all the slack and rebalances only on a new maximum.

use std::ops::DerefMut;

/// What the escrow needs of a sub-arena's state (read and written under its lock).
pub(crate) trait Metered {
    /// Bytes this sub-arena has handed out (its part of `InUse`).
    fn in_use(&self) -> u64;
    /// The most this sub-arena has had in use at once (a guide to how much quota it needs).
    fn peak(&self) -> u64;
    /// The quota; `in_use() <= quota()` between rebalances.
    fn quota(&self) -> u64;
    /// Sets the quota (only while the ledger is held).
    fn set_quota(&mut self, quota: u64);
}

/// The global half: `MaxInUse` and a copy of every sub-arena's quota (so a rebalance knows
/// which sub-arenas to freeze without locking the rest). Lives under the arena's global lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct InUseQuotas {
    /// The arena's `MaxInUse`.
    pub(crate) max_in_use: u64,
    /// Quota by sub-arena index; each equals that sub-arena's own `quota()`.
    pub(crate) quotas: Vec<u64>,
    /// Rebalances so far (for benchmarks and tests).
    pub(crate) rebalances: u64,
    /// Of which moved quota among the sub-arenas at hand, without waiting for busy ones.
    pub(crate) rebalances_in_part: u64,
    /// Of which borrowed from one other sub-arena alone ([`borrow`]).
    pub(crate) borrows: u64,
    /// Where the next [`borrow`] starts looking for a lender.
    next_lender: usize,
}

impl InUseQuotas {
    /// A ledger for `subs` sub-arenas, all at quota 0.
    pub(crate) fn new(subs: usize) -> Self {
        InUseQuotas {
            max_in_use: 0,
            quotas: vec![0; subs],
            rebalances: 0,
            rebalances_in_part: 0,
            borrows: 0,
            next_lender: 0,
        }
    }

    /// Forgets every quota and the mark (the arena was emptied for good).
    pub(crate) fn clear(&mut self) {
        self.max_in_use = 0;
        self.quotas.iter_mut().for_each(|q| *q = 0);
    }
}

/// What holds the ledger under the global lock.
pub(crate) trait HasInUseQuotas {
    /// The ledger.
    fn ledger(&mut self) -> &mut InUseQuotas;
}

impl HasInUseQuotas for InUseQuotas {
    fn ledger(&mut self) -> &mut InUseQuotas {
        self
    }
}

/// What the caller of [`admit`] does next.
pub(crate) enum Admit<F> {
    /// The charge fits: apply it, then drop these (the other sub-arenas a rebalance froze, and
    /// the global lock if held).
    Fits(F),
    /// The global lock is busy: let go of the sub-arena, wait for the global lock (blocking,
    /// holding nothing else), keep it in the caller's `global` and start over.
    Retry,
}

/// What asking for another sub-arena's lock gave.
pub(crate) enum Locked<G> {
    /// Its guard.
    Held(G),
    /// Another thread holds it (only when asked not to wait).
    Busy,
    /// No such sub-arena: it holds nothing.
    Missing,
}

/// The allocation path's step, under sub-arena `me`'s lock (`mine`): `charge` more bytes fit
/// its quota, or a rebalance makes them fit. The global lock is `global` if the caller already
/// holds it, else taken with `try_global` (never blocking: the caller holds a sub-arena lock);
/// when held it stays in `global` until the caller drops it, after applying the charge. Out of
/// line: the common path tests [`admits`] itself. `lock(t, wait)` locks sub-arena `t`, waiting
/// for it only when `wait`.
#[cold]
#[inline(never)]
pub(crate) fn admit<M, G, L>(
    global: &mut Option<L>,
    try_global: impl FnOnce() -> Option<L>,
    me: usize,
    mine: &mut M,
    charge: u64,
    lock: impl FnMut(usize, bool) -> Locked<G>,
) -> Admit<Vec<(usize, G)>>
where
    M: Metered,
    G: DerefMut<Target = M>,
    L: DerefMut,
    L::Target: HasInUseQuotas,
{
    if admits(mine, charge) {
        return Admit::Fits(Vec::new());
    }
    let Some(mut g) = global.take().or_else(try_global) else {
        return Admit::Retry;
    };
    let frozen = rebalance(g.ledger(), me, mine, charge, lock);
    *global = Some(g);
    Admit::Fits(frozen)
}

/// Whether `charge` more bytes fit `sub`'s quota: the common path, under `sub`'s lock.
#[inline]
pub(crate) fn admits<M: Metered>(sub: &M, charge: u64) -> bool {
    sub.in_use()
        .checked_add(charge)
        .is_some_and(|v| v <= sub.quota())
}

/// Makes room for `charge` more bytes in sub-arena `me` (whose state `mine` the caller holds
/// locked, as it holds `ledger`'s lock). First, without waiting, it locks every other
/// sub-arena with a quota that no other thread holds: when some are held (their threads may be
/// descheduled in the middle of an allocation) and the quota the ones at hand leave unused
/// covers the charge, that quota moves among them and `mine`, the busy ones keep theirs,
/// and `MaxInUse` stays (the sum of quotas does, and every use stays within its quota, so the
/// arena's `InUse` cannot pass it). Otherwise it waits for the busy ones, so every sub-arena
/// with a quota is frozen, raises `MaxInUse` to the exact sum if the charge passes it, and
/// hands the slack out again. Returns the other sub-arenas' guards: the caller applies the
/// charge to `mine` before dropping them, so a sum `MaxInUse` was raised to is one the arena
/// really reaches.
pub(crate) fn rebalance<M, G>(
    ledger: &mut InUseQuotas,
    me: usize,
    mine: &mut M,
    charge: u64,
    mut lock: impl FnMut(usize, bool) -> Locked<G>,
) -> Vec<(usize, G)>
where
    M: Metered,
    G: DerefMut<Target = M>,
{
    ledger.rebalances += 1;
    if borrow(ledger, me, mine, charge, &mut lock) {
        ledger.borrows += 1;
        return Vec::new();
    }
    let mut others: Vec<(usize, G)> = Vec::new();
    let mut busy = Vec::new();
    for t in (0..ledger.quotas.len()).filter(|&t| t != me && ledger.quotas[t] > 0) {
        match lock(t, false) {
            Locked::Held(g) => others.push((t, g)),
            Locked::Busy => busy.push(t),
            Locked::Missing => {}
        }
    }
    let my_use = mine.in_use().saturating_add(charge);
    if !busy.is_empty() {
        let quotas = others.iter().fold(u128::from(mine.quota()), |s, (_, g)| {
            s + u128::from(g.quota())
        });
        let used = others
            .iter()
            .fold(u128::from(my_use), |s, (_, g)| s + u128::from(g.in_use()));
        if quotas >= used {
            // Below the sum of these quotas, itself at most `MaxInUse`: fits a u64.
            let unused = (quotas - used) as u64;
            hand_out(ledger, me, mine, my_use, &mut others, unused);
            ledger.rebalances_in_part += 1;
            return others;
        }
        // A new maximum, or the unused quota is the busy ones': wait for them.
        for t in busy {
            if let Locked::Held(g) = lock(t, true) {
                others.push((t, g));
            }
        }
    }
    let sum = others
        .iter()
        .fold(my_use, |s, (_, g)| s.saturating_add(g.in_use()));
    ledger.max_in_use = ledger.max_in_use.max(sum);
    let slack = ledger.max_in_use - sum;
    hand_out(ledger, me, mine, my_use, &mut others, slack);
    others
}

/// Other sub-arenas [`borrow`] asks, at most.
const LENDERS_ASKED: usize = 2;

/// Moves quota another sub-arena holds and does not use to `mine`, if one of the next
/// [`LENDERS_ASKED`] with a quota (taken in turn, never waited for) has enough for the charge:
/// the charge and half of what that one leaves unused beyond it. The sum of quotas stays, as
/// `MaxInUse` does, and no use passes its quota, so the mark stays exact without freezing every
/// sub-arena. With threads out of phase, one thread's quota runs out while another's frees left
/// its own unused: a full rebalance there locked all the others (16 threads: one every ~1,800
/// allocations, each holding every other thread off its lock for a moment).
fn borrow<M, G>(
    ledger: &mut InUseQuotas,
    me: usize,
    mine: &mut M,
    charge: u64,
    lock: &mut impl FnMut(usize, bool) -> Locked<G>,
) -> bool
where
    M: Metered,
    G: DerefMut<Target = M>,
{
    let n = ledger.quotas.len();
    let Some(need) = mine
        .in_use()
        .checked_add(charge)
        .map(|u| u.saturating_sub(mine.quota()))
    else {
        return false;
    };
    let mut asked = 0;
    for i in 0..n {
        let t = (ledger.next_lender + i) % n;
        if t == me || ledger.quotas[t] < need {
            continue;
        }
        asked += 1;
        if let Locked::Held(mut g) = lock(t, false) {
            let unused = g.quota().saturating_sub(g.in_use());
            if unused >= need {
                let moved = need + (unused - need) / 2;
                let theirs = g.quota() - moved;
                g.set_quota(theirs);
                ledger.quotas[t] = theirs;
                let q = mine.quota() + moved;
                mine.set_quota(q);
                ledger.quotas[me] = q;
                ledger.next_lender = (t + 1) % n;
                return true;
            }
        }
        if asked == LENDERS_ASKED {
            ledger.next_lender = (t + 1) % n;
            break;
        }
    }
    false
}

/// Hands `slack` bytes of quota out to `others` and `mine` (whose use, its charge counted, is
/// `my_use`), on top of their use: each as much as it has needed before (its own peak above its
/// use), in proportion when the slack falls short, the rest to `mine`.
fn hand_out<M, G>(
    ledger: &mut InUseQuotas,
    me: usize,
    mine: &mut M,
    my_use: u64,
    others: &mut [(usize, G)],
    slack: u64,
) where
    M: Metered,
    G: DerefMut<Target = M>,
{
    let my_want = mine.peak().saturating_sub(my_use);
    let wants: Vec<u64> = others
        .iter()
        .map(|(_, g)| g.peak().saturating_sub(g.in_use()))
        .collect();
    let total_want = wants
        .iter()
        .fold(u128::from(my_want), |s, &w| s + u128::from(w));
    let share = |want: u64| -> u64 {
        if total_want <= u128::from(slack) {
            want
        } else {
            // want / total_want of the slack; below `slack`, so it fits.
            (u128::from(slack) * u128::from(want) / total_want) as u64
        }
    };
    let mut given = 0u64;
    for ((t, g), &want) in others.iter_mut().zip(&wants) {
        let s = share(want);
        given += s;
        let q = g.in_use() + s;
        g.set_quota(q);
        ledger.quotas[*t] = q;
    }
    // The asker gets its share and whatever is left.
    let q = my_use + (slack - given);
    mine.set_quota(q);
    ledger.quotas[me] = q;
}

/// A sub-arena reduced to what the escrow reads, for the tests below.
#[cfg(test)]
#[derive(Debug, Default)]
struct Toy {
    in_use: u64,
    peak: u64,
    quota: u64,
}

#[cfg(test)]
impl Metered for Toy {
    fn in_use(&self) -> u64 {
        self.in_use
    }
    fn peak(&self) -> u64 {
        self.peak
    }
    fn quota(&self) -> u64 {
        self.quota
    }
    fn set_quota(&mut self, quota: u64) {
        self.quota = quota;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    fn charge(subs: &[Mutex<Toy>], ledger: &mut InUseQuotas, me: usize, bytes: u64) {
        let mut mine = subs[me].lock();
        let _frozen = if admits(&*mine, bytes) {
            Vec::new()
        } else {
            rebalance(ledger, me, &mut *mine, bytes, |t, _| {
                Locked::Held(subs[t].lock())
            })
        };
        mine.in_use += bytes;
        mine.peak = mine.peak.max(mine.in_use);
    }

    #[test]
    fn a_new_maximum_is_recorded_exactly() {
        let subs: Vec<Mutex<Toy>> = (0..3).map(|_| Mutex::new(Toy::default())).collect();
        let mut ledger = InUseQuotas::new(3);
        charge(&subs, &mut ledger, 0, 100);
        charge(&subs, &mut ledger, 1, 50);
        assert_eq!(ledger.max_in_use, 150);
        subs[0].lock().in_use -= 100;
        charge(&subs, &mut ledger, 1, 60);
        assert_eq!(ledger.max_in_use, 150, "110 in use is no new maximum");
        charge(&subs, &mut ledger, 2, 41);
        assert_eq!(ledger.max_in_use, 151);
    }

    #[test]
    fn quotas_never_add_up_to_more_than_the_maximum() {
        let subs: Vec<Mutex<Toy>> = (0..4).map(|_| Mutex::new(Toy::default())).collect();
        let mut ledger = InUseQuotas::new(4);
        let mut x = 7u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let me = (x % 4) as usize;
            if x.is_multiple_of(3) {
                let mut s = subs[me].lock();
                let f = s.in_use.min(x % 1000);
                s.in_use -= f;
            } else {
                charge(&subs, &mut ledger, me, x % 700);
            }
            let q: u64 = ledger.quotas.iter().sum();
            assert!(q <= ledger.max_in_use);
            for (t, s) in subs.iter().enumerate() {
                let s = s.lock();
                assert!(s.in_use <= s.quota && s.quota == ledger.quotas[t]);
            }
        }
    }

    /// Sub-arenas, the ledger at `max`: sub-arena `t` with `(in_use, peak, quota)`.
    fn world(max: u64, subs: &[(u64, u64, u64)]) -> (Vec<Mutex<Toy>>, InUseQuotas) {
        let mut ledger = InUseQuotas::new(subs.len());
        ledger.max_in_use = max;
        let subs = subs
            .iter()
            .enumerate()
            .map(|(t, &(in_use, peak, quota))| {
                ledger.quotas[t] = quota;
                Mutex::new(Toy {
                    in_use,
                    peak,
                    quota,
                })
            })
            .collect();
        (subs, ledger)
    }

    #[test]
    fn a_rebalance_borrows_unused_quota_from_one_sub_arena_locking_no_other() {
        // Sub-arena 1 holds 100 bytes of quota it does not use; 2 must not be asked.
        let (subs, mut ledger) = world(150, &[(0, 0, 0), (0, 100, 100), (40, 50, 50)]);
        let mut mine = subs[0].lock();
        let mut asked = Vec::new();
        let frozen = rebalance(&mut ledger, 0, &mut *mine, 60, |t, _| {
            asked.push(t);
            Locked::Held(subs[t].lock())
        });
        assert!(frozen.is_empty(), "no other sub-arena stays frozen");
        assert_eq!(asked, [1]);
        assert_eq!(ledger.borrows, 1);
        assert_eq!(ledger.max_in_use, 150, "no new maximum");
        assert_eq!(
            (mine.quota, subs[1].lock().quota),
            (80, 20),
            "the charge and half the lender's unused rest"
        );
        assert_eq!(ledger.quotas, [80, 20, 50], "the ledger's copy follows");
    }

    #[test]
    fn a_rebalance_takes_unused_quota_from_the_sub_arenas_at_hand_without_waiting_for_a_busy_one() {
        // Sub-arenas 1 and 2 hold 40 bytes of quota each they do not use, neither enough
        // alone; 3 is busy (its thread holds it).
        let (subs, mut ledger) = world(200, &[(0, 0, 0), (0, 40, 40), (0, 40, 40), (40, 50, 50)]);
        let busy = subs[3].lock();
        let mut mine = subs[0].lock();
        let frozen = rebalance(&mut ledger, 0, &mut *mine, 60, |t, wait| {
            assert!(!wait, "waited for sub-arena {t}");
            match t {
                3 => Locked::Busy,
                _ => Locked::Held(subs[t].lock()),
            }
        });
        drop(frozen);
        assert_eq!(ledger.max_in_use, 200, "no new maximum");
        assert_eq!((ledger.rebalances_in_part, ledger.borrows), (1, 0));
        assert!(mine.quota >= 60, "the charge fits");
        assert_eq!(
            (busy.quota, ledger.quotas[3]),
            (50, 50),
            "the busy one keeps its quota"
        );
        assert_eq!(
            ledger.quotas.iter().sum::<u64>(),
            130,
            "the quotas add up as before"
        );
    }

    #[test]
    fn a_rebalance_waits_for_a_busy_sub_arena_when_the_charge_makes_a_new_maximum() {
        let (subs, mut ledger) = world(150, &[(0, 0, 0), (0, 100, 100), (40, 50, 50)]);
        let mut mine = subs[0].lock();
        let mut waited = Vec::new();
        let frozen = rebalance(&mut ledger, 0, &mut *mine, 130, |t, wait| {
            if wait {
                waited.push(t);
                Locked::Held(subs[t].lock())
            } else if t == 2 {
                Locked::Busy
            } else {
                Locked::Held(subs[t].lock())
            }
        });
        drop(frozen);
        assert_eq!(waited, [2]);
        assert_eq!(ledger.max_in_use, 170, "130 + the busy one's 40");
        assert_eq!(ledger.rebalances_in_part, 0);
    }

    #[test]
    fn sub_arenas_that_rise_together_stop_rebalancing_once_warm() {
        let subs: Vec<Mutex<Toy>> = (0..4).map(|_| Mutex::new(Toy::default())).collect();
        let mut ledger = InUseQuotas::new(4);
        let round = |ledger: &mut InUseQuotas| {
            for step in 0..50 {
                for me in 0..4 {
                    charge(&subs, ledger, me, 10 + step);
                }
            }
            for s in &subs {
                s.lock().in_use = 0;
            }
        };
        round(&mut ledger);
        let warm = ledger.rebalances;
        round(&mut ledger);
        round(&mut ledger);
        assert_eq!(
            ledger.rebalances, warm,
            "no rebalance once every quota covers its peak"
        );
    }
}

/// The escrow under shuttle's randomized scheduler: threads charge their own sub-arena through
/// [`admit`] exactly as the allocation path does, free from their own and from others', and a
/// reader freezes everything as `stats()` does. A "truth" counter moved in the same critical
/// sections gives the real sum at every step; the ledger's `MaxInUse` must equal its peak, and
/// no schedule may deadlock (shuttle fails the test if every thread is blocked).
#[cfg(test)]
mod shuttle_checks {
    use super::*;
    use shuttle::sync::atomic::{AtomicU64, Ordering};
    use shuttle::sync::{Mutex, MutexGuard};
    use std::sync::Arc;

    struct World {
        subs: Vec<Mutex<Toy>>,
        global: Mutex<InUseQuotas>,
        truth: AtomicU64,
        truth_peak: AtomicU64,
    }

    impl World {
        fn new(n: usize) -> Arc<Self> {
            Arc::new(World {
                subs: (0..n).map(|_| Mutex::new(Toy::default())).collect(),
                global: Mutex::new(InUseQuotas::new(n)),
                truth: AtomicU64::new(0),
                truth_peak: AtomicU64::new(0),
            })
        }

        fn lock(&self, t: usize) -> MutexGuard<'_, Toy> {
            self.subs[t].lock().expect("not poisoned")
        }

        /// The allocation path's loop around `admit`, as `Arena::try_take` runs it.
        fn charge(&self, me: usize, bytes: u64) {
            let mut global: Option<MutexGuard<'_, InUseQuotas>> = None;
            loop {
                let mut mine = self.lock(me);
                let step = admit(
                    &mut global,
                    || self.global.try_lock().ok(),
                    me,
                    &mut *mine,
                    bytes,
                    |t, wait| {
                        if wait {
                            Locked::Held(self.lock(t))
                        } else {
                            self.subs[t].try_lock().map_or(Locked::Busy, Locked::Held)
                        }
                    },
                );
                match step {
                    Admit::Fits(frozen) => {
                        mine.in_use += bytes;
                        mine.peak = mine.peak.max(mine.in_use);
                        let now = self.truth.fetch_add(bytes, Ordering::SeqCst) + bytes;
                        self.truth_peak.fetch_max(now, Ordering::SeqCst);
                        drop(frozen);
                        return;
                    }
                    Admit::Retry => {
                        drop(mine);
                        global = Some(self.global.lock().expect("not poisoned"));
                    }
                }
            }
        }

        fn free(&self, t: usize, bytes: u64) {
            let mut s = self.lock(t);
            let f = s.in_use.min(bytes);
            s.in_use -= f;
            self.truth.fetch_sub(f, Ordering::SeqCst);
        }

        /// What `stats()` does: everything frozen, then the invariants.
        fn freeze_and_check(&self) {
            let ledger = self.global.lock().expect("not poisoned");
            let subs: Vec<_> = (0..self.subs.len()).map(|t| self.lock(t)).collect();
            let sum: u64 = subs.iter().map(|s| s.in_use).sum();
            assert_eq!(sum, self.truth.load(Ordering::SeqCst), "a frozen instant");
            assert!(
                sum <= ledger.max_in_use,
                "InUse {sum} passed MaxInUse unseen"
            );
            let quotas: u64 = ledger.quotas.iter().sum();
            assert!(quotas <= ledger.max_in_use);
            for (t, s) in subs.iter().enumerate() {
                assert!(s.in_use <= s.quota && s.quota == ledger.quotas[t]);
            }
        }
    }

    fn scenario() {
        scenario_freeing(9);
    }

    /// Three threads charge their own sub-arenas and free `freed` bytes of another's (enough,
    /// at 40, to leave quota unused that the next charge may borrow). Returns the borrows.
    fn scenario_freeing(freed: u64) -> u64 {
        let world = World::new(3);
        let workers: Vec<_> = (0..3usize)
            .map(|me| {
                let w = world.clone();
                shuttle::thread::spawn(move || {
                    for step in 0..3u64 {
                        w.charge(me, 10 + 7 * step + me as u64);
                        if step % 2 == 1 {
                            // A free from another thread.
                            w.free((me + 1) % 3, freed);
                        }
                    }
                    w.free(me, 20);
                })
            })
            .collect();
        let reader = {
            let w = world.clone();
            shuttle::thread::spawn(move || w.freeze_and_check())
        };
        for h in workers {
            h.join().expect("worker");
        }
        reader.join().expect("reader");
        world.freeze_and_check();
        let max = world.global.lock().expect("not poisoned").max_in_use;
        assert_eq!(
            max,
            world.truth_peak.load(Ordering::SeqCst),
            "MaxInUse is the true peak of the sum"
        );
        let borrows = world.global.lock().expect("not poisoned").borrows;
        borrows
    }

    #[test]
    fn max_in_use_is_the_true_peak_and_no_schedule_deadlocks_random() {
        shuttle::check_random(scenario, 3000);
    }

    #[test]
    fn max_in_use_is_the_true_peak_and_no_schedule_deadlocks_pct() {
        shuttle::check_pct(scenario, 3000, 3);
    }

    #[test]
    fn max_in_use_stays_the_true_peak_while_threads_borrow_quota() {
        // Borrows over every schedule (shuttle runs them one at a time, on this test's thread).
        static BORROWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        shuttle::check_random(
            || {
                let b = scenario_freeing(40);
                BORROWS.fetch_add(b, std::sync::atomic::Ordering::Relaxed);
            },
            3000,
        );
        assert!(
            BORROWS.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "some schedule borrowed"
        );
    }
}
