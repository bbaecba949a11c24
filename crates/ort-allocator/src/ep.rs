//! The allocator side of an ONNX Runtime plugin execution provider, one call per step of the
//! CUDA plugin EP's arena design:
//!
//! - `OrtEpFactory::CreateAllocator` → [`EpAllocators::create_allocator`]: per device ordinal
//!   a shared device arena, pinned arena or memory pool (the factory's user count goes up),
//!   options from ORT's key/value pairs (`arena.*`, or `ep_factory.<name>.arena.*` as the
//!   environment passes them), a warning when they differ from the shared arena's, and a new
//!   plain allocator for the read-only (initializer) memory info;
//! - `OrtEpFactory::ReleaseAllocator` → [`EpAllocators::release_allocator`]: one user fewer,
//!   all memory back at the last;
//! - `OrtSyncStreamImpl::OnSessionRunEnd` → [`EpAllocators::run_end`]: the stream's chunks
//!   are reset so every stream may take them.
//!
//! Sync ids: ORT's plugin arena asks ORT (`OrtEpApi`) for a stream's sync id and for the last
//! one another stream waited on, so a chunk freed on one stream can move to another stream
//! within a run once that stream waited on the first. ort-sys does not describe `OrtEpApi`, so
//! these views do not read ORT's notifications: a chunk freed on a stream is reused on that
//! stream at once and by other streams after that stream's run ends (`run_end`). That is ORT's
//! rule for streams that never waited on each other, and never reuses memory earlier than ORT
//! would.

use crate::host::HostApi;
use crate::view::{OrtAllocatorView, ViewOptions};
use crate::AllocatorUser;
use cuda_arena_core::{env_arena_options, ArenaConfig, ArenaError, Factory, Result};
use ort_sys::{OrtAllocator, OrtKeyValuePairs, OrtLogger, OrtLoggingLevel, OrtMemoryInfo};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Arc;

/// What [`EpAllocators::create_allocator`] made.
#[derive(Debug)]
pub struct EpAllocator {
    /// For ORT's `OrtAllocator** out`; valid until [`EpAllocators::release_allocator`].
    pub allocator: NonNull<OrtAllocator>,
    /// Warnings (differing options, the pool's fallback to the arena), also logged.
    pub warnings: Vec<String>,
}

/// A view handed to ORT, owned here: a raw pointer from `Box::into_raw`, so moving it around
/// the map never invalidates the `OrtAllocator*` ORT holds.
struct OwnedView(NonNull<OrtAllocatorView>);

// SAFETY: the view is `Send + Sync`; this is its owner.
unsafe impl Send for OwnedView {}

impl OwnedView {
    fn new(view: Box<OrtAllocatorView>) -> Self {
        OwnedView(NonNull::from(Box::leak(view)))
    }

    fn get(&self) -> &OrtAllocatorView {
        // SAFETY: owned and alive until `into_box` or drop.
        unsafe { self.0.as_ref() }
    }

    fn into_box(self) -> Box<OrtAllocatorView> {
        let p = self.0;
        std::mem::forget(self);
        // SAFETY: from `Box::leak` in `new`, taken back once.
        unsafe { Box::from_raw(p.as_ptr()) }
    }
}

impl Drop for OwnedView {
    fn drop(&mut self) {
        // SAFETY: from `Box::leak` in `new`, freed once.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// The allocators one plugin EP factory hands to ORT; see the module docs.
pub struct EpAllocators {
    factory: Arc<Factory>,
    host: HostApi,
    logger: *const OrtLogger,
    on_error: Option<fn(&ArenaError)>,
    /// The views handed out and not released, by address: a release of anything else is
    /// refused without touching it.
    views: Mutex<BTreeMap<usize, OwnedView>>,
}

// SAFETY: the logger is the host's, which ORT lets any thread use; the rest is `Sync`.
unsafe impl Send for EpAllocators {}
// SAFETY: as above.
unsafe impl Sync for EpAllocators {}

impl std::fmt::Debug for EpAllocators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpAllocators")
            .field("factory", &self.factory.name())
            .field("version", &self.host.version())
            .field("allocators", &self.views.lock().len())
            .finish_non_exhaustive()
    }
}

impl EpAllocators {
    /// The allocators of `factory` (whose name is the EP factory's: environment options are
    /// `ep_factory.<name>.arena.*`) for `host`, logging through `logger` (NULL: no logging);
    /// `on_error` as in [`ViewOptions`].
    ///
    /// # Safety
    /// `logger` is NULL or a logger of this host that outlives this value and its allocators.
    pub unsafe fn new(
        factory: Arc<Factory>,
        host: HostApi,
        logger: *const OrtLogger,
        on_error: Option<fn(&ArenaError)>,
    ) -> Self {
        EpAllocators {
            factory,
            host,
            logger,
            on_error,
            views: Mutex::new(BTreeMap::new()),
        }
    }

    /// The factory.
    pub fn factory(&self) -> &Arc<Factory> {
        &self.factory
    }

    /// The host.
    pub fn host(&self) -> HostApi {
        self.host
    }

    /// The cuda-arena options in ORT's `options`: bare `arena.*` keys, then the environment's
    /// `ep_factory.<name>.arena.*` ones (prefix stripped), which win; other keys are ignored.
    /// `None` when there are none (the shared arena's options are then not compared).
    ///
    /// # Safety
    /// `options` is NULL or live key/value pairs of this host.
    pub unsafe fn read_options(
        &self,
        options: *const OrtKeyValuePairs,
    ) -> Result<Option<ArenaConfig>> {
        // SAFETY: per the contract.
        let pairs = unsafe { self.host.read_pairs(options) };
        let mut arena: Vec<(String, String)> = pairs
            .iter()
            .filter(|(k, _)| k.starts_with("arena."))
            .cloned()
            .collect();
        arena.extend(env_arena_options(
            pairs.iter().cloned(),
            self.factory.name(),
        ));
        if arena.is_empty() {
            return Ok(None);
        }
        ArenaConfig::from_pairs(arena).map(Some)
    }

    /// `CreateAllocator`: the allocator for ORT's `memory_info` (`Cuda`, `CudaPinned` or
    /// `Cpu`, its device id; `OrtReadOnlyAllocator` for a plain, unshared one) with `options`;
    /// with `replace`, a shared allocator that exists is left to its holders and a new one is
    /// made. `Info` answers ORT's `memory_info` itself. A failure changes nothing.
    ///
    /// # Safety
    /// `memory_info` is a live memory info of this host that outlives the allocator (ORT's
    /// own, from the `OrtEpDevice`, does); `options` is NULL or live key/value pairs.
    pub unsafe fn create_allocator(
        &self,
        memory_info: *const OrtMemoryInfo,
        options: *const OrtKeyValuePairs,
        replace: bool,
    ) -> Result<EpAllocator> {
        // SAFETY: per the contract.
        let memory = unsafe { self.host.read_memory_info(memory_info) }?;
        // SAFETY: per the contract.
        let config = unsafe { self.read_options(options) }?;
        let created = self
            .factory
            .create_shared_allocator(memory, config.as_ref(), replace)?;
        let warnings = created.warnings.clone();
        let user = AllocatorUser::from_factory(self.factory.clone(), created);
        let options = ViewOptions {
            logger: self.logger,
            memory_info,
            on_error: self.on_error,
        };
        // SAFETY: the logger and memory info outlive the view per the contracts above. On
        // failure the user is dropped, which releases it: nothing changed.
        let view = unsafe { OrtAllocatorView::new(user, self.host, options) }?;
        for w in &warnings {
            // SAFETY: NULL or a live logger of this host.
            unsafe {
                self.host.log(
                    self.logger,
                    OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
                    &format!("cuda-arena: {w}"),
                )
            };
        }
        let view = OwnedView::new(view);
        let p = view.get().as_ptr();
        self.views.lock().insert(p.addr(), view);
        Ok(EpAllocator {
            allocator: NonNull::new(p).ok_or_else(|| ArenaError::InvalidArgument {
                reason: "a view has no address".into(),
            })?,
            warnings,
        })
    }

    /// `ReleaseAllocator`: one user fewer (all memory back at the last) and the view freed;
    /// ORT calls nothing on it after this. A value that is not a live allocator of these is
    /// `ERR_ARENA_INVALID_ARGUMENT` and is not touched.
    pub fn release_allocator(&self, allocator: *const OrtAllocator) -> Result<()> {
        let view = self.views.lock().remove(&allocator.addr());
        match view {
            // Dropped outside the lock: the last release returns memory to the backend.
            Some(view) => {
                drop(view);
                Ok(())
            }
            None => Err(ArenaError::InvalidArgument {
                reason: "the OrtAllocator is not a live allocator of this EP factory (released \
                         before, or another's)"
                    .into(),
            }),
        }
    }

    /// `OnSessionRunEnd`: the run on the stream with native handle `handle` (what the EP's
    /// `OrtSyncStreamImpl::GetHandle` returns: its `CUstream`) is over, so the allocators of
    /// device `device` forget it; its chunks lose their tag and merge, and any stream may take
    /// them (chunks still in use lose it when freed). An unknown handle is a no-op.
    pub fn run_end(&self, device: u32, handle: u64) {
        let streams: Vec<_> = self
            .views
            .lock()
            .values()
            .map(OwnedView::get)
            .filter(|v| v.memory().device_id == device)
            .filter_map(|v| v.streams())
            .collect();
        // Outside the lock: dropping a forgotten stream resets chunks in its allocators.
        for s in streams {
            drop(s.forget(handle));
        }
    }

    /// How many allocators are handed out and not released.
    pub fn live_allocators(&self) -> usize {
        self.views.lock().len()
    }
}

impl Drop for EpAllocators {
    fn drop(&mut self) {
        // Allocators ORT has not released let their users go now; their structs are kept
        // until exit, so a late call from ORT fails safely instead of reading freed memory.
        let views = std::mem::take(&mut *self.views.lock());
        for (_, view) in views {
            view.get().release();
            crate::keep_until_exit(view.into_box());
        }
    }
}
