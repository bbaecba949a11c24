//! [`OrtAllocatorView`]: ONNX Runtime's `OrtAllocator` struct over one user of a cuda-arena
//! allocator, binary-compatible with ORT's at the version agreed with the host.
//!
//! ORT holds an `OrtAllocator*` and calls through its function pointers, passing the pointer
//! back; the view is `repr(C)` with ORT's struct first, so that pointer is the view. Every
//! callback runs inside `catch_unwind` and never unwinds into ORT.
//!
//! Ownership: the view holds one user of the allocator ([`AllocatorUser`]), so the arena
//! lives while ORT may call the view. [`OrtAllocatorView::release`] lets that user go (the
//! factory retires the allocator at its last user: all memory back) and turns the view into a
//! dead end: every later `Alloc`/`Reserve`/`AllocOnStream` gives NULL, `Free` is ignored,
//! `GetStats`/`Shrink` return an error status, `Info` still answers. The struct itself stays
//! valid until the view is dropped, which also releases its `OrtMemoryInfo`; drop it only once
//! the host will never call it again (ORT's `ReleaseAllocator` for a plugin EP). For
//! `RegisterAllocator`, whose sessions may call the allocator until process exit, keep the
//! view until exit ([`crate::keep_until_exit`]).

use crate::calls::{Call, CallCounters, ViewCalls};
use crate::host::{HostApi, MIN_ORT_API_VERSION};
use crate::last_error::set_last_error;
use crate::user::AllocatorUser;
use cuda_arena_core::{Allocator, AllocatorStats, ArenaError, MemoryInfo, Result};
use ort_sys::{
    OrtAllocator, OrtErrorCode, OrtKeyValuePairs, OrtLogger, OrtLoggingLevel, OrtMemoryInfo,
    OrtStatusPtr, OrtSyncStream,
};
use parking_lot::RwLock;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{null_mut, NonNull};
use std::sync::Arc;

/// The first `OrtAllocator` version with `Shrink`; ORT treats an allocator as an arena (its
/// sessions' `ShrinkMemoryArenas` reaches it) only from this version on.
const SHRINK_VERSION: u32 = 25;

/// How a view is set up besides its allocator and host.
#[derive(Debug, Clone, Copy)]
pub struct ViewOptions {
    /// The host's logger for failures (`Logger_LogMessage`); NULL logs nothing.
    pub logger: *const OrtLogger,
    /// A memory info of the host for `Info` to answer (a plugin EP passes the one ORT gave its
    /// `CreateAllocator`); NULL makes one with the host's `CreateMemoryInfo`, released with
    /// the view.
    pub memory_info: *const OrtMemoryInfo,
    /// Called with every failure a callback cannot return (besides this crate's
    /// [`crate::last_error`]); the C library keeps its own last error this way.
    pub on_error: Option<fn(&ArenaError)>,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            logger: std::ptr::null(),
            memory_info: std::ptr::null(),
            on_error: None,
        }
    }
}

/// The `OrtMemoryInfo` `Info` answers.
#[derive(Debug)]
struct InfoPtr {
    ptr: NonNull<OrtMemoryInfo>,
    /// Made by the view (released with it) rather than the host's own.
    owned: bool,
}

/// ONNX Runtime's `OrtAllocator` over one user of a cuda-arena allocator; see the module docs.
#[repr(C)]
pub struct OrtAllocatorView {
    /// ORT's struct. First, so an `OrtAllocator*` ORT passes back is a pointer to the view.
    ort: OrtAllocator,
    host: HostApi,
    logger: *const OrtLogger,
    info: InfoPtr,
    /// What `info` says, in cuda-arena's terms (for messages).
    memory: MemoryInfo,
    /// The user; `None` once released. Callbacks read-lock it for the call, so a release
    /// waits for calls in flight and no call sees a user that is going away.
    user: RwLock<Option<AllocatorUser>>,
    on_error: Option<fn(&ArenaError)>,
    /// How often ORT called each function.
    calls: CallCounters,
}

// SAFETY: the raw pointers are the host's logger and memory info, which ORT lets any thread
// read; everything mutable is behind the lock.
unsafe impl Send for OrtAllocatorView {}
// SAFETY: as above.
unsafe impl Sync for OrtAllocatorView {}

impl std::fmt::Debug for OrtAllocatorView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtAllocatorView")
            .field("version", &self.ort.version)
            .field("memory", &self.memory)
            .field("released", &self.is_released())
            .finish_non_exhaustive()
    }
}

fn released() -> ArenaError {
    ArenaError::Released {
        what: "the OrtAllocator view".into(),
    }
}

impl OrtAllocatorView {
    /// A view of `user`'s allocator for `host`, with `version` = the version agreed in
    /// `host`. `Reserve` and `GetStats` are always set; `AllocOnStream` only for a
    /// stream-aware allocator (ORT then uses `Alloc`); `Shrink` from version 25 for an
    /// allocator that can shrink.
    ///
    /// # Safety
    /// `options.logger` and `options.memory_info` are NULL or live objects of this host that
    /// outlive the view.
    pub unsafe fn new(
        user: AllocatorUser,
        host: HostApi,
        options: ViewOptions,
    ) -> Result<Box<Self>> {
        debug_assert!(host.version() >= MIN_ORT_API_VERSION);
        let allocator = user.allocator().clone();
        let (info, memory) = match NonNull::new(options.memory_info.cast_mut()) {
            Some(ptr) => {
                // SAFETY: a live memory info of this host, per the contract.
                let memory = unsafe { host.read_memory_info(ptr.as_ptr()) }?;
                (InfoPtr { ptr, owned: false }, memory)
            }
            None => {
                let memory = allocator.info();
                let ptr = host.create_memory_info(&memory)?;
                (InfoPtr { ptr, owned: true }, memory)
            }
        };
        let version = host.version();
        let mut ort = OrtAllocator {
            version,
            Alloc: Some(alloc),
            Free: Some(free),
            Info: Some(info_of),
            Reserve: Some(reserve),
            GetStats: Some(get_stats),
            AllocOnStream: None,
            Shrink: None,
        };
        if allocator.is_stream_aware() {
            ort.AllocOnStream = Some(alloc_on_stream);
        }
        if version >= SHRINK_VERSION && allocator.can_shrink() {
            ort.Shrink = Some(shrink);
        }
        Ok(Box::new(OrtAllocatorView {
            ort,
            host,
            logger: options.logger,
            info,
            memory,
            user: RwLock::new(Some(user)),
            on_error: options.on_error,
            calls: CallCounters::default(),
        }))
    }

    /// The `OrtAllocator*` to hand to ORT; valid while this view is. Made from the whole view
    /// (not its first field), so the callbacks may reach every field through it.
    pub fn as_ptr(&self) -> *mut OrtAllocator {
        std::ptr::from_ref(self).cast::<OrtAllocator>().cast_mut()
    }

    /// The view behind an `OrtAllocator*` from [`OrtAllocatorView::as_ptr`].
    ///
    /// # Safety
    /// `p` is NULL or came from `as_ptr` of a view that lives for `'a`.
    pub unsafe fn from_ptr<'a>(p: *const OrtAllocator) -> Option<&'a Self> {
        // SAFETY: `ort` is the first field of a `repr(C)` view, so the pointers coincide; the
        // view lives for `'a` per the contract.
        unsafe { p.cast::<OrtAllocatorView>().as_ref() }
    }

    /// The version in the struct: what ORT reads fields up to.
    pub fn version(&self) -> u32 {
        self.ort.version
    }

    /// The `OrtMemoryInfo` `Info` answers.
    pub fn memory_info(&self) -> *const OrtMemoryInfo {
        self.info.ptr.as_ptr()
    }

    /// Which memory, in cuda-arena's terms.
    pub fn memory(&self) -> MemoryInfo {
        self.memory
    }

    /// The allocator, until the view is released.
    pub fn allocator(&self) -> Option<Arc<dyn Allocator>> {
        self.user.read().as_ref().map(|u| u.allocator().clone())
    }

    /// The host-owned streams of the allocator (by native handle), until the view is released.
    pub fn streams(&self) -> Option<Arc<cuda_arena_core::ForeignStreams>> {
        self.user.read().as_ref().map(|u| u.streams().clone())
    }

    /// The allocator's counters, as `GetStats` reports them.
    pub fn stats(&self) -> Result<AllocatorStats> {
        self.with_user(|u| Ok(u.allocator().stats()))
    }

    /// How often ORT called each of the view's functions so far.
    pub fn calls(&self) -> ViewCalls {
        self.calls.snapshot()
    }

    /// The native handles of the host-owned streams the allocator knows now (those this view's
    /// `AllocOnStream` calls brought, and any other user's), lowest first; empty once released.
    pub fn stream_handles(&self) -> Vec<u64> {
        self.streams().map(|s| s.handles()).unwrap_or_default()
    }

    /// Whether [`OrtAllocatorView::release`] was called.
    pub fn is_released(&self) -> bool {
        self.user.read().is_none()
    }

    /// Lets the allocator's user go: when it was the last, the factory retires the allocator
    /// and all its memory goes back. Every later call through the view fails as the module
    /// docs say, without touching the allocator. Returns whether this call released it.
    pub fn release(&self) -> bool {
        let user = self.user.write().take();
        let released_now = user.is_some();
        // Dropped outside the lock: the last release returns memory to the backend.
        drop(user);
        released_now
    }

    fn with_user<T>(&self, f: impl FnOnce(&AllocatorUser) -> Result<T>) -> Result<T> {
        match &*self.user.read() {
            Some(user) => f(user),
            None => Err(released()),
        }
    }

    /// Records a failure ORT cannot be told of: last error, the hook, the host's logger.
    fn failed(&self, call: &str, e: &ArenaError, level: OrtLoggingLevel, outcome: &str) {
        set_last_error(e);
        if let Some(hook) = self.on_error {
            hook(e);
        }
        let message = format!(
            "cuda-arena OrtAllocator::{call} for {} {outcome}: {}: {e}",
            self.memory,
            e.code()
        );
        // SAFETY: the logger is NULL or a live logger of this host (`new`'s contract).
        unsafe { self.host.log(self.logger, level, &message) };
    }

    /// An address for ORT: the allocation, or NULL for size 0 and on failure (recorded).
    fn address(&self, call: &str, r: Result<Option<u64>>) -> *mut c_void {
        match r {
            Ok(Some(addr)) => usize::try_from(addr).map_or(null_mut(), |a| {
                std::ptr::with_exposed_provenance_mut::<c_void>(a)
            }),
            Ok(None) => null_mut(),
            Err(e) => {
                self.calls.bump(Call::Failed);
                self.failed(
                    call,
                    &e,
                    OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR,
                    "returns NULL",
                );
                null_mut()
            }
        }
    }

    /// Runs a callback body with panics caught: a panic gives `on_panic` and is logged.
    fn guard<T>(&self, call: &str, on_panic: impl FnOnce() -> T, f: impl FnOnce() -> T) -> T {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
            let e = ArenaError::InvalidArgument {
                reason: "an internal error was caught before it reached ONNX Runtime".into(),
            };
            self.failed(call, &e, OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR, "failed");
            on_panic()
        })
    }

    fn alloc_on(&self, size: usize, stream: *mut OrtSyncStream) -> Result<Option<u64>> {
        self.with_user(|u| {
            // Asked only of a live view: a released one calls nothing of the host's. A stream
            // with no native handle is allocated as with no stream, as ORT does for NULL.
            let handle = if stream.is_null() {
                0
            } else {
                // SAFETY: ORT passes one of its live streams.
                unsafe { self.host.sync_stream_handle(stream) }
            };
            if handle == 0 {
                self.calls.bump(Call::AllocOnStreamWithoutStream);
                return u.allocator().alloc(size as u64);
            }
            if size == 0 {
                return Ok(None);
            }
            let (s, made) = u.streams().get_or_make(handle)?;
            if let Some(events) = s.free_events() {
                // ORT destroys a session's streams when the session is released (and frees some
                // of their chunks after that), telling no allocator: the driver hears of such a
                // stream only now, while ORT passes it, to cover its frees so far with an event.
                events.set_host_may_destroy();
                events.cover_in_use();
            }
            let r = u.allocator().alloc_on_stream(size as u64, &s);
            if r.is_err() && made {
                // A failed call changes nothing: the handle it made a stream for is forgotten.
                drop(u.streams().forget_made(handle, &s));
            } else if made {
                self.calls.bump(Call::NewStream);
            }
            r
        })
    }
}

impl Drop for OrtAllocatorView {
    fn drop(&mut self) {
        self.release();
        if self.info.owned {
            // SAFETY: made by `create_memory_info` of this host in `new`, released once here.
            unsafe { self.host.release_memory_info(self.info.ptr) };
        }
    }
}

/// The view ORT called.
///
/// # Safety
/// `this` is NULL or a pointer ORT got from [`OrtAllocatorView::as_ptr`] of a live view.
unsafe fn view<'a>(this: *const OrtAllocator) -> Option<&'a OrtAllocatorView> {
    // SAFETY: per the contract.
    unsafe { OrtAllocatorView::from_ptr(this) }
}

unsafe extern "system" fn alloc(this: *mut OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: ORT passes back the pointer it was given.
    let Some(v) = (unsafe { view(this) }) else {
        return null_mut();
    };
    v.calls.bump(Call::Alloc);
    v.guard("Alloc", null_mut, || {
        v.address("Alloc", v.with_user(|u| u.allocator().alloc(size as u64)))
    })
}

unsafe extern "system" fn reserve(this: *const OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: as in `alloc`.
    let Some(v) = (unsafe { view(this) }) else {
        return null_mut();
    };
    v.calls.bump(Call::Reserve);
    v.guard("Reserve", null_mut, || {
        v.address(
            "Reserve",
            v.with_user(|u| u.allocator().reserve(size as u64)),
        )
    })
}

unsafe extern "system" fn alloc_on_stream(
    this: *mut OrtAllocator,
    size: usize,
    stream: *mut OrtSyncStream,
) -> *mut c_void {
    // SAFETY: as in `alloc`.
    let Some(v) = (unsafe { view(this) }) else {
        return null_mut();
    };
    v.calls.bump(Call::AllocOnStream);
    v.guard("AllocOnStream", null_mut, || {
        v.address("AllocOnStream", v.alloc_on(size, stream))
    })
}

unsafe extern "system" fn free(this: *mut OrtAllocator, p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: as in `alloc`.
    let Some(v) = (unsafe { view(this) }) else {
        return;
    };
    v.calls.bump(Call::Free);
    v.guard(
        "Free",
        || (),
        || {
            if let Err(e) = v.with_user(|u| u.allocator().free(p.expose_provenance() as u64)) {
                v.calls.bump(Call::FreeIgnored);
                // ORT's Free returns nothing: an address this allocator does not hold is
                // logged and ignored (nothing changes).
                v.failed(
                    "Free",
                    &e,
                    OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
                    "ignores the address",
                );
            }
        },
    )
}

unsafe extern "system" fn info_of(this: *const OrtAllocator) -> *const OrtMemoryInfo {
    // SAFETY: as in `alloc`.
    match unsafe { view(this) } {
        Some(v) => v.memory_info(),
        None => std::ptr::null(),
    }
}

unsafe extern "system" fn get_stats(
    this: *const OrtAllocator,
    out: *mut *mut OrtKeyValuePairs,
) -> OrtStatusPtr {
    // SAFETY: as in `alloc`.
    let Some(v) = (unsafe { view(this) }) else {
        if !out.is_null() {
            // SAFETY: ORT gives a place for the result. Without a view there is no host to
            // make a status with: no pairs is what ORT reports for an allocator with no stats.
            unsafe { out.write(null_mut()) };
        }
        return OrtStatusPtr(null_mut());
    };
    let fail = |e: &ArenaError| OrtStatusPtr(v.host.error_status(e));
    let internal = || {
        OrtStatusPtr(v.host.status(
            OrtErrorCode::ORT_FAIL,
            "cuda-arena: an internal error was caught in GetStats",
        ))
    };
    v.calls.bump(Call::GetStats);
    v.guard("GetStats", internal, || {
        if out.is_null() {
            return fail(&ArenaError::InvalidArgument {
                reason: "GetStats got a NULL out".into(),
            });
        }
        match v.stats() {
            Ok(stats) => {
                let pairs = v.host.make_pairs(stats.to_pairs());
                if pairs.is_null() {
                    return OrtStatusPtr(v.host.status(
                        OrtErrorCode::ORT_FAIL,
                        "cuda-arena: CreateKeyValuePairs gave NULL",
                    ));
                }
                // SAFETY: non-NULL; ORT gives a place for the result.
                unsafe { out.write(pairs) };
                OrtStatusPtr(null_mut())
            }
            Err(e) => fail(&e),
        }
    })
}

unsafe extern "system" fn shrink(this: *mut OrtAllocator) -> OrtStatusPtr {
    // SAFETY: as in `alloc`.
    let Some(v) = (unsafe { view(this) }) else {
        return OrtStatusPtr(null_mut());
    };
    let internal = || {
        OrtStatusPtr(v.host.status(
            OrtErrorCode::ORT_FAIL,
            "cuda-arena: an internal error was caught in Shrink",
        ))
    };
    v.calls.bump(Call::Shrink);
    v.guard("Shrink", internal, || {
        match v.with_user(|u| u.allocator().shrink()) {
            Ok(()) => OrtStatusPtr(null_mut()),
            Err(e) => {
                v.failed(
                    "Shrink",
                    &e,
                    OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR,
                    "failed",
                );
                OrtStatusPtr(v.host.error_status(&e))
            }
        }
    })
}
