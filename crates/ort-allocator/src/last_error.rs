//! The reason for the last failure of an `OrtAllocator` callback on this thread. ORT's `Alloc`
//! and `Reserve` can only return NULL and `Free` returns nothing, so the reason is logged
//! through the host's logger (when the view has one) and kept here for the host to ask.

use cuda_arena_core::ArenaError;
use std::cell::RefCell;

thread_local! {
    static LAST: RefCell<Option<ArenaError>> = const { RefCell::new(None) };
}

/// The last failure of a callback of any view on this thread (`None` if there was none
/// since [`clear_last_error`]). Successful callbacks leave it as it is.
pub fn last_error() -> Option<ArenaError> {
    LAST.with(|l| l.borrow().clone())
}

/// Forgets this thread's last failure.
pub fn clear_last_error() {
    LAST.with(|l| *l.borrow_mut() = None);
}

pub(crate) fn set_last_error(e: &ArenaError) {
    LAST.with(|l| *l.borrow_mut() = Some(e.clone()));
}
