//! Which copy of the process this is, as far as `fork(2)` goes: a forked child has the
//! parent's memory but only the thread that forked, so a recording's writer thread is not
//! there. A child that went on recording filled both buffers and then waited for that thread
//! forever (a pre-fork server whose workers are forked after a recording started hung), and
//! whatever it wrote would have interleaved with the parent's lines in the one open file.
//! A recording notes the count of forks when it starts; a child sees a higher count and
//! stops its copy of the recording without touching the file (see `recorder.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Forks this process has gone through, counted in each child as it starts.
static FORKS: AtomicU64 = AtomicU64::new(0);

static COUNTING: Once = Once::new();

/// Runs in the child of every `fork`, on its only thread, before `fork` returns there: one
/// atomic add, which is async-signal-safe.
extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The current count, counting forks from now on (the first call registers the handler).
pub(crate) fn count() -> u64 {
    COUNTING.call_once(|| {
        #[cfg(unix)]
        // SAFETY: registers a child handler that only adds to an atomic; glibc unregisters it
        // if this library is unloaded (the handler is keyed by the library's DSO handle).
        #[allow(unsafe_code)]
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    FORKS.load(Ordering::Relaxed)
}

/// Whether this process is a fork made after [`count`] returned `then`.
#[inline]
pub(crate) fn forked_since(then: u64) -> bool {
    FORKS.load(Ordering::Relaxed) != then
}
