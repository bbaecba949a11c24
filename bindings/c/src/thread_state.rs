//! What the C ABI keeps per thread, in one thread-local: the last call's error, the handles
//! the thread used last (`handles.rs`) and the stream handles it looked up last. In a shared
//! library every thread-local is reached through a call (`__tls_get_addr`); one variable for all
//! of it lets an allocation reach everything with one (issue 15).

use crate::handles::Handle;
use cuda_arena_core::RecentStreams;
use std::cell::RefCell;
use std::sync::Arc;

/// Handles a thread keeps, direct-mapped by slot index.
pub(crate) const RECENT_HANDLES: usize = 4;

/// A cached handle: the value C holds for it, and the handle.
pub(crate) type RecentHandle = Option<(usize, Arc<Handle>)>;

/// One thread's state; see the module docs.
#[derive(Debug)]
pub(crate) struct ThreadState {
    /// The code and message of this thread's last call (`CUDA_ARENA_OK` and "" after a
    /// success).
    pub(crate) last: RefCell<(i32, String)>,
    /// The warnings of this thread's last create call, joined by "; ".
    pub(crate) last_warning: RefCell<String>,
    /// Handles this thread used last, with the value C holds for each. Borrowed (shared) while
    /// a call runs on one; a nested call that misses does not update it.
    pub(crate) handles: RefCell<[RecentHandle; RECENT_HANDLES]>,
    /// Stream handles this thread looked up last.
    pub(crate) streams: RecentStreams,
}

impl ThreadState {
    /// A thread's state before its first call.
    pub(crate) const fn new() -> Self {
        ThreadState {
            last: RefCell::new((crate::codes::CUDA_ARENA_OK, String::new())),
            last_warning: RefCell::new(String::new()),
            handles: RefCell::new([const { None }; RECENT_HANDLES]),
            streams: RecentStreams::new(),
        }
    }
}

thread_local! {
    pub(crate) static THREAD: ThreadState = const { ThreadState::new() };
}
