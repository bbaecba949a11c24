//! The ONNX Runtime that onnxruntime-node loaded in this process: open its library, negotiate
//! an `OrtApi` version, and register a cuda-arena allocator with its environment, through the
//! `cuda-arena-ort` crate (its `OrtLibrary`, `OrtEnvRef` and `OrtAllocatorView`).
//!
//! ONNX Runtime's environment is process-wide: `CreateEnv` returns the one onnxruntime-node
//! made, and `RegisterAllocator(env, allocator)` changes what every session created with
//! `session.use_env_allocators=1` allocates from. The library is opened by path, with
//! `RTLD_NOLOAD` when it must be the one onnxruntime-node loaded, so both native modules talk
//! to the same ONNX Runtime.
//!
//! Lifetime (the crate's `keep_until_exit`): sessions created before `UnregisterAllocator` keep
//! calling the view, and onnxruntime-node does not release sessions still open at exit, so a
//! registered view and the allocator user it holds are kept until the process exits.
//! Unregistering stops new sessions from taking it and hands the arena's wholly free memory
//! back to the device (`shrink`); the arena itself stays, for the sessions made before. The
//! environment reference taken here is kept too, so the environment (which holds the view) is
//! never torn down under a session.
// Opening a library and handing ONNX Runtime a pointer; each block says why it holds.
#![allow(unsafe_code)]

use crate::allocator::NativeAllocator;
use crate::convert::{config_arg, int_arg, pairs_arg};
use crate::error::{invalid, js, JsError, Result};
use crate::handles;
use cuda_arena_core::ArenaError;
use cuda_arena_ort::{
    keep_until_exit, kept, AllocatorUser, HostApi, OrtAllocatorView, OrtEnvRef, OrtLibrary,
    ViewOptions, MAX_ORT_API_VERSION, MIN_ORT_API_VERSION,
};
use napi::Env;
use napi_derive::napi;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The codes of this module's errors, in the order of `ORT_ERROR_CODES` in `ts/errors.ts`.
pub const ORT_ERROR_CODES: [&str; 4] = [
    "ERR_ORT_NOT_FOUND",
    "ERR_ORT_LOAD",
    "ERR_ORT_VERSION",
    "ERR_ORT_REFUSED",
];

fn ort_error(code: usize, message: String) -> JsError {
    napi::Error::new(ORT_ERROR_CODES[code], message)
}
fn not_found(message: String) -> JsError {
    ort_error(0, message)
}
fn load_error(message: String) -> JsError {
    ort_error(1, message)
}
fn version_error(message: String) -> JsError {
    ort_error(2, message)
}
fn refused(e: ArenaError) -> JsError {
    ort_error(3, e.to_string())
}

/// One ONNX Runtime library of this process and its environment, kept until exit.
struct Runtime {
    library: OrtLibrary,
    /// The reference to the process-wide environment registrations go to, taken at the
    /// first registration.
    env: Option<OrtEnvRef>,
}

/// A memory info of an environment: (runtime index, memory name, device id).
type Key = (usize, &'static str, u32);

/// The registration in force for a memory info: its id and its view.
type Current = (u64, &'static OrtAllocatorView);

struct State {
    runtimes: Vec<Runtime>,
    /// Registrations in force, so that a second `unregister()` never removes a later
    /// registration of the same memory info, and one memory info has one at a time.
    current: BTreeMap<Key, Current>,
    next_id: u64,
}

/// Registrations come from any JS thread (workers share ONNX Runtime's environment).
static STATE: Mutex<State> = Mutex::new(State {
    runtimes: Vec::new(),
    current: BTreeMap::new(),
    next_id: 1,
});

fn state() -> MutexGuard<'static, State> {
    // Each update of the state is one push or one map operation: a panic cannot leave it
    // half-done, so a poisoned lock is still consistent.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The library at `path`: the one already loaded with `no_load`, else loaded if need be.
/// Returns its index in `st.runtimes` (one entry per library, however it was named).
fn open(st: &mut State, path: &str, no_load: bool) -> Result<usize> {
    let library = if no_load {
        // SAFETY: with RTLD_NOLOAD nothing is loaded, so no initialiser runs; what is found is
        // the library onnxruntime-node loaded from this path.
        unsafe { OrtLibrary::open_loaded(path) }
            .map_err(|e| load_error(e.to_string()))?
            .ok_or_else(|| {
                not_found(format!(
                    "onnxruntime-node's ONNX Runtime library {} is not loaded in this process \
                     (load onnxruntime-node first, or give ortOptions.libraryPath)",
                    cuda_arena_core::escaped(path)
                ))
            })?
    } else {
        // SAFETY: the caller named this file as ONNX Runtime's library (ortOptions.libraryPath);
        // a file without `OrtGetApiBase` is refused before anything is called in it.
        unsafe { OrtLibrary::open(path) }.map_err(|e| load_error(e.to_string()))?
    };
    // One library, however it was named: its `OrtApi` table (every ONNX Runtime offers
    // version 1) is the same static object.
    let table = library.get_api(1);
    if let Some(i) = st
        .runtimes
        .iter()
        .position(|r| r.library.get_api(1) == table)
    {
        return Ok(i);
    }
    st.runtimes.push(Runtime { library, env: None });
    Ok(st.runtimes.len() - 1)
}

/// The `OrtApi` at `requested`, or at the highest version both the library and cuda-arena know.
fn negotiate(library: &OrtLibrary, requested: Option<u32>) -> Result<HostApi> {
    let offered = library.api_version();
    let range = format!(
        "ONNX Runtime {} at {} offers OrtApi {}; cuda-arena supports {MIN_ORT_API_VERSION} … {MAX_ORT_API_VERSION}",
        library.version_string(),
        cuda_arena_core::escaped(&library.path().to_string_lossy()),
        offered.map_or_else(|| "versions of an unknown range".to_string(), |v| format!("1 … {v}")),
    );
    let wanted = match requested {
        // Refused here rather than asked for: the crate would cap it silently, and ONNX
        // Runtime's `GetApi` prints to stderr for a version it does not offer.
        Some(v)
            if !(MIN_ORT_API_VERSION..=MAX_ORT_API_VERSION).contains(&v)
                || offered.is_some_and(|o| v > o) =>
        {
            return Err(version_error(format!(
                "OrtApi version {v} cannot be used: {range}"
            )));
        }
        Some(v) => v,
        None => MAX_ORT_API_VERSION,
    };
    if offered.is_some_and(|o| o < MIN_ORT_API_VERSION) {
        return Err(version_error(format!(
            "no OrtApi version in common: {range}"
        )));
    }
    library
        .host_api(wanted)
        .map_err(|e| version_error(format!("{e} ({range})")))
}

/// A registration of a cuda-arena allocator with an ONNX Runtime environment. Dropping it
/// (garbage collection) leaves the allocator registered: `unregister`, or the end of the
/// thread (Node environment) that made it, undoes it.
#[napi]
pub struct NativeOrtRegistration {
    id: u64,
    key: Key,
    /// The registered view (kept until exit), for its call counts.
    view: &'static OrtAllocatorView,
    api_version: u32,
    library_path: String,
    ort_version: String,
}

/// Registers `allocator`'s shared allocator with the environment of the ONNX Runtime library
/// at `libraryPath` (with `noLoad`, only one already loaded), through a view that is one more
/// user of it, kept until exit. `keys`/`values`: the options `allocator` was created with (so
/// the view's user is of the same shared allocator), or none. `apiVersion`: the `OrtApi` version
/// to use, or none to negotiate. A failure changes nothing but may leave the library loaded.
#[napi(catch_unwind)]
pub fn ort_register(
    env: Env,
    allocator: &NativeAllocator,
    keys: Option<Vec<String>>,
    values: Option<Vec<String>>,
    library_path: String,
    no_load: bool,
    api_version: Option<f64>,
) -> Result<NativeOrtRegistration> {
    let requested = api_version
        .map(|v| int_arg("apiVersion", v, 1, u64::from(u32::MAX)).map(|v| v as u32))
        .transpose()?;
    let config = match (keys, values) {
        (Some(k), Some(v)) => Some(config_arg(pairs_arg(k, v)?)?),
        (None, None) => None,
        _ => return Err(invalid("options need both keys and values")),
    };
    let (shared, factory) = handles::with_allocator(allocator.number(), |e| {
        Ok((e.allocator.clone(), e.factory.clone()))
    })?;
    let info = shared.info();

    let mut st = state();
    let index = open(&mut st, &library_path, no_load)?;
    let runtime = &mut st.runtimes[index];
    let host = negotiate(&runtime.library, requested)?;
    if runtime.env.is_none() {
        runtime.env = Some(OrtEnvRef::create(host, "cuda-arena").map_err(refused)?);
    }
    let library_path = runtime.library.path().display().to_string();
    let ort_version = runtime.library.version_string();
    // ONNX Runtime documents that it refuses a second allocator for a memory info, but 1.30
    // replaces the first for sessions created from then on: refused here in every version,
    // so a registration stays in force until it is unregistered.
    let key = (index, info.kind.name(), info.device_id);
    if st.current.contains_key(&key) {
        return Err(ort_error(
            3,
            format!(
                "an allocator of cuda-arena is already registered for {info} with ONNX Runtime \
                 {ort_version} at {library_path}; unregister it first"
            ),
        ));
    }

    // The view's own user of the same shared allocator (its foreign streams come with it).
    let created = factory
        .create_shared_allocator(info, config.as_ref(), false)
        .map_err(js)?;
    if !Arc::ptr_eq(&created.allocator, &shared) {
        factory.release_allocator(&created.allocator);
        return Err(invalid(
            "allocator is no longer its factory's shared allocator for its memory info (it was replaced)",
        ));
    }
    let user = AllocatorUser::from_factory(factory, created);
    // SAFETY: no logger and no borrowed memory info: the view makes its own with `host`.
    let view =
        unsafe { OrtAllocatorView::new(user, host, ViewOptions::default()) }.map_err(refused)?;
    // From here the view must outlive every session that may take it.
    let ort = keep_until_exit(view);
    let view = kept(ort).ok_or_else(|| invalid("the view was not kept"))?;
    let Some(ort_env) = st.runtimes[index].env.as_ref() else {
        view.release();
        return Err(invalid("no ONNX Runtime environment"));
    };
    // SAFETY: `ort` is a live view kept until exit.
    if let Err(e) = unsafe { ort_env.register_allocator(ort) } {
        // Never registered, so nothing calls it: its user goes now (the struct stays kept).
        view.release();
        return Err(refused(e));
    }
    let id = st.next_id;
    st.next_id += 1;
    st.current.insert(key, (id, view));
    drop(st);
    // A registration made in a worker would outlive the worker, and nothing could unregister
    // it: it goes with the environment (thread) that made it, if still in force.
    // (Should Node refuse the hook, the registration only lasts until `unregister()`.)
    let _ = env.add_env_cleanup_hook((key, id), |(key, id)| {
        let _ = unregister_if_current(key, id);
    });
    Ok(NativeOrtRegistration {
        id,
        key,
        view,
        api_version: host.version(),
        library_path,
        ort_version,
    })
}

#[napi]
impl NativeOrtRegistration {
    /// The `OrtApi` version the view was built for.
    #[napi(catch_unwind)]
    pub fn api_version(&self) -> u32 {
        self.api_version
    }

    #[napi(catch_unwind)]
    pub fn library_path(&self) -> String {
        self.library_path.clone()
    }

    /// `GetVersionString()` of the library.
    #[napi(catch_unwind)]
    pub fn ort_version(&self) -> String {
        self.ort_version.clone()
    }

    #[napi(catch_unwind)]
    pub fn is_registered(&self) -> bool {
        state().current.get(&self.key).map(|c| c.0) == Some(self.id)
    }

    /// How often ONNX Runtime called each function of the registered view, and the native
    /// handles of the streams the allocator knows now (decimal strings: handles are pointers).
    #[napi(catch_unwind)]
    pub fn calls(&self) -> NativeOrtCalls {
        let c = self.view.calls();
        NativeOrtCalls {
            alloc: c.alloc as f64,
            reserve: c.reserve as f64,
            alloc_on_stream: c.alloc_on_stream as f64,
            alloc_on_stream_without_stream: c.alloc_on_stream_without_stream as f64,
            free: c.free as f64,
            free_ignored: c.free_ignored as f64,
            failed: c.failed as f64,
            get_stats: c.get_stats as f64,
            shrink: c.shrink as f64,
            new_streams: c.new_streams as f64,
            stream_handles: self
                .view
                .stream_handles()
                .iter()
                .map(u64::to_string)
                .collect(),
        }
    }

    /// `UnregisterAllocator` if this registration is still in force; returns whether it was
    /// (a second call does nothing and returns `false`).
    #[napi(catch_unwind)]
    pub fn unregister(&self) -> Result<bool> {
        unregister_if_current(self.key, self.id)
    }
}

/// What [`NativeOrtRegistration::calls`] reports (counts below 2^53: exact as numbers).
#[napi(object)]
pub struct NativeOrtCalls {
    pub alloc: f64,
    pub reserve: f64,
    pub alloc_on_stream: f64,
    pub alloc_on_stream_without_stream: f64,
    pub free: f64,
    pub free_ignored: f64,
    pub failed: f64,
    pub get_stats: f64,
    pub shrink: f64,
    pub new_streams: f64,
    pub stream_handles: Vec<String>,
}

/// `UnregisterAllocator` for registration `id` of `key`, if it is the one in force.
fn unregister_if_current(key: Key, id: u64) -> Result<bool> {
    let mut st = state();
    let Some(&(current, view)) = st.current.get(&key) else {
        return Ok(false);
    };
    if current != id {
        return Ok(false);
    }
    let env = st
        .runtimes
        .get(key.0)
        .and_then(|r| r.env.as_ref())
        .ok_or_else(|| invalid("the registration's environment is unknown"))?;
    // SAFETY: the view's own memory info, live while the view is (until exit).
    unsafe { env.unregister_allocator(view.memory_info()) }.map_err(refused)?;
    st.current.remove(&key);
    drop(st);
    // What the sessions released goes back to the device now: the view keeps the arena until
    // exit (sessions made before may still use it), but its wholly free memory need not stay.
    // A failed shrink leaves that memory in the arena, still usable; the unregistration stands.
    if let Some(a) = view.allocator() {
        if a.can_shrink() {
            let _ = a.shrink();
        }
    }
    Ok(true)
}

/// The codes of this module's errors, for the TS layer's test against `ORT_ERROR_CODES`.
#[napi(catch_unwind)]
pub fn ort_error_codes() -> Vec<String> {
    ORT_ERROR_CODES.iter().map(|c| c.to_string()).collect()
}
