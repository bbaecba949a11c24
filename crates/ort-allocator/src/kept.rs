//! Views kept until process exit, for `RegisterAllocator`: ORT's sessions may call a
//! registered allocator after `UnregisterAllocator` and until they are released, which may be
//! never (onnxruntime-node does not release sessions still open at exit), and ORT says nothing
//! when the last of them is gone. So such a view is never freed: releasing it lets its
//! allocator user go (the memory comes back when it was the last user) and leaves a dead end
//! that later calls fail on safely. The cost is the struct (about 150 bytes) and its
//! `OrtMemoryInfo` per view ever kept.

use crate::view::OrtAllocatorView;
use cuda_arena_core::{ArenaError, Result};
use ort_sys::OrtAllocator;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Address → view. Views are leaked into it, so a `&'static` is sound; a `BTreeMap` so leak
/// checkers see every view as reachable.
static KEPT: Mutex<BTreeMap<usize, &'static OrtAllocatorView>> = Mutex::new(BTreeMap::new());

/// Keeps `view` until process exit; the `OrtAllocator*` to register.
pub fn keep_until_exit(view: Box<OrtAllocatorView>) -> *mut OrtAllocator {
    let view: &'static OrtAllocatorView = Box::leak(view);
    let p = view.as_ptr();
    KEPT.lock().insert(p.addr(), view);
    p
}

/// The kept view at `p`; `None` for any other value (never dereferenced).
pub fn kept(p: *const OrtAllocator) -> Option<&'static OrtAllocatorView> {
    KEPT.lock().get(&p.addr()).copied()
}

/// Releases the allocator user of the kept view at `p` (see the module docs). A view released
/// before is `ERR_ARENA_RELEASED`; a value that is no kept view `ERR_ARENA_INVALID_ARGUMENT`,
/// and neither touches anything.
pub fn release_kept(p: *const OrtAllocator) -> Result<()> {
    let view = kept(p).ok_or_else(|| ArenaError::InvalidArgument {
        reason: "the OrtAllocator is not a cuda-arena view (or is NULL)".into(),
    })?;
    if view.release() {
        Ok(())
    } else {
        Err(ArenaError::Released {
            what: "the OrtAllocator view (released before)".into(),
        })
    }
}
