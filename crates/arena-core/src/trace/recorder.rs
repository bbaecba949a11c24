//! Trace recording: an allocator's traffic written in the trace format of `cuda-arena replay`,
//! so a live session can be replayed, compared across configs and drawn.
//!
//! [`RecordingAllocator`] wraps any allocator; the factory hands out every allocator wrapped,
//! so all users of a shared allocator (JS, C, ONNX Runtime's view) go through it. The wrapper
//! is generic over the allocator inside, so the factory's arenas are called directly, not
//! through a second virtual call: while no recording is on, a call costs one relaxed atomic
//! load more than the allocator's own. While one is on, each call runs under the recording's lock, so the trace has the
//! order the allocator saw, and a [`Recorder`] turns it into trace operations:
//!
//! - a successful `alloc`, `alloc_on_stream` or `reserve` becomes `alloc` / `reserve` with a
//!   new id (ids count up from 1; a map from each live address to its id and size is all the
//!   recorder keeps per allocation, so it is bounded by the live allocations);
//! - a successful `free` of an address allocated during the recording becomes `free`; a free
//!   of an allocation made before the recording started is not in the trace (its allocation is
//!   not either) and is counted as untracked;
//! - a failed call changed nothing and is not in the trace; failed allocations and reserves
//!   are counted. Allocations of 0 bytes return nothing and are not in the trace;
//! - each distinct stream gets a trace stream number, 1 up; the number of a stream that is
//!   released (its last handle dropped) goes back to be reused, lowest first, so a trace
//!   never has more than [`MAX_TRACE_STREAMS`] numbers (what a replay takes). More streams
//!   than that alive and in use at once stops the recording with a reason.
//!
//! Lines go through a fixed buffer ([`RECORD_BUFFER_BYTES`]) to a writer thread, with one
//! more buffer being written: when both are full (the disk is slower than the traffic), the
//! allocating thread waits for the writer. Memory stays bounded whatever the traffic. A write
//! error (a full disk) stops the recording: the file is cut back to the last whole buffer
//! written, the reason is kept for [`RecordingAllocator::stop_recording`], and allocations go
//! on unaffected.

use crate::allocators::allocator::{retired, Allocator};
use crate::streams::stream::{Stream, StreamId, StreamUser};
use crate::trace::trace_format::write_op;
use crate::trace::{TraceOp, MAX_TRACE_STREAMS};
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::MemoryInfo;
use crate::types::memory_log::{ChunkLog, MemoryLog};
use crate::types::stats::AllocatorStats;
use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The size of each of the recorder's two buffers: about 20,000 trace lines.
pub const RECORD_BUFFER_BYTES: usize = 1 << 20;

/// The longest trace line the recorder writes, `\n` included: an alloc with 20-digit id and
/// size and a 10-digit stream is 89 bytes. A buffer is handed to the writer once fewer than
/// this many bytes are left in it, so it never grows.
pub const MAX_RECORDED_LINE_BYTES: usize = 96;

pub use crate::types::recording_summary::RecordingSummary;

/// One batch of whole lines for the writer thread.
struct Batch {
    bytes: Vec<u8>,
    ops: u64,
}

/// What the writer thread wrote.
#[derive(Default)]
struct Written {
    ops: u64,
    bytes: u64,
    error: Option<String>,
}

/// Two buffers and a writer thread: lines go into `buf`; a full one goes to the thread, and
/// the thread's emptied one comes back through `empty`. With only two buffers, a producer
/// that outruns the writer waits for it.
struct Spool {
    buf: Vec<u8>,
    ops_in_buf: u64,
    /// Hand off once `buf` has more than this many bytes.
    hand_off_at: usize,
    full: Option<SyncSender<Batch>>,
    empty: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<Written>>,
    /// Set by the writer thread on a write error.
    failed: Arc<AtomicBool>,
    /// The process's fork count when the writer thread started (`forks.rs`): in a child
    /// forked since, that thread does not exist.
    forks: u64,
}

impl Spool {
    fn new(
        label: &str,
        sink: Box<dyn Write + Send>,
        file: Option<std::fs::File>,
        buffer_bytes: usize,
    ) -> Result<Spool> {
        let capacity = buffer_bytes.max(2 * MAX_RECORDED_LINE_BYTES);
        let (full, batches) = sync_channel::<Batch>(1);
        let (give_back, empty) = sync_channel::<Vec<u8>>(2);
        // The second buffer starts out empty, waiting to be swapped in.
        let _ = give_back.send(Vec::with_capacity(capacity));
        let failed = Arc::new(AtomicBool::new(false));
        let thread_failed = failed.clone();
        let thread_label = label.to_string();
        let forks = super::forks::count();
        let thread = std::thread::Builder::new()
            .name("cuda-arena-recorder".into())
            .spawn(move || {
                keep_sigpipe_off_this_thread();
                write_batches(
                    &thread_label,
                    sink,
                    file,
                    batches,
                    give_back,
                    &thread_failed,
                )
            })
            .map_err(|e| {
                ArenaError::invalid_argument(format!(
                    "cannot record to {label}: cannot start the writer thread: {e}"
                ))
            })?;
        Ok(Spool {
            buf: Vec::with_capacity(capacity),
            ops_in_buf: 0,
            hand_off_at: capacity - MAX_RECORDED_LINE_BYTES,
            full: Some(full),
            empty,
            thread: Some(thread),
            failed,
            forks,
        })
    }

    /// Whether this is a child forked since the recording started, whose copy of it has no
    /// writer: it stops, and never writes to the parent's file.
    fn forked(&self) -> bool {
        super::forks::forked_since(self.forks)
    }

    fn push(&mut self, op: &TraceOp) {
        if self.forked() {
            // Before anything waits on the writer thread that is not here.
            return;
        }
        // Writing to a `Vec` cannot fail.
        let _ = write_op(op, &mut self.buf);
        self.ops_in_buf += 1;
        if self.buf.len() > self.hand_off_at {
            self.hand_off();
        }
    }

    /// Sends the current buffer to the writer, waiting for the other one to come back.
    fn hand_off(&mut self) {
        let Some(full) = &self.full else { return };
        // Waits while the writer is still writing the previous buffer: the bounded choice.
        let Ok(spare) = self.empty.recv() else {
            self.failed.store(true, Ordering::Relaxed);
            return;
        };
        let bytes = std::mem::replace(&mut self.buf, spare);
        let ops = std::mem::take(&mut self.ops_in_buf);
        if full.send(Batch { bytes, ops }).is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.forked()
    }

    /// Writes what is buffered, waits for the writer and says what it wrote.
    fn finish(mut self) -> Written {
        if self.forked() {
            // The writer thread is the parent's: neither joined nor detached here (its handle
            // names no thread of this process), and nothing is written.
            std::mem::forget(self.thread.take());
            return Written {
                error: Some(format!(
                    "this process (pid {}) was forked from the one recording after the \
                     recording started: the recording and its file stay with that process",
                    std::process::id()
                )),
                ..Written::default()
            };
        }
        if !self.buf.is_empty() {
            self.hand_off();
        }
        self.full = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(written)) => written,
            _ => Written {
                error: Some("the recording's writer thread stopped".into()),
                ..Written::default()
            },
        }
    }
}

/// A write to a pipe or socket whose reader has gone raises `SIGPIPE`, whose default action
/// ends the process: a C host recording to a pipe (`| head`, a FIFO whose reader exited) was
/// killed by this thread's write. Blocked here, the signal stays pending on this thread alone
/// (and goes with it), and the write fails with `EPIPE`, which stops the recording with the
/// reason as any write error does. Node and Python ignore `SIGPIPE` already.
fn keep_sigpipe_off_this_thread() {
    #[cfg(unix)]
    // SAFETY: `set` is a local signal set, initialised by sigemptyset before use; the call
    // changes this thread's signal mask only.
    #[allow(unsafe_code)]
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// The writer thread: writes each batch whole; after an error, cuts the file back to the
/// last batch written whole and drops every later batch (so the producer never waits on a
/// dead writer).
fn write_batches(
    label: &str,
    mut sink: Box<dyn Write + Send>,
    file: Option<std::fs::File>,
    batches: Receiver<Batch>,
    give_back: SyncSender<Vec<u8>>,
    failed: &AtomicBool,
) -> Written {
    let mut done = Written::default();
    let fail = |done: &mut Written, e: std::io::Error| {
        done.error = Some(format!("cannot write {label}: {e}"));
        failed.store(true, Ordering::Relaxed);
        if let Some(f) = &file {
            // Best effort: a half-written line would make a strict replay refuse the file.
            let _ = f.set_len(done.bytes);
        }
    };
    for Batch { mut bytes, ops } in batches {
        if done.error.is_none() {
            match sink.write_all(&bytes) {
                Ok(()) => {
                    done.ops += ops;
                    done.bytes += bytes.len() as u64;
                }
                Err(e) => fail(&mut done, e),
            }
        }
        bytes.clear();
        // The producer may have finished; then nothing waits for this buffer.
        let _ = give_back.send(bytes);
    }
    if done.error.is_none() {
        if let Err(e) = sink.flush() {
            fail(&mut done, e);
        }
    }
    done
}

/// Trace stream numbers by stream: 1 up, a released stream's number reused (lowest first).
#[derive(Default)]
struct StreamNumbers {
    by_stream: HashMap<StreamId, u32>,
    released: BinaryHeap<Reverse<u32>>,
    /// Numbers handed out so far (the highest one).
    used: u32,
}

impl StreamNumbers {
    /// The number of stream `id`, and whether it is new to this recording; `None` when every
    /// number belongs to a stream still alive.
    fn number(&mut self, id: StreamId) -> Option<(u32, bool)> {
        if let Some(&n) = self.by_stream.get(&id) {
            return Some((n, false));
        }
        let n = match self.released.pop() {
            Some(Reverse(n)) => n,
            None if (self.used as usize) < MAX_TRACE_STREAMS => {
                self.used += 1;
                self.used
            }
            None => return None,
        };
        self.by_stream.insert(id, n);
        Some((n, true))
    }

    fn release(&mut self, id: StreamId) {
        if let Some(n) = self.by_stream.remove(&id) {
            self.released.push(Reverse(n));
        }
    }
}

/// Turns allocator calls into trace operations and writes them (see the module's doc).
pub struct Recorder {
    path: String,
    spool: Spool,
    /// Live allocations of the recording: address → (trace id, requested bytes).
    live: HashMap<u64, (u64, u64)>,
    next_id: u64,
    streams: StreamNumbers,
    requested: u64,
    peak_requested: u64,
    failed_allocs: u64,
    untracked_frees: u64,
    /// Why the recording stopped itself (not a write error: those are the writer's).
    error: Option<String>,
    /// The recording's hold on its file; let go once everything is written.
    claim: Option<super::recording_files::FileClaim>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("live", &self.live.len())
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder writing to a new file at `path` (an existing file is replaced). A path that
    /// cannot be created is `ERR_ARENA_INVALID_ARGUMENT` naming it.
    pub fn create(path: &str) -> Result<Recorder> {
        Recorder::create_for(path, "another recording")
    }

    /// As [`Recorder::create`], for `who` (e.g. "the allocator for Cuda:0"): while it records,
    /// another recording of this process to the same file (under any spelling) is refused with
    /// `ERR_ARENA_INVALID_ARGUMENT` naming the path and `who`, and the file is left whole.
    pub fn create_for(path: &str, who: &str) -> Result<Recorder> {
        let (file, claim) = super::recording_files::open_for_recording(path, who)?;
        // A second handle, to cut the file back after a failed write.
        let cut = file.try_clone().ok();
        let mut rec = Recorder::start(path, Box::new(file), cut, RECORD_BUFFER_BYTES)?;
        rec.claim = Some(claim);
        Ok(rec)
    }

    /// A recorder writing to `sink` through two buffers of `buffer_bytes` (at least 192);
    /// `name` stands for the sink in the summary and in messages.
    pub fn with_sink(
        name: &str,
        sink: Box<dyn Write + Send>,
        buffer_bytes: usize,
    ) -> Result<Recorder> {
        Recorder::start(name, sink, None, buffer_bytes)
    }

    fn start(
        path: &str,
        sink: Box<dyn Write + Send>,
        file: Option<std::fs::File>,
        buffer_bytes: usize,
    ) -> Result<Recorder> {
        Ok(Recorder {
            path: path.to_string(),
            // The spool's label goes into messages: escaped and cut short, whatever the path.
            spool: Spool::new(
                &crate::types::error::escaped(path),
                sink,
                file,
                buffer_bytes,
            )?,
            live: HashMap::new(),
            next_id: 1,
            streams: StreamNumbers::default(),
            requested: 0,
            peak_requested: 0,
            failed_allocs: 0,
            untracked_frees: 0,
            error: None,
            claim: None,
        })
    }

    /// Records an allocation (`reserve`: a reserve) of `size` bytes at `addr` on trace stream
    /// `stream` (0: none).
    pub fn allocated(&mut self, addr: u64, size: u64, stream: u32, reserve: bool) {
        if let Some((old, old_size)) = self.live.remove(&addr) {
            // The allocator handed out a live address again: the old allocation is gone.
            self.requested = self.requested.saturating_sub(old_size);
            self.spool.push(&TraceOp::Free { id: old });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(addr, (id, size));
        self.requested = self.requested.saturating_add(size);
        self.peak_requested = self.peak_requested.max(self.requested);
        self.spool.push(&if reserve {
            TraceOp::Reserve { id, size }
        } else {
            TraceOp::Alloc { id, size, stream }
        });
    }

    /// Records a free of `addr`.
    pub fn freed(&mut self, addr: u64) {
        match self.live.remove(&addr) {
            Some((id, size)) => {
                self.requested = self.requested.saturating_sub(size);
                self.spool.push(&TraceOp::Free { id });
            }
            None => self.untracked_frees += 1,
        }
    }

    /// Counts an allocation or reserve that failed.
    pub fn failed_alloc(&mut self) {
        self.failed_allocs += 1;
    }

    /// The trace stream number of stream `id`, and whether this recording sees it for the
    /// first time. When every number belongs to a stream still alive, the recording stops
    /// itself ([`Recorder::stopped`]) and this is `None`.
    pub fn stream_number(&mut self, id: StreamId) -> Option<(u32, bool)> {
        let n = self.streams.number(id);
        if n.is_none() && self.error.is_none() {
            self.error = Some(format!(
                "more than {MAX_TRACE_STREAMS} streams in use at once (a trace replays at most \
                 {MAX_TRACE_STREAMS} distinct streams)"
            ));
        }
        n
    }

    /// Stream `id` was released: its number may be reused.
    pub fn stream_released(&mut self, id: StreamId) {
        self.streams.release(id);
    }

    /// Whether the recording stopped itself (a write error, too many streams); what was
    /// recorded until then is in the file.
    pub fn stopped(&self) -> bool {
        self.error.is_some() || self.spool.failed()
    }

    /// Writes what is buffered, closes the file, and says what the recording did.
    pub fn finish(self) -> RecordingSummary {
        let written = self.spool.finish();
        // Written and closed: the file may go to another recording now.
        drop(self.claim);
        RecordingSummary {
            path: self.path,
            ops: written.ops,
            bytes: written.bytes,
            failed_allocs: self.failed_allocs,
            untracked_frees: self.untracked_frees,
            live_at_stop: self.live.len() as u64,
            peak_requested: self.peak_requested,
            error: self.error.or(written.error),
        }
    }
}

/// Where a [`RecordingAllocator`] stands.
#[derive(Debug)]
enum State {
    Off,
    /// Boxed: the recorder is large, and made once per recording.
    On(Box<Recorder>),
    /// The recording stopped itself; its summary waits for `stop_recording`.
    Stopped(RecordingSummary),
    /// The allocator was retired: nothing records any more.
    Retired,
}

/// The recording of one [`RecordingAllocator`]; streams hold it (weakly) to say when they
/// are released.
#[derive(Debug)]
struct Slot {
    state: Mutex<State>,
}

impl StreamUser for Slot {
    fn stream_released(&self, id: StreamId) {
        if let State::On(rec) = &mut *self.state.lock() {
            rec.stream_released(id);
        }
    }

    /// A recording holds no memory: the allocator it wraps answers for its own.
    fn stream_holds_memory(&self, _: StreamId) -> bool {
        false
    }
}

/// An allocator whose traffic can be recorded in the trace format (see the module's doc):
/// every call goes to the allocator it wraps, `A` (any `Allocator`, `dyn Allocator` included).
#[derive(Debug)]
pub struct RecordingAllocator<A: Allocator + ?Sized = dyn Allocator> {
    inner: Arc<A>,
    /// Whether a recording is on: the only thing a call reads when none is.
    on: AtomicBool,
    slot: Arc<Slot>,
}

/// Which allocating call.
#[derive(Clone, Copy)]
enum Call<'a> {
    Alloc,
    OnStream(&'a Stream),
    Reserve,
}

impl<A: Allocator + ?Sized> RecordingAllocator<A> {
    /// `inner`, recordable.
    pub fn new(inner: Arc<A>) -> Self {
        RecordingAllocator {
            inner,
            on: AtomicBool::new(false),
            slot: Arc::new(Slot {
                state: Mutex::new(State::Off),
            }),
        }
    }

    /// The allocator underneath.
    pub fn inner(&self) -> &Arc<A> {
        &self.inner
    }

    /// Whether a recording is on.
    pub fn is_recording(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Starts recording to the recorder `make` gives, which is called only once no recording
    /// is on (so a second start cannot truncate the file being written). A recording already
    /// on is `ERR_ARENA_INVALID_ARGUMENT`; a retired allocator `ERR_ARENA_RELEASED`.
    pub fn start_recording_with(&self, make: impl FnOnce() -> Result<Recorder>) -> Result<()> {
        let mut st = self.slot.state.lock();
        match &*st {
            State::On(rec) => {
                return Err(ArenaError::invalid_argument(format!(
                    "the allocator for {} is already recording (to {}); stop that recording first",
                    self.inner.info(),
                    rec.path
                )))
            }
            State::Retired => return Err(retired()),
            State::Off | State::Stopped(_) => {}
        }
        *st = State::On(Box::new(make()?));
        self.on.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Stops the recording: waits until everything recorded is written, then says what the
    /// recording did (with the reason if it had stopped itself). None on is
    /// `ERR_ARENA_INVALID_ARGUMENT`; a retired allocator `ERR_ARENA_RELEASED`.
    pub fn stop_recording(&self) -> Result<RecordingSummary> {
        let taken = {
            let mut st = self.slot.state.lock();
            self.on.store(false, Ordering::Relaxed);
            match std::mem::replace(&mut *st, State::Off) {
                State::Retired => {
                    *st = State::Retired;
                    return Err(retired());
                }
                other => other,
            }
        };
        // Outside the lock: allocations go on (unrecorded) while the file is written.
        match taken {
            State::On(rec) => Ok(rec.finish()),
            State::Stopped(summary) => Ok(summary),
            State::Off | State::Retired => Err(ArenaError::invalid_argument(format!(
                "the allocator for {} is not recording",
                self.inner.info()
            ))),
        }
    }

    /// An allocating call, recorded.
    #[cold]
    #[inline(never)]
    fn recorded_alloc(&self, size: u64, call: Call<'_>) -> Result<Option<u64>> {
        let mut st = self.slot.state.lock();
        let State::On(rec) = &mut *st else {
            drop(st);
            return self.call(size, call);
        };
        let result = self.call(size, call);
        match result {
            Ok(Some(addr)) => {
                let stream = match call {
                    Call::OnStream(s) => match rec.stream_number(s.id()) {
                        Some((n, new)) => {
                            if new {
                                s.clock().register_user(&self.slot);
                            }
                            Some(n)
                        }
                        None => None,
                    },
                    Call::Alloc | Call::Reserve => Some(0),
                };
                if let Some(stream) = stream {
                    rec.allocated(addr, size, stream, matches!(call, Call::Reserve));
                }
            }
            Ok(None) => {}
            Err(_) => rec.failed_alloc(),
        }
        self.stop_if_stopped(&mut st);
        result
    }

    fn call(&self, size: u64, call: Call<'_>) -> Result<Option<u64>> {
        match call {
            Call::Alloc => self.inner.alloc(size),
            Call::OnStream(s) => self.inner.alloc_on_stream(size, s),
            Call::Reserve => self.inner.reserve(size),
        }
    }

    /// A free, recorded.
    #[cold]
    #[inline(never)]
    fn recorded_free(&self, addr: u64) -> Result<()> {
        let mut st = self.slot.state.lock();
        let State::On(rec) = &mut *st else {
            drop(st);
            return self.inner.free(addr);
        };
        let result = self.inner.free(addr);
        if result.is_ok() && addr != 0 {
            rec.freed(addr);
        }
        self.stop_if_stopped(&mut st);
        result
    }

    /// A recording that stopped itself is finished now (its writer is done), and keeps its
    /// summary for `stop_recording`.
    fn stop_if_stopped(&self, st: &mut State) {
        if matches!(st, State::On(rec) if rec.stopped()) {
            self.on.store(false, Ordering::Relaxed);
            if let State::On(rec) = std::mem::replace(st, State::Off) {
                *st = State::Stopped(rec.finish());
            }
        }
    }
}

impl<A: Allocator + ?Sized> Drop for RecordingAllocator<A> {
    fn drop(&mut self) {
        // The file gets what was recorded; nobody is left to read the summary.
        if let State::On(rec) = std::mem::replace(&mut *self.slot.state.lock(), State::Retired) {
            rec.finish();
        }
    }
}

impl<A: Allocator + ?Sized> Allocator for RecordingAllocator<A> {
    #[inline]
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        if self.on.load(Ordering::Relaxed) {
            return self.recorded_alloc(size, Call::Alloc);
        }
        self.inner.alloc(size)
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if self.on.load(Ordering::Relaxed) {
            return self.recorded_free(addr);
        }
        self.inner.free(addr)
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        if self.on.load(Ordering::Relaxed) {
            return self.recorded_alloc(size, Call::Reserve);
        }
        self.inner.reserve(size)
    }

    fn is_stream_aware(&self) -> bool {
        self.inner.is_stream_aware()
    }

    #[inline]
    fn alloc_on_stream(&self, size: u64, stream: &Stream) -> Result<Option<u64>> {
        if self.on.load(Ordering::Relaxed) {
            return self.recorded_alloc(size, Call::OnStream(stream));
        }
        self.inner.alloc_on_stream(size, stream)
    }

    fn reset_chunks_using_stream(&self, stream: &Stream) -> Result<()> {
        self.inner.reset_chunks_using_stream(stream)
    }

    fn info(&self) -> MemoryInfo {
        self.inner.info()
    }

    fn stats(&self) -> AllocatorStats {
        self.inner.stats()
    }

    fn can_shrink(&self) -> bool {
        self.inner.can_shrink()
    }

    fn chunks_from(&self, addr: u64) -> Option<Vec<ChunkLog>> {
        self.inner.chunks_from(addr)
    }

    fn layout_changes(&self) -> u64 {
        self.inner.layout_changes()
    }

    fn shrink(&self) -> Result<()> {
        self.inner.shrink()
    }

    fn memory_log(&self) -> MemoryLog {
        self.inner.memory_log()
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        self.inner.allocated_size(addr)
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        self.inner.requested_size(addr)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.inner.write(addr, data)
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.inner.read(addr, out)
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        self.inner.fill(addr, byte, len)
    }

    /// Finishes a recording that is on (the file gets everything recorded), then retires the
    /// allocator underneath; recording can no longer start.
    fn retire(&self) {
        let taken = {
            let mut st = self.slot.state.lock();
            self.on.store(false, Ordering::Relaxed);
            std::mem::replace(&mut *st, State::Retired)
        };
        if let State::On(rec) = taken {
            rec.finish();
        }
        self.inner.retire();
    }

    fn start_recording(&self, path: &str) -> Result<()> {
        let who = format!("the allocator for {}", self.inner.info());
        self.start_recording_with(|| Recorder::create_for(path, &who))
    }

    fn stop_recording(&self) -> Result<RecordingSummary> {
        RecordingAllocator::stop_recording(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_line_the_recorder_writes_fits_its_margin() {
        let mut line = Vec::new();
        let op = TraceOp::Alloc {
            id: u64::MAX,
            size: u64::MAX,
            stream: u32::MAX,
        };
        write_op(&op, &mut line).expect("writes to memory");
        assert!(line.len() <= MAX_RECORDED_LINE_BYTES, "{}", line.len());
    }

    /// A file that takes `room` more bytes, then fails (a disk filling up mid-buffer).
    struct FillingUp {
        file: std::fs::File,
        room: usize,
    }

    impl Write for FillingUp {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::other("no space left"));
            }
            let n = self.file.write(&buf[..buf.len().min(self.room)])?;
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.file.flush()
        }
    }

    #[test]
    fn a_file_that_fills_up_is_cut_back_to_the_whole_lines_written() {
        let path = std::env::temp_dir().join(format!(
            "cuda-arena-recorder-filling-{}.jsonl",
            std::process::id()
        ));
        let file = std::fs::File::create(&path).expect("temporary file");
        let cut = file.try_clone().ok();
        let sink = FillingUp { file, room: 1000 };
        let mut rec = Recorder::start("filling", Box::new(sink), cut, 256).expect("starts");
        for addr in 1..=200u64 {
            rec.allocated(addr * 256, 256, 0, false);
        }
        assert!(rec.stopped());
        let summary = rec.finish();
        let text = std::fs::read_to_string(&path).expect("the file");
        let _ = std::fs::remove_file(&path);
        assert!(summary.error.is_some_and(|e| e.contains("no space left")));
        assert_eq!(text.len() as u64, summary.bytes);
        let trace =
            crate::trace::trace_format::parse_trace(&text, false).expect("whole lines only");
        assert_eq!(trace.ops.len() as u64, summary.ops);
        assert!(summary.ops > 0);
    }

    #[test]
    fn stream_numbers_count_up_and_reuse_the_lowest_released_number() {
        let mut n = StreamNumbers::default();
        assert_eq!(n.number(100), Some((1, true)));
        assert_eq!(n.number(200), Some((2, true)));
        assert_eq!(n.number(300), Some((3, true)));
        assert_eq!(n.number(200), Some((2, false)));
        n.release(300);
        n.release(100);
        assert_eq!(n.number(400), Some((1, true)));
        assert_eq!(n.number(500), Some((3, true)));
        assert_eq!(n.number(600), Some((4, true)));
    }

    #[test]
    fn stream_numbers_run_out_only_when_every_number_belongs_to_a_live_stream() {
        let mut n = StreamNumbers::default();
        for id in 1..=MAX_TRACE_STREAMS as u64 {
            assert!(n.number(id).is_some());
        }
        assert_eq!(n.number(0xfff_ffff), None);
        n.release(7);
        assert_eq!(n.number(0xfff_ffff), Some((7, true)));
    }
}
