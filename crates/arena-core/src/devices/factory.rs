//! The allocator factory of ONNX Runtime's CUDA plugin design: per device ordinal, one shared
//! device arena, one pinned arena and one memory-pool allocator, each with its own user count;
//! created on first use, destroyed (all memory back to the backend) when the count reaches
//! zero. Read-only (initializer) allocators bypass the arena and are not shared. Factories
//! can be looked up process-wide by name, so worker threads share arenas.
//!
//! Every allocator the factory hands out is tracked with its user count — the current shared
//! ones, read-only ones, and shared ones replaced while users still held them — and the last
//! release retires it ([`Allocator::retire`]): all its memory goes back to the backend at
//! that moment, whatever references to it remain.

use crate::allocators::allocator::{Allocator, PlainAllocator};
use crate::arena::Arena;
use crate::devices::backend::Backend;
use crate::raw::RawStats;
use crate::streams::foreign_streams::ForeignStreams;
use crate::trace::recorder::RecordingAllocator;
use crate::types::config::ArenaConfig;
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::{AllocatorType, MemoryInfo, MemoryKind};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};

/// Which shared allocator of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SharedKind {
    /// The BFC arena over device memory.
    DeviceArena,
    /// The BFC arena over pinned host memory (no streams).
    PinnedArena,
    /// The memory-pool allocator (`arena.use_cuda_mempool=1`).
    Mempool,
    /// The BFC arena over ordinary host memory (no streams).
    CpuArena,
}

#[derive(Debug)]
struct Shared {
    allocator: Arc<dyn Allocator>,
    config: ArenaConfig,
    /// Users that have not released it yet; the allocator is retired when this reaches 0.
    users: u32,
    /// The host-owned streams its users allocate on, by handle.
    streams: Arc<ForeignStreams>,
}

impl Shared {
    fn new(allocator: Arc<dyn Allocator>, config: ArenaConfig) -> Self {
        Shared {
            allocator,
            config,
            users: 1,
            streams: Arc::new(ForeignStreams::new()),
        }
    }

    fn created(&self, kind: Option<SharedKind>, warnings: Vec<String>) -> Created {
        Created {
            allocator: self.allocator.clone(),
            kind,
            warnings,
            streams: self.streams.clone(),
        }
    }

    /// The last user is gone: every byte back, and its foreign streams forgotten.
    fn retire(self) {
        self.allocator.retire();
        self.streams.clear();
    }
}

/// What the factory tracks. `BTreeMap` and `Vec` rather than hash maps: factories live in the
/// process-wide registry, and leak checkers (valgrind) see their nodes as reachable.
#[derive(Debug, Default)]
struct Entries {
    /// `(kind, device)` → the current shared allocator.
    current: BTreeMap<(SharedKind, u32), Shared>,
    /// Allocators handed out that are not the current shared one: read-only ones, and
    /// shared ones replaced while users still held them.
    detached: Vec<Shared>,
}

/// What a create call gives back.
#[derive(Debug)]
pub struct Created {
    /// The allocator (shared unless read-only).
    pub allocator: Arc<dyn Allocator>,
    /// Which shared allocator it is; `None` for a read-only, unshared one.
    pub kind: Option<SharedKind>,
    /// Warnings for the caller's logger (differing options, fallbacks).
    pub warnings: Vec<String>,
    /// The host-owned streams of this allocator (shared by all its users).
    pub streams: Arc<ForeignStreams>,
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// One user fewer; this many remain.
    Counted(u32),
    /// The last user: the allocator was retired and all its memory returned.
    Destroyed,
    /// Not an allocator of this factory, or one already released by all its users: nothing
    /// counted.
    Untracked,
}

/// Per-device cache of shared allocators over one backend.
#[derive(Debug)]
pub struct Factory {
    name: String,
    backend: Arc<dyn Backend>,
    /// Lock order: this lock, then an allocator's own.
    entries: Mutex<Entries>,
}

fn addr_of(a: &Arc<dyn Allocator>) -> *const () {
    Arc::as_ptr(a) as *const ()
}

impl Factory {
    /// A factory named `name` over `backend`.
    pub fn new(name: impl Into<String>, backend: Arc<dyn Backend>) -> Self {
        Factory {
            name: name.into(),
            backend,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The factory's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Counters of the raw (driver) calls of device `device`.
    pub fn device_stats(&self, device: u32) -> Result<RawStats> {
        self.backend.device_stats(device)
    }

    fn check_device(&self, info: &MemoryInfo) -> Result<()> {
        match info.kind {
            MemoryKind::Cpu if info.device_id != 0 => Err(ArenaError::invalid_argument(format!(
                "Cpu memory has only device 0, got {}",
                info.device_id
            ))),
            MemoryKind::Cpu => Ok(()),
            _ if info.device_id >= self.backend.device_count() => {
                Err(self.backend.no_device(info.device_id))
            }
            _ => Ok(()),
        }
    }

    fn make(
        &self,
        kind: SharedKind,
        device: u32,
        config: &ArenaConfig,
    ) -> Result<Arc<dyn Allocator>> {
        make_allocator(&*self.backend, kind, device, config)
    }

    /// The shared allocator for `info` (created on first use with `options`, or the
    /// defaults), counting one more user; a read-only `info` gets a new plain allocator.
    /// When the shared allocator exists and `options` differ from the ones it was made
    /// with, it is kept and a warning names the differing keys.
    pub fn create_allocator(
        &self,
        info: MemoryInfo,
        options: Option<&ArenaConfig>,
    ) -> Result<Created> {
        self.create(info, options, false)
    }

    /// As [`Factory::create_allocator`]; with `replace`, an existing shared allocator is
    /// detached from the cache first (its holders keep it until they release it) and a new
    /// one is made with `options`.
    pub fn create_shared_allocator(
        &self,
        info: MemoryInfo,
        options: Option<&ArenaConfig>,
        replace: bool,
    ) -> Result<Created> {
        self.create(info, options, replace)
    }

    fn create(
        &self,
        info: MemoryInfo,
        options: Option<&ArenaConfig>,
        replace: bool,
    ) -> Result<Created> {
        self.check_device(&info)?;
        let mut warnings = Vec::new();
        let config = options.cloned().unwrap_or_default();
        config.validate()?;
        if info.allocator_type == AllocatorType::ReadOnly {
            let raw = self.backend.raw(info.kind, info.device_id)?;
            let allocator = recordable(Arc::new(PlainAllocator::new(raw).with_info(info)));
            let shared = Shared::new(allocator, config);
            let created = shared.created(None, warnings);
            self.entries.lock().detached.push(shared);
            return Ok(created);
        }
        let mut kind = SharedKind::selected(info.kind, &config);
        let device = info.device_id;
        let mut guard = self.entries.lock();
        let entries = &mut *guard;
        if replace {
            if let Some(old) = entries.current.remove(&(kind, device)) {
                entries.detached.push(old);
            }
        }
        if let Some(shared) = entries.current.get_mut(&(kind, device)) {
            if let Some(opts) = options {
                let differing = shared.config.differing_keys(opts);
                if !differing.is_empty() {
                    warnings.push(format!(
                        "the shared {} allocator for {info} already exists with other options; keeping it \
                         (differing: {})",
                        kind_name(kind),
                        differing.join(", ")
                    ));
                }
            }
            shared.users += 1;
            return Ok(shared.created(Some(kind), warnings));
        }
        let allocator = match self.make(kind, device, &config) {
            Err(e) if vm_unsupported(kind, &config, &e) => {
                warnings.push(vm_fallback_warning(&info, &e));
                self.make(kind, device, &without_vm(&config))?
            }
            Err(e) if pool_unsupported(kind, &e) => {
                warnings.push(pool_fallback_warning(&info, &e));
                kind = SharedKind::DeviceArena;
                if let Some(shared) = entries.current.get_mut(&(kind, device)) {
                    shared.users += 1;
                    return Ok(shared.created(Some(kind), warnings));
                }
                self.make(kind, device, &config)?
            }
            other => other?,
        };
        let mut shared = Shared::new(allocator, config);
        // Issue 13: the host's streams carry the backend's events, where it has them.
        shared.streams = Arc::new(ForeignStreams::with_events(
            self.backend.stream_events(device),
        ));
        let created = shared.created(Some(kind), warnings);
        entries.current.insert((kind, device), shared);
        Ok(created)
    }

    /// Counts one user of `allocator` fewer; the last release retires it: all its memory goes
    /// back to the backend now.
    pub fn release_allocator(&self, allocator: &Arc<dyn Allocator>) -> Released {
        let retired = {
            let mut guard = self.entries.lock();
            let entries = &mut *guard;
            let is_it = |s: &Shared| addr_of(&s.allocator) == addr_of(allocator);
            if let Some(key) = entries
                .current
                .iter()
                .find(|(_, s)| is_it(s))
                .map(|(k, _)| *k)
            {
                match entries.current.get_mut(&key) {
                    Some(shared) if shared.users > 1 => {
                        shared.users -= 1;
                        return Released::Counted(shared.users);
                    }
                    _ => entries.current.remove(&key),
                }
            } else if let Some(i) = entries.detached.iter().position(is_it) {
                let shared = &mut entries.detached[i];
                if shared.users > 1 {
                    shared.users -= 1;
                    return Released::Counted(shared.users);
                }
                Some(entries.detached.swap_remove(i))
            } else {
                None
            }
        };
        match retired {
            // Outside the factory's lock: retiring returns memory to the backend and drops
            // streams, which call into allocators.
            Some(shared) => {
                shared.retire();
                Released::Destroyed
            }
            None => Released::Untracked,
        }
    }

    /// Counts one more user of `allocator`, which a user of this factory holds (an ONNX Runtime
    /// view of it is its own user); returns the users it now has. Each call is matched by one
    /// [`Factory::release_allocator`]. One no user holds any more is `ERR_ARENA_RELEASED`.
    pub fn retain_allocator(&self, allocator: &Arc<dyn Allocator>) -> Result<u32> {
        let mut guard = self.entries.lock();
        let entries = &mut *guard;
        let is_it = |s: &&mut Shared| addr_of(&s.allocator) == addr_of(allocator);
        let shared = entries
            .current
            .values_mut()
            .find(is_it)
            .or_else(|| entries.detached.iter_mut().find(is_it))
            .ok_or_else(|| ArenaError::Released {
                what: format!("the allocator for {} (no user holds it)", allocator.info()),
            })?;
        shared.users = shared
            .users
            .checked_add(1)
            .ok_or_else(|| ArenaError::invalid_argument("too many users of one allocator"))?;
        Ok(shared.users)
    }

    /// Users of the shared allocator of `kind` on `device` (0 if none exists).
    pub fn users(&self, kind: SharedKind, device: u32) -> u32 {
        self.entries
            .lock()
            .current
            .get(&(kind, device))
            .map_or(0, |s| s.users)
    }

    /// How many allocators this factory has handed out that are not yet released by all
    /// their users (current shared ones, read-only ones, replaced ones still held).
    pub fn live_allocators(&self) -> usize {
        let entries = self.entries.lock();
        entries.current.len() + entries.detached.len()
    }
}

/// `allocator` as every factory hands it out: recordable by all its users.
fn recordable<A: Allocator + ?Sized + 'static>(allocator: Arc<A>) -> Arc<dyn Allocator> {
    Arc::new(RecordingAllocator::new(allocator))
}

fn kind_name(kind: SharedKind) -> &'static str {
    kind.name()
}

impl SharedKind {
    /// Which shared allocator serves `memory` under `config`: for device memory the memory
    /// pool when `arena.use_cuda_mempool=1`, else the arena; the pinned and CPU arenas
    /// otherwise.
    pub fn selected(memory: MemoryKind, config: &ArenaConfig) -> SharedKind {
        match memory {
            MemoryKind::Cuda if config.use_cuda_mempool => SharedKind::Mempool,
            MemoryKind::Cuda => SharedKind::DeviceArena,
            MemoryKind::CudaPinned => SharedKind::PinnedArena,
            MemoryKind::Cpu => SharedKind::CpuArena,
        }
    }

    /// `"device arena"`, `"pinned arena"`, `"memory pool"` or `"cpu arena"`.
    pub fn name(self) -> &'static str {
        match self {
            SharedKind::DeviceArena => "device arena",
            SharedKind::PinnedArena => "pinned arena",
            SharedKind::Mempool => "memory pool",
            SharedKind::CpuArena => "cpu arena",
        }
    }
}

/// A new allocator of `kind` for `device` of `backend`, with `config`: what a factory caches
/// as that shared allocator, recordable ([`RecordingAllocator`]).
pub fn make_allocator(
    backend: &dyn Backend,
    kind: SharedKind,
    device: u32,
    config: &ArenaConfig,
) -> Result<Arc<dyn Allocator>> {
    let raw = |k| backend.raw(k, device);
    // Each recordable around the concrete allocator, so calls to it are direct.
    Ok(match kind {
        SharedKind::DeviceArena if config.use_virtual_memory => {
            recordable(Arc::new(Arena::with_virtual_memory(
                raw(MemoryKind::Cuda)?,
                backend.virtual_memory(device)?,
                config.clone(),
            )?))
        }
        SharedKind::DeviceArena => recordable(Arc::new(Arena::new(
            raw(MemoryKind::Cuda)?,
            config.clone(),
        )?)),
        SharedKind::PinnedArena => recordable(Arc::new(
            Arena::new(raw(MemoryKind::CudaPinned)?, config.clone())?.without_streams(),
        )),
        SharedKind::CpuArena => recordable(Arc::new(
            Arena::new(raw(MemoryKind::Cpu)?, config.clone())?.without_streams(),
        )),
        SharedKind::Mempool => recordable(backend.mempool(device, config)?),
    })
}

/// Whether making `kind` failed because the device has no memory pools: the factory then
/// falls back to the arena.
fn pool_unsupported(kind: SharedKind, e: &ArenaError) -> bool {
    kind == SharedKind::Mempool && matches!(e, ArenaError::Unsupported { .. })
}

/// Whether making `kind` failed because the backend has no virtual memory for the device:
/// the factory then makes the region arena.
fn vm_unsupported(kind: SharedKind, config: &ArenaConfig, e: &ArenaError) -> bool {
    kind == SharedKind::DeviceArena
        && config.use_virtual_memory
        && matches!(e, ArenaError::Unsupported { .. })
}

fn without_vm(config: &ArenaConfig) -> ArenaConfig {
    ArenaConfig {
        use_virtual_memory: false,
        ..config.clone()
    }
}

fn vm_fallback_warning(info: &MemoryInfo, e: &ArenaError) -> String {
    let reason = match e {
        ArenaError::Unsupported { reason } => reason.as_str(),
        _ => "",
    };
    format!("virtual memory is not supported for {info} ({reason}); using the region arena")
}

fn pool_fallback_warning(info: &MemoryInfo, e: &ArenaError) -> String {
    let reason = match e {
        ArenaError::Unsupported { reason } => reason.as_str(),
        _ => "",
    };
    format!("the CUDA memory pool is not supported for {info} ({reason}); using the arena")
}

/// The allocator [`selected_allocator`] made.
#[derive(Debug)]
pub struct Selected {
    /// The allocator, new and not shared.
    pub allocator: Arc<dyn Allocator>,
    /// Which allocator it is.
    pub kind: SharedKind,
    /// Warnings for the caller (the fallback from the pool to the arena).
    pub warnings: Vec<String>,
}

/// The allocator `config` selects for `memory` of `device` on `backend`, new and unshared:
/// what [`Factory::create_allocator`] would create (the arena, in virtual-memory mode with
/// `arena.use_virtual_memory=1`, or the memory pool with `arena.use_cuda_mempool=1`, falling
/// back to the region arena with a warning where the device has no virtual memory or no
/// pools), without the factory's sharing. For comparing configs side by side.
pub fn selected_allocator(
    backend: &dyn Backend,
    memory: MemoryKind,
    device: u32,
    config: &ArenaConfig,
) -> Result<Selected> {
    config.validate()?;
    let info = MemoryInfo::new(memory, device);
    let kind = SharedKind::selected(memory, config);
    match make_allocator(backend, kind, device, config) {
        Err(e) if vm_unsupported(kind, config, &e) => Ok(Selected {
            allocator: make_allocator(backend, kind, device, &without_vm(config))?,
            kind,
            warnings: vec![vm_fallback_warning(&info, &e)],
        }),
        Err(e) if pool_unsupported(kind, &e) => Ok(Selected {
            allocator: make_allocator(backend, SharedKind::DeviceArena, device, config)?,
            kind: SharedKind::DeviceArena,
            warnings: vec![pool_fallback_warning(&info, &e)],
        }),
        other => Ok(Selected {
            allocator: other?,
            kind,
            warnings: Vec::new(),
        }),
    }
}

/// Name → (spec, factory). A `BTreeMap`: it is process-wide and lives until exit, and leak
/// checkers see its nodes as reachable (a hash map's table is only pointed into).
#[derive(Default)]
struct Names {
    by_name: BTreeMap<String, (String, Weak<Factory>)>,
    /// Entries left by the last sweep of factories no one holds.
    after_sweep: usize,
}

/// Entries a registry may reach before its first sweep.
const FIRST_SWEEP: usize = 64;

impl Names {
    /// Forgets the factories no one holds once the entries have doubled since the last sweep:
    /// the registry stays within twice the live factories (plus [`FIRST_SWEEP`]), and making
    /// n factories costs O(n log n), not a scan of them all each time.
    fn sweep_if_grown(&mut self) {
        if self.by_name.len() >= FIRST_SWEEP.max(2 * self.after_sweep) {
            self.by_name.retain(|_, (_, weak)| weak.strong_count() > 0);
            self.after_sweep = self.by_name.len();
        }
    }

    /// [`named_factory`] on this registry.
    fn get_or_make(
        &mut self,
        name: &str,
        spec: &str,
        make: impl FnOnce() -> Result<Factory>,
    ) -> Result<Arc<Factory>> {
        // Factories no one holds any more are forgotten, so the registry follows the live ones.
        self.sweep_if_grown();
        if let Some((existing_spec, weak)) = self.by_name.get(name) {
            if let Some(factory) = weak.upgrade() {
                if existing_spec != spec {
                    return Err(ArenaError::invalid_argument(format!(
                        "a factory named \"{}\" already exists with {existing_spec}; this one asks for {spec}",
                        crate::types::error::escaped(name)
                    )));
                }
                return Ok(factory);
            }
        }
        let factory = Arc::new(make()?);
        self.by_name.insert(
            name.to_string(),
            (spec.to_string(), Arc::downgrade(&factory)),
        );
        Ok(factory)
    }
}

type Registry = Mutex<Names>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Names::default()))
}

/// The process-wide factory named `name`: the live one if it exists (it must have been made
/// with the same `spec`, a description of its backend and devices), else a new one from
/// `make`. Every thread, and every Node worker, that asks for a name gets the same factory
/// while any holder keeps it alive.
pub fn named_factory(
    name: &str,
    spec: &str,
    make: impl FnOnce() -> Result<Factory>,
) -> Result<Arc<Factory>> {
    registry().lock().get_or_make(name, spec, make)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_vm() -> ArenaConfig {
        ArenaConfig {
            use_virtual_memory: true,
            ..ArenaConfig::default()
        }
    }

    #[test]
    fn the_factory_falls_back_on_an_unsupported_refusal_not_on_its_words() {
        let worded = ArenaError::invalid_argument("virtual memory is not supported here");
        let refused = ArenaError::unsupported("device 0 has no virtual-memory management");
        assert!(!vm_unsupported(
            SharedKind::DeviceArena,
            &with_vm(),
            &worded
        ));
        assert!(vm_unsupported(
            SharedKind::DeviceArena,
            &with_vm(),
            &refused
        ));
        assert!(!pool_unsupported(SharedKind::Mempool, &worded));
        assert!(pool_unsupported(
            SharedKind::Mempool,
            &ArenaError::unsupported("device 0 has no memory pools")
        ));
    }

    fn sim_factory(name: &str) -> Result<Factory> {
        let backend =
            crate::devices::backend::SimBackend::new(crate::devices::backend::SimKind::Host, &[]);
        Ok(Factory::new(name, Arc::new(backend)))
    }

    #[test]
    fn the_registry_holds_at_most_twice_its_live_factories_and_the_first_sweeps_worth() {
        let mut names = Names::default();
        let mut live = Vec::new();
        for i in 0..5_000 {
            let name = format!("f{i}");
            let f = names
                .get_or_make(&name, "host:1", || sim_factory(&name))
                .expect("made");
            // One in five is kept; the rest are dropped at once (a name per request).
            if i % 5 == 0 {
                live.push(f);
            }
            let bound = (2 * live.len()).max(FIRST_SWEEP) + 1;
            assert!(
                names.by_name.len() <= bound,
                "{} entries for {} live factories after {} made",
                names.by_name.len(),
                live.len(),
                i + 1
            );
        }
        // Every live one is still found by name, as itself.
        for (k, f) in live.iter().enumerate() {
            let name = format!("f{}", 5 * k);
            let again = names
                .get_or_make(&name, "host:1", || sim_factory(&name))
                .expect("found");
            assert!(Arc::ptr_eq(f, &again), "{name}");
        }
    }

    #[test]
    fn a_name_whose_factory_was_dropped_makes_a_new_one_before_any_sweep() {
        let mut names = Names::default();
        let first = names
            .get_or_make("a", "host:1", || sim_factory("a"))
            .expect("made");
        let weak = Arc::downgrade(&first);
        drop(first);
        // Another backend is fine now: the old factory is gone, though its entry is not.
        let second = names
            .get_or_make("a", "virtual:1", || sim_factory("a"))
            .expect("made anew");
        assert!(weak.upgrade().is_none());
        assert_eq!(names.by_name.len(), 1);
        assert_eq!(names.by_name["a"].0, "virtual:1");
        drop(second);
    }

    #[test]
    fn a_huge_factory_name_makes_a_short_message() {
        let mut names = Names::default();
        let name = "x".repeat(4_000_000);
        let _kept = names
            .get_or_make(&name, "host:1", || sim_factory(&name))
            .expect("made");
        let err = names
            .get_or_make(&name, "virtual:1", || sim_factory(&name))
            .expect_err("another backend");
        let message = err.to_string();
        assert!(message.len() < 1_000, "{} bytes", message.len());
        assert!(
            message.contains("xxx…\" already exists with host:1"),
            "{message}"
        );
    }

    #[test]
    fn an_unsupported_refusal_keeps_the_invalid_argument_code() {
        assert_eq!(
            ArenaError::unsupported("anything").code(),
            "ERR_ARENA_INVALID_ARGUMENT"
        );
    }
}
