//! Events on streams the host owns (issue 13): how a chunk freed on host-owned stream S comes
//! free for other streams without the host saying anything.
//!
//! A free on S takes the next *mark* of S (a number; no driver call, under the arena's lock).
//! When another stream T finds no free chunk of its own, the arena covers S's marks with an
//! event recorded on S (every mark taken so far happened before the record, so the event
//! stands for S's work up to those frees) and queries S's events without blocking; once an
//! event has completed, every chunk freed on S up to its marks may go to any stream. This is
//! PyTorch's `record_stream` rule (an event recorded on the stream, queried before reuse),
//! recorded lazily: a program that allocates on one stream never records an event.
//!
//! A host that may destroy a stream without a word (ONNX Runtime destroys a session's streams
//! when the session is released, frees some of their chunks after that, and tells no
//! allocator) makes any later driver call naming the stream undefined: a lazy record, and even
//! a record at the free, crashed processes on an H200 and an H100. For such a stream
//! ([`FreeEvents::set_host_may_destroy`]) events are recorded only while the host is inside a
//! call that passes the stream ([`FreeEvents::cover_in_use`], at its allocations), every
//! [`COVER_EVERY`] frees or when the last event has been seen complete; other streams only
//! query and wait on those events. Frees after the stream's last allocation stay its own
//! until the device is synchronized on the way to out of memory, or the handle comes back.
//!
//! The driver is called only here, never under the arena's lock; each stream keeps at most
//! [`MAX_PENDING_EVENTS`] events, recorded again in place when full (a later point of the
//! same stream covers every earlier one), and hands them back to the backend's pool.
//!
//! [`StreamEvents`] is what a backend supplies: pooled `CUevent`s on `cuda`
//! (`cuda-sys-bridge`), [`SimEvents`] for tests, whose streams finish when a test says so.

use crate::types::error::{ArenaError, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Events a stream keeps recorded and not yet seen complete.
pub const MAX_PENDING_EVENTS: usize = 4;

/// For a stream the host may destroy: at its allocations, an event is recorded once this many
/// frees are not yet covered by one, or at once when no event is pending.
pub const COVER_EVERY: u64 = 32;

/// The legacy default stream's handle (CUDA's `CU_STREAM_LEGACY`). The null stream is a stream
/// the host owns like any other; hosts that pass 0 for it (PyTorch does) are given this value.
pub const LEGACY_STREAM: u64 = 1;

/// Events on a backend's streams, named by opaque `u64` handles. Implementations pool their
/// events; none of these calls may block except [`StreamEvents::synchronize`] and
/// [`StreamEvents::synchronize_device`].
pub trait StreamEvents: Send + Sync + std::fmt::Debug {
    /// An event recorded on `stream`: it completes when the stream's work so far has.
    fn record(&self, stream: u64) -> Result<u64>;

    /// Records `event` again on `stream`, so that it now stands for the work so far.
    fn rerecord(&self, event: u64, stream: u64) -> Result<()>;

    /// Whether the work `event` stands for has completed. Never blocks.
    fn is_done(&self, event: u64) -> Result<bool>;

    /// Blocks until the work `event` stands for has completed.
    fn synchronize(&self, event: u64) -> Result<()>;

    /// Makes `stream`'s later work wait on the device for `event`; the host does not block.
    fn stream_wait(&self, stream: u64, event: u64) -> Result<()>;

    /// Hands `event` back to the pool; it may be recorded again for anyone.
    fn release(&self, event: u64);

    /// Blocks until all work on the device has completed (streams destroyed meanwhile
    /// included).
    fn synchronize_device(&self) -> Result<()>;

    /// What the stream that handle `stream` names now is, unique for the life of the process
    /// (CUDA: `cuStreamGetId`); `None` when unknown. A handle whose identity changes was
    /// destroyed and its value reused for a new stream.
    fn stream_identity(&self, stream: u64) -> Option<u64> {
        let _ = stream;
        None
    }

    /// How many [`StreamEvents::synchronize_device`] and [`StreamEvents::synchronize`] calls
    /// have blocked so far, in that order, where the backend's device stats do not count them
    /// already (the simulated backends add them to `device_waits` and `stream_waits`; CUDA
    /// counts them on its context). None by default.
    fn blocking_waits(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// The events of one host-owned stream: its marks, what is known complete, and the events
/// recorded to find out. Shared by the stream and by the allocators that tag chunks with it.
#[derive(Debug)]
pub struct FreeEvents {
    events: Arc<dyn StreamEvents>,
    native: u64,
    /// Marks taken so far: each free of a chunk tagged with the stream takes the next one.
    marked: AtomicU64,
    /// Every mark up to this one is known complete.
    completed: AtomicU64,
    /// Events recorded and not yet seen complete, oldest first, each with the highest mark
    /// it covers (its label). At most [`MAX_PENDING_EVENTS`].
    pending: Mutex<VecDeque<(u64, u64)>>,
    /// The host may destroy the stream without telling: record only in its calls.
    host_may_destroy: AtomicBool,
    /// Forgotten by its set because its frees were done and it held nothing (issue 25): an
    /// allocator that finds it holding memory when it is released (a call took it in the
    /// meantime) keeps its chunks' tags until they are free and their frees done.
    forgotten: AtomicBool,
    /// The highest mark an event recorded so far covers (the newest pending event's label,
    /// or what is complete): read without the lock by [`FreeEvents::cover_in_use`].
    recorded: AtomicU64,
    /// The marks taken when [`FreeEvents::advance_if_stalled`] last looked.
    seen_marked: AtomicU64,
    /// Threads whose latest allocation on a host stream was on this one (`threads_on.rs`).
    /// Shared with those threads' locals, which hold the counter and never the events: a
    /// thread's last stream keeps no events (nor their backend's device context) alive, and
    /// letting go of it from under an arena's lock drops no events there.
    threads_on: Arc<AtomicU32>,
}

impl FreeEvents {
    /// The tracker for stream `native` of `events`' backend.
    pub fn new(events: Arc<dyn StreamEvents>, native: u64) -> Self {
        FreeEvents {
            events,
            native,
            marked: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            pending: Mutex::new(VecDeque::new()),
            host_may_destroy: AtomicBool::new(false),
            forgotten: AtomicBool::new(false),
            recorded: AtomicU64::new(0),
            seen_marked: AtomicU64::new(0),
            threads_on: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The host may destroy this stream without a reset (ONNX Runtime's sessions do): from now
    /// on events are recorded on it only in calls that pass it ([`FreeEvents::cover_in_use`]),
    /// never when another stream wants its chunks; [`FreeEvents::advance`] only queries, and
    /// [`FreeEvents::finish`] waits on what was recorded, then on the device.
    pub fn set_host_may_destroy(&self) {
        if !self.host_may_destroy.load(Ordering::Relaxed) {
            self.host_may_destroy.store(true, Ordering::Release);
        }
    }

    /// The stream's set forgets it as done (see the field `forgotten`); before it is released.
    pub fn set_forgotten(&self) {
        self.forgotten.store(true, Ordering::Release);
    }

    /// Whether the stream's set forgot it as done ([`FreeEvents::set_forgotten`]).
    pub fn was_forgotten(&self) -> bool {
        self.forgotten.load(Ordering::Acquire)
    }

    /// Whether events are recorded only in calls that pass this stream.
    #[inline]
    pub fn host_may_destroy(&self) -> bool {
        self.host_may_destroy.load(Ordering::Acquire)
    }

    /// The stream's handle.
    pub fn native(&self) -> u64 {
        self.native
    }

    /// The backend's events.
    pub fn events(&self) -> &Arc<dyn StreamEvents> {
        &self.events
    }

    /// The count of threads whose latest allocation on a host stream was on this one.
    pub(crate) fn threads_on(&self) -> &Arc<AtomicU32> {
        &self.threads_on
    }

    /// Whether some live thread's latest allocation on a host stream was on this one.
    pub fn is_a_threads_latest(&self) -> bool {
        self.threads_on.load(Ordering::Acquire) > 0
    }

    /// Takes the next mark, for a free happening now. No driver call.
    #[inline]
    pub fn mark(&self) -> u64 {
        self.marked.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether the stream's work up to the free that took `mark` is known complete.
    #[inline]
    pub fn is_complete(&self, mark: u64) -> bool {
        self.completed.load(Ordering::Acquire) >= mark
    }

    /// Every mark up to this one is known complete.
    #[inline]
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Whether some mark is not yet known complete.
    pub fn has_incomplete(&self) -> bool {
        self.marked.load(Ordering::Acquire) > self.completed.load(Ordering::Acquire)
    }

    /// Events recorded and not yet seen complete.
    pub fn pending(&self) -> usize {
        self.pending.lock().len()
    }

    /// Pops the events that have completed, oldest first; what they cover is then complete.
    /// A query that fails counts as not complete (the chunks stay the stream's own).
    fn poll(&self, pending: &mut VecDeque<(u64, u64)>) -> bool {
        let mut advanced = false;
        while let Some(&(label, ev)) = pending.front() {
            if !self.events.is_done(ev).unwrap_or(false) {
                break;
            }
            pending.pop_front();
            self.events.release(ev);
            self.completed.fetch_max(label, Ordering::AcqRel);
            advanced = true;
        }
        advanced
    }

    /// Covers every mark taken so far with an event (recording one unless the newest
    /// already covers them) and polls the events without blocking. Returns whether more
    /// marks are now known complete. Takes only this stream's lock, never the arena's.
    /// For a stream the [host may destroy](FreeEvents::set_host_may_destroy) it only polls:
    /// the caller is another stream, and this one may be gone.
    pub fn advance(&self) -> bool {
        let mut pending = self.pending.lock();
        let advanced = self.poll(&mut pending);
        if self.host_may_destroy() {
            return advanced;
        }
        self.cover(&mut pending) | advanced
    }

    /// Polls the events without blocking and records nothing: for a caller that must not
    /// name the stream to the driver. Returns whether more marks are now known complete.
    pub fn poll_now(&self) -> bool {
        self.poll(&mut self.pending.lock())
    }

    /// For another stream that wants memory: polls, and covers the frees with an event too
    /// when none covers them, no free came since the last look and no thread's latest
    /// allocation was on the stream (the stream stopped freeing and its threads moved on: its
    /// next allocation, which would cover them, may never come; a request on a stream of its
    /// own). A stream still freeing, or whose thread is only paused, is only polled: an event
    /// recorded for every other stream's miss cost 33 us per allocation with 16 threads (see
    /// [`FreeEvents::cover_in_use`]), and one recorded for a paused thread's stream hands its
    /// memory to the others until it runs again. `even_a_threads_latest`: cover a stream that
    /// stopped freeing even while it is a live thread's latest (the caller would otherwise map
    /// memory past what churn may reach). Returns whether more marks are now known complete.
    pub fn advance_if_stalled(&self, even_a_threads_latest: bool) -> bool {
        let marked = self.marked.load(Ordering::Acquire);
        if marked > self.recorded.load(Ordering::Acquire)
            && (even_a_threads_latest || !self.is_a_threads_latest())
            && self.seen_marked.swap(marked, Ordering::AcqRel) == marked
        {
            return self.advance();
        }
        self.poll_now()
    }

    /// In a call that passes this stream (an allocation on it: the host keeps it alive for
    /// the call), with no arena lock held: records an event covering the frees so far once
    /// [`COVER_EVERY`] of them are not covered, or as soon as no event is pending. Most calls
    /// decide that from three atomic loads.
    #[inline]
    pub fn cover_in_use(&self) {
        let marked = self.marked.load(Ordering::Acquire);
        let recorded = self.recorded.load(Ordering::Acquire);
        if marked <= recorded {
            return;
        }
        let pending = recorded > self.completed.load(Ordering::Acquire);
        if pending && marked - recorded < COVER_EVERY {
            return;
        }
        let mut pending = self.pending.lock();
        self.poll(&mut pending);
        self.cover(&mut pending);
    }

    /// Records (or re-records) an event covering every mark taken so far, unless the newest
    /// already does, and polls. The caller knows the stream is alive.
    fn cover(&self, pending: &mut VecDeque<(u64, u64)>) -> bool {
        let mut advanced = false;
        // Read before recording: every free that took a mark up to `label` happened before
        // the record, so the event stands for the stream's work up to those frees.
        let label = self.marked.load(Ordering::Acquire);
        let covered = pending
            .back()
            .map_or(self.completed.load(Ordering::Acquire), |&(l, _)| l);
        if label > covered {
            let full = pending.len() >= MAX_PENDING_EVENTS;
            match pending.back_mut() {
                // Full: the newest event is recorded again, standing for a later point.
                Some(back) if full => {
                    if self.events.rerecord(back.1, self.native).is_ok() {
                        back.0 = label;
                        self.recorded.fetch_max(label, Ordering::AcqRel);
                    }
                }
                _ => {
                    // A record that fails covers nothing: those chunks stay the stream's own
                    // until it is reset (or an out-of-memory wait finds them done).
                    if let Ok(ev) = self.events.record(self.native) {
                        pending.push_back((label, ev));
                        self.recorded.fetch_max(label, Ordering::AcqRel);
                    }
                }
            }
            advanced |= self.poll(pending);
        }
        advanced
    }

    /// Marks taken so far.
    pub fn marked(&self) -> u64 {
        self.marked.load(Ordering::Acquire)
    }

    /// Every mark up to `label` is complete: the caller read it with [`FreeEvents::marked`]
    /// and then saw the whole device finish what was queued. Events that cover no more go back
    /// to the pool.
    pub fn complete_through(&self, label: u64) {
        let mut pending = self.pending.lock();
        while let Some(&(l, ev)) = pending.front() {
            if l > label {
                break;
            }
            pending.pop_front();
            self.events.release(ev);
        }
        self.completed.fetch_max(label, Ordering::AcqRel);
        self.recorded.fetch_max(label, Ordering::AcqRel);
    }

    /// In a call that passes this stream (the host keeps it alive for the call): covers every
    /// mark taken so far with an event and waits for that event, this stream's work alone,
    /// never the device's. Returns whether every mark taken before the call is now complete.
    pub fn finish_own(&self) -> bool {
        let mut pending = self.pending.lock();
        self.poll(&mut pending);
        let label = self.marked.load(Ordering::Acquire);
        if label <= self.completed.load(Ordering::Acquire) {
            return true;
        }
        self.cover(&mut pending);
        // The cover polls: an event recorded behind work already done (the device ahead of
        // the host) is complete and gone from `pending` at once. Without this, a stream whose
        // work keeps up was never found done here, and the headroom mapped pages beside its
        // free ones instead of unmapping them (the GPU benchmark's one stream held 1.26x on
        // `inference` where a stream still running its work held 1.02x).
        if label <= self.completed.load(Ordering::Acquire) {
            return true;
        }
        match pending.back() {
            Some(&(l, ev)) if l >= label && self.events.synchronize(ev).is_ok() => {
                // The newest event covers all the others: they are done too.
                for (_, ev) in pending.drain(..) {
                    self.events.release(ev);
                }
                self.completed.fetch_max(l, Ordering::AcqRel);
                true
            }
            _ => false,
        }
    }

    /// Blocks until every mark taken so far is complete, as on the way to out of memory: waits
    /// on the newest event, and, for a stream the host may destroy (whose latest frees no
    /// event may cover), on the whole device. Returns whether more marks are now known
    /// complete.
    pub fn finish(&self) -> bool {
        let mut advanced = self.advance();
        let mut pending = self.pending.lock();
        if let Some(&(label, ev)) = pending.back() {
            if self.events.synchronize(ev).is_ok() {
                // The newest event covers all the others: they are done too.
                for (_, ev) in pending.drain(..) {
                    self.events.release(ev);
                }
                self.completed.fetch_max(label, Ordering::AcqRel);
                advanced = true;
            }
        }
        // Frees after the last event of a stream that may be gone: no event can be recorded
        // for them, but once the whole device has finished what was queued, they are done.
        let marked = self.marked.load(Ordering::Acquire);
        if self.host_may_destroy()
            && marked > self.completed.load(Ordering::Acquire)
            && self.events.synchronize_device().is_ok()
        {
            for (_, ev) in pending.drain(..) {
                self.events.release(ev);
            }
            self.completed.fetch_max(marked, Ordering::AcqRel);
            self.recorded.fetch_max(marked, Ordering::AcqRel);
            advanced = true;
        }
        advanced
    }
}

/// Blocks until the whole device has finished what was queued, then counts every mark the
/// streams in `streams` had taken before as complete: for streams the
/// [host may destroy](FreeEvents::set_host_may_destroy), whose frees after their last own call
/// no event can cover (issue 25: ONNX Runtime's sessions on a thread pool, whose runs end
/// with their memory freed and nothing said). One device-wide wait for them all; the
/// caller holds no arena lock. Returns whether the wait succeeded.
pub fn settle_on_device(streams: &[Arc<FreeEvents>]) -> bool {
    let Some(first) = streams.first() else {
        return false;
    };
    // Read before the wait: every free that took these marks happened before it.
    let marks: Vec<u64> = streams.iter().map(|f| f.marked()).collect();
    if first.events.synchronize_device().is_err() {
        return false;
    }
    for (f, mark) in streams.iter().zip(marks) {
        f.complete_through(mark);
    }
    true
}

impl Drop for FreeEvents {
    fn drop(&mut self) {
        for (_, ev) in self.pending.get_mut().drain(..) {
            self.events.release(ev);
        }
    }
}

/// Simulated events for `host` and `virtual` and for tests: a stream's work is a count of
/// the events recorded on it, and it completes when [`SimEvents::finish`] says so (or at once
/// with [`SimEvents::immediate`], for memory with no asynchronous work behind it).
#[derive(Debug, Default)]
pub struct SimEvents {
    state: Mutex<SimState>,
}

#[derive(Debug, Default)]
struct SimState {
    /// Event handle - 1 → (stream, position on it, handed out).
    events: Vec<(u64, u64, bool)>,
    /// Handles back in the pool.
    free: Vec<u64>,
    /// Stream → (records so far, records finished).
    streams: BTreeMap<u64, (u64, u64)>,
    /// Every `stream_wait(stream, event)` so far, as (stream, the event's stream).
    waits: Vec<(u64, u64)>,
    identities: BTreeMap<u64, u64>,
    immediate: bool,
    /// Streams whose later events complete at once ([`SimEvents::finish_for_good`]).
    idle: std::collections::BTreeSet<u64>,
    failing: Vec<u64>,
    device_syncs: u64,
    /// [`StreamEvents::synchronize`] calls on one event.
    event_syncs: u64,
}

impl SimEvents {
    /// Events that complete when [`SimEvents::finish`] finishes their stream.
    pub fn new() -> Arc<Self> {
        Arc::new(SimEvents::default())
    }

    /// Events that are complete when recorded: memory with no asynchronous work behind it.
    pub fn immediate() -> Arc<Self> {
        let s = SimEvents::default();
        s.state.lock().immediate = true;
        Arc::new(s)
    }

    /// The work recorded on `stream` so far has completed.
    pub fn finish(&self, stream: u64) {
        let mut st = self.state.lock();
        let e = st.streams.entry(stream).or_default();
        e.1 = e.0;
    }

    /// `stream`'s work has completed and no more comes (a request's stream its host is done
    /// with): events recorded on it from now on are complete at once, as on an idle GPU stream.
    pub fn finish_for_good(&self, stream: u64) {
        let mut st = self.state.lock();
        st.idle.insert(stream);
        let e = st.streams.entry(stream).or_default();
        e.1 = e.0;
    }

    /// Events handed out and not yet back in the pool.
    pub fn outstanding(&self) -> usize {
        self.state.lock().events.iter().filter(|e| e.2).count()
    }

    /// Events ever created (the pool's size).
    pub fn created(&self) -> usize {
        self.state.lock().events.len()
    }

    /// Events recorded on `stream` so far (records and re-records).
    pub fn records(&self, stream: u64) -> u64 {
        self.state.lock().streams.get(&stream).map_or(0, |e| e.0)
    }

    /// How many of the events recorded on `stream` so far are complete (in recording order:
    /// a finish, a synchronize on one, or a device-wide wait completes them).
    pub fn completed(&self, stream: u64) -> u64 {
        self.state.lock().streams.get(&stream).map_or(0, |e| e.1)
    }

    /// Every `stream_wait` so far, as (waiting stream, the stream the event was recorded on).
    pub fn waits(&self) -> Vec<(u64, u64)> {
        self.state.lock().waits.clone()
    }

    /// How many times the whole device was synchronized.
    pub fn device_syncs(&self) -> u64 {
        self.state.lock().device_syncs
    }

    /// Handle `stream` now names the stream `identity` (a destroyed stream's value reused).
    pub fn set_identity(&self, stream: u64, identity: u64) {
        self.state.lock().identities.insert(stream, identity);
    }

    /// Records on `stream` fail from now on, as on a stream the host destroyed.
    pub fn fail_records_on(&self, stream: u64) {
        self.state.lock().failing.push(stream);
    }

    fn event(st: &SimState, event: u64) -> Result<(u64, u64)> {
        match event.checked_sub(1).and_then(|i| st.events.get(i as usize)) {
            Some(&(stream, pos, true)) => Ok((stream, pos)),
            _ => Err(ArenaError::invalid_argument(format!(
                "{event} is not a live simulated event"
            ))),
        }
    }

    fn place(st: &mut SimState, stream: u64) -> Result<u64> {
        if st.failing.contains(&stream) {
            return Err(ArenaError::Cuda {
                name: "CUDA_ERROR_INVALID_HANDLE".into(),
                message: "cuEventRecord failed (simulated)".into(),
            });
        }
        let immediate = st.immediate || st.idle.contains(&stream);
        let e = st.streams.entry(stream).or_default();
        e.0 += 1;
        if immediate {
            e.1 = e.0;
        }
        Ok(e.0)
    }
}

impl StreamEvents for SimEvents {
    fn record(&self, stream: u64) -> Result<u64> {
        let mut st = self.state.lock();
        let pos = Self::place(&mut st, stream)?;
        let handle = match st.free.pop() {
            Some(h) => h,
            None => {
                st.events.push((0, 0, false));
                st.events.len() as u64
            }
        };
        st.events[handle as usize - 1] = (stream, pos, true);
        Ok(handle)
    }

    fn rerecord(&self, event: u64, stream: u64) -> Result<()> {
        let mut st = self.state.lock();
        Self::event(&st, event)?;
        let pos = Self::place(&mut st, stream)?;
        st.events[event as usize - 1] = (stream, pos, true);
        Ok(())
    }

    fn is_done(&self, event: u64) -> Result<bool> {
        let st = self.state.lock();
        let (stream, pos) = Self::event(&st, event)?;
        Ok(st.streams.get(&stream).is_some_and(|e| e.1 >= pos))
    }

    fn synchronize(&self, event: u64) -> Result<()> {
        let mut st = self.state.lock();
        let (stream, pos) = Self::event(&st, event)?;
        st.event_syncs += 1;
        let e = st.streams.entry(stream).or_default();
        e.1 = e.1.max(pos);
        Ok(())
    }

    fn stream_wait(&self, stream: u64, event: u64) -> Result<()> {
        let mut st = self.state.lock();
        let (from, _) = Self::event(&st, event)?;
        st.waits.push((stream, from));
        Ok(())
    }

    fn release(&self, event: u64) {
        let mut st = self.state.lock();
        if let Some(e) = event
            .checked_sub(1)
            .and_then(|i| st.events.get_mut(i as usize))
        {
            if e.2 {
                e.2 = false;
                st.free.push(event);
            }
        }
    }

    fn synchronize_device(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.device_syncs += 1;
        for e in st.streams.values_mut() {
            e.1 = e.0;
        }
        Ok(())
    }

    fn stream_identity(&self, stream: u64) -> Option<u64> {
        self.state.lock().identities.get(&stream).copied()
    }

    fn blocking_waits(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.device_syncs, st.event_syncs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(sim: &Arc<SimEvents>, native: u64) -> FreeEvents {
        FreeEvents::new(sim.clone(), native)
    }

    #[test]
    fn a_mark_is_complete_only_once_an_event_after_it_has_completed() {
        let sim = SimEvents::new();
        let f = tracker(&sim, 7);
        let m = f.mark();
        assert!(!f.is_complete(m));
        assert!(!f.advance(), "recorded, not yet complete");
        assert!(!f.is_complete(m));
        sim.finish(7);
        assert!(f.advance());
        assert!(f.is_complete(m));
        assert!(!f.has_incomplete());
    }

    #[test]
    fn finishing_own_work_that_is_done_when_its_event_is_recorded_reports_it_done() {
        let sim = SimEvents::immediate();
        let f = tracker(&sim, 7);
        let m = f.mark();
        assert!(
            f.finish_own(),
            "the event recorded behind the free completed at once"
        );
        assert!(f.is_complete(m));
        assert!(!f.has_incomplete());
    }

    #[test]
    fn a_stream_that_stopped_freeing_gets_an_event_at_the_second_look() {
        let sim = SimEvents::immediate();
        let f = tracker(&sim, 7);
        let m = f.mark();
        assert!(!f.advance_if_stalled(false), "the first look only polls");
        assert!(!f.is_complete(m));
        assert!(
            f.advance_if_stalled(false),
            "no free since: covered, and done"
        );
        assert!(f.is_complete(m));
    }

    #[test]
    fn a_stream_still_freeing_is_only_polled() {
        let sim = SimEvents::immediate();
        let f = tracker(&sim, 7);
        for _ in 0..3 {
            f.mark();
            assert!(
                !f.advance_if_stalled(false),
                "a free came since the last look"
            );
        }
        assert_eq!(f.pending(), 0);
        assert!(f.has_incomplete());
    }

    #[test]
    fn a_live_threads_latest_stream_is_covered_only_when_asked_to_be() {
        let sim = SimEvents::immediate();
        let f = tracker(&sim, 7);
        f.threads_on().fetch_add(1, Ordering::AcqRel);
        let m = f.mark();
        assert!(!f.advance_if_stalled(false));
        assert!(
            !f.advance_if_stalled(false),
            "its thread may only be paused"
        );
        assert!(!f.is_complete(m));
        assert!(
            !f.advance_if_stalled(true),
            "past the ceiling, the first look polls"
        );
        assert!(f.advance_if_stalled(true), "and the second covers it too");
        assert!(f.is_complete(m));
    }

    #[test]
    fn a_stream_the_host_may_destroy_is_never_recorded_on_by_another() {
        let sim = SimEvents::immediate();
        let f = tracker(&sim, 7);
        f.set_host_may_destroy();
        f.mark();
        f.advance_if_stalled(false);
        assert!(!f.advance_if_stalled(false));
        assert!(f.has_incomplete(), "only its own calls record");
    }

    #[test]
    fn a_mark_taken_after_the_record_waits_for_a_later_event() {
        let sim = SimEvents::new();
        let f = tracker(&sim, 7);
        let first = f.mark();
        f.advance();
        let second = f.mark();
        sim.finish(7);
        f.advance();
        assert!(f.is_complete(first));
        assert!(!f.is_complete(second), "its free came after the event");
        sim.finish(7);
        f.advance();
        assert!(f.is_complete(second));
    }

    #[test]
    fn a_stream_never_keeps_more_than_the_bound_of_events() {
        let sim = SimEvents::new();
        let f = tracker(&sim, 7);
        for _ in 0..1000 {
            f.mark();
            f.advance();
        }
        assert_eq!(f.pending(), MAX_PENDING_EVENTS);
        assert_eq!(sim.outstanding(), MAX_PENDING_EVENTS);
        let last = f.mark();
        f.advance();
        sim.finish(7);
        f.advance();
        assert!(
            f.is_complete(last),
            "the re-recorded event covers the newest mark"
        );
        assert_eq!(sim.outstanding(), 0, "every event went back to the pool");
        assert!(sim.created() <= MAX_PENDING_EVENTS);
    }

    #[test]
    fn finish_blocks_until_every_mark_is_complete() {
        let sim = SimEvents::new();
        let f = tracker(&sim, 7);
        let m = f.mark();
        assert!(f.finish());
        assert!(f.is_complete(m));
        assert_eq!(sim.outstanding(), 0);
    }

    #[test]
    fn a_failed_record_covers_nothing() {
        let sim = SimEvents::new();
        sim.fail_records_on(7);
        let f = tracker(&sim, 7);
        let m = f.mark();
        assert!(!f.advance());
        assert!(!f.finish());
        assert!(!f.is_complete(m));
    }

    #[test]
    fn dropping_the_tracker_hands_its_events_back() {
        let sim = SimEvents::new();
        let f = tracker(&sim, 7);
        f.mark();
        f.advance();
        assert_eq!(sim.outstanding(), 1);
        drop(f);
        assert_eq!(sim.outstanding(), 0);
    }
}
