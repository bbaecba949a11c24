//! The allocator factory of ONNX Runtime's CUDA plugin design: per device ordinal, one shared
//! device arena, one pinned arena and one memory-pool allocator, each with its own user count;
//! created on first use, destroyed (all memory back to the backend) when the count reaches
//! zero. Read-only (initializer) allocators bypass the arena and are not shared. Factories
//! can be looked up process-wide by name, so worker threads share arenas.

use crate::allocator::{Allocator, PlainAllocator};
use crate::arena::Arena;
use crate::backend::Backend;
use crate::config::ArenaConfig;
use crate::error::{ArenaError, Result};
use crate::memory_info::{AllocatorType, MemoryInfo, MemoryKind};
use crate::raw::RawStats;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

/// Which shared allocator of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    users: u32,
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
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// One user fewer; this many remain.
    Counted(u32),
    /// The last user: the allocator was dropped from the cache and its memory returned once
    /// no handle holds it.
    Destroyed,
    /// Not a shared allocator of this factory (read-only, or replaced): nothing counted.
    Untracked,
}

/// Per-device cache of shared allocators over one backend.
#[derive(Debug)]
pub struct Factory {
    name: String,
    backend: Arc<dyn Backend>,
    /// `(kind, device)` → shared allocator. Lock order: this lock, then an allocator's own.
    entries: Mutex<HashMap<(SharedKind, u32), Shared>>,
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
            entries: Mutex::new(HashMap::new()),
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
        let raw = |k| self.backend.raw(k, device);
        Ok(match kind {
            SharedKind::DeviceArena => {
                Arc::new(Arena::new(raw(MemoryKind::Cuda)?, config.clone())?)
            }
            SharedKind::PinnedArena => Arc::new(
                Arena::new(raw(MemoryKind::CudaPinned)?, config.clone())?.without_streams(),
            ),
            SharedKind::CpuArena => {
                Arc::new(Arena::new(raw(MemoryKind::Cpu)?, config.clone())?.without_streams())
            }
            SharedKind::Mempool => self.backend.mempool(device, config)?,
        })
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
        if info.allocator_type == AllocatorType::ReadOnly {
            let raw = self.backend.raw(info.kind, info.device_id)?;
            let allocator: Arc<dyn Allocator> = Arc::new(PlainAllocator::new(raw).with_info(info));
            return Ok(Created {
                allocator,
                kind: None,
                warnings,
            });
        }
        let config = options.cloned().unwrap_or_default();
        config.validate()?;
        let mut kind = match info.kind {
            MemoryKind::Cuda if config.use_cuda_mempool => SharedKind::Mempool,
            MemoryKind::Cuda => SharedKind::DeviceArena,
            MemoryKind::CudaPinned => SharedKind::PinnedArena,
            MemoryKind::Cpu => SharedKind::CpuArena,
        };
        let device = info.device_id;
        let mut entries = self.entries.lock();
        if replace {
            entries.remove(&(kind, device));
        }
        if let Some(shared) = entries.get_mut(&(kind, device)) {
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
            return Ok(Created {
                allocator: shared.allocator.clone(),
                kind: Some(kind),
                warnings,
            });
        }
        let allocator = match self.make(kind, device, &config) {
            Err(ArenaError::InvalidArgument { reason })
                if kind == SharedKind::Mempool && reason.contains("not supported") =>
            {
                warnings.push(format!(
                    "the CUDA memory pool is not supported for {info} ({reason}); using the arena"
                ));
                kind = SharedKind::DeviceArena;
                if let Some(shared) = entries.get_mut(&(kind, device)) {
                    shared.users += 1;
                    return Ok(Created {
                        allocator: shared.allocator.clone(),
                        kind: Some(kind),
                        warnings,
                    });
                }
                self.make(kind, device, &config)?
            }
            other => other?,
        };
        entries.insert(
            (kind, device),
            Shared {
                allocator: allocator.clone(),
                config,
                users: 1,
            },
        );
        Ok(Created {
            allocator,
            kind: Some(kind),
            warnings,
        })
    }

    /// Counts one user of `allocator` fewer; at zero the factory drops it, and its memory goes
    /// back to the backend once no handle holds it.
    pub fn release_allocator(&self, allocator: &Arc<dyn Allocator>) -> Released {
        let mut entries = self.entries.lock();
        let key = entries
            .iter()
            .find(|(_, s)| addr_of(&s.allocator) == addr_of(allocator))
            .map(|(k, _)| *k);
        let Some(key) = key else {
            return Released::Untracked;
        };
        let shared = entries.get_mut(&key).expect("found just above");
        shared.users -= 1;
        if shared.users == 0 {
            entries.remove(&key);
            Released::Destroyed
        } else {
            Released::Counted(shared.users)
        }
    }

    /// Users of the shared allocator of `kind` on `device` (0 if none exists).
    pub fn users(&self, kind: SharedKind, device: u32) -> u32 {
        self.entries
            .lock()
            .get(&(kind, device))
            .map_or(0, |s| s.users)
    }
}

fn kind_name(kind: SharedKind) -> &'static str {
    match kind {
        SharedKind::DeviceArena => "device arena",
        SharedKind::PinnedArena => "pinned arena",
        SharedKind::Mempool => "memory pool",
        SharedKind::CpuArena => "cpu arena",
    }
}

type Registry = Mutex<HashMap<String, (String, Weak<Factory>)>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
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
    let mut reg = registry().lock();
    if let Some((existing_spec, weak)) = reg.get(name) {
        if let Some(factory) = weak.upgrade() {
            if existing_spec != spec {
                return Err(ArenaError::invalid_argument(format!(
                    "factory {name:?} already exists with backend {existing_spec}, not {spec}"
                )));
            }
            return Ok(factory);
        }
    }
    let factory = Arc::new(make()?);
    reg.insert(
        name.to_string(),
        (spec.to_string(), Arc::downgrade(&factory)),
    );
    Ok(factory)
}
