//! Where a factory's memory comes from: the [`Backend`] trait, and [`SimBackend`], the
//! `host` and `virtual` backends of simulated devices. `cuda-sys-bridge` implements the
//! trait for real GPUs.

use crate::allocators::allocator::Allocator;
use crate::allocators::pool::PoolAllocator;
use crate::raw::{
    AddressSpaceAllocator, DeviceLimits, HostAllocator, RawAllocator, RawStats, VirtualMemory,
    DEFAULT_HOST_TOTAL_MEMORY, DEFAULT_VIRTUAL_TOTAL_MEMORY,
};
use crate::streams::stream_events::StreamEvents;
use crate::types::config::ArenaConfig;
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::{MemoryInfo, MemoryKind};
use std::sync::Arc;

/// A shareable raw allocator.
pub type SharedRaw = Arc<dyn RawAllocator>;

/// A shareable virtual-memory form of a device's memory.
pub type SharedVm = Arc<dyn VirtualMemory>;

/// The devices and memories a factory draws on.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// `"cuda"`, `"host"` or `"virtual"`.
    fn name(&self) -> &'static str;

    /// How many devices there are; ordinals run from 0.
    fn device_count(&self) -> u32;

    /// A raw allocator for `kind` memory of device `device` (`Cpu`: device 0).
    fn raw(&self, kind: MemoryKind, device: u32) -> Result<SharedRaw>;

    /// The memory-pool allocator for device memory of `device`. [`ArenaError::Unsupported`]
    /// means the device has none: the caller falls back to the arena.
    fn mempool(&self, device: u32, config: &ArenaConfig) -> Result<Arc<dyn Allocator>>;

    /// Counters of the calls that reached the device's raw allocators.
    fn device_stats(&self, device: u32) -> Result<RawStats>;

    /// The virtual-memory form of device memory of `device`, for arenas in virtual-memory
    /// mode (`arena.use_virtual_memory=1`). [`ArenaError::Unsupported`] (the default) means
    /// the caller should use the region arena.
    fn virtual_memory(&self, device: u32) -> Result<SharedVm> {
        Err(ArenaError::unsupported(format!(
            "the {} backend has no virtual memory for device {device}",
            self.name()
        )))
    }

    /// Events on `device`'s streams, for what streams the host owns free (issue 13); `None`
    /// (the default, and `host` and `virtual`): their chunks come free when they are reset.
    fn stream_events(&self, device: u32) -> Option<Arc<dyn StreamEvents>> {
        let _ = device;
        None
    }

    /// The error for an ordinal this backend has no device for.
    fn no_device(&self, device: u32) -> ArenaError {
        ArenaError::invalid_argument(format!(
            "the {} backend has no device {device} (it has {})",
            self.name(),
            self.device_count()
        ))
    }
}

/// Which simulated memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimKind {
    /// Real host memory: readable and writable.
    Host,
    /// Addresses only.
    Virtual,
}

impl SimKind {
    /// The simulated backend named `name` (`host`, `virtual`), if it is one.
    pub fn named(name: &str) -> Option<SimKind> {
        match name {
            "host" => Some(SimKind::Host),
            "virtual" => Some(SimKind::Virtual),
            _ => None,
        }
    }

    /// Its backend's name.
    pub fn name(self) -> &'static str {
        match self {
            SimKind::Host => "host",
            SimKind::Virtual => "virtual",
        }
    }

    /// A device's memory when its limits give none.
    pub fn default_total_memory(self) -> u64 {
        match self {
            SimKind::Host => crate::raw::DEFAULT_HOST_TOTAL_MEMORY,
            SimKind::Virtual => crate::raw::DEFAULT_VIRTUAL_TOTAL_MEMORY,
        }
    }
}

/// Simulated devices: each has one raw allocator (device and pinned memory share its limits
/// and counters) plus one for `Cpu` memory.
#[derive(Debug)]
pub struct SimBackend {
    kind: SimKind,
    devices: Vec<SimDevice>,
    cpu: SharedRaw,
    /// Events for the host's streams, if simulated ([`SimBackend::with_stream_events`]).
    events: Option<Arc<dyn StreamEvents>>,
}

#[derive(Debug)]
enum SimDevice {
    Host(HostAllocator),
    Virtual(AddressSpaceAllocator),
}

impl SimBackend {
    /// `limits.len()` devices of `kind`; an empty list means one device with the default
    /// size (4 GiB host, 80 GiB virtual).
    pub fn new(kind: SimKind, limits: &[DeviceLimits]) -> Self {
        let default = match kind {
            SimKind::Host => DEFAULT_HOST_TOTAL_MEMORY,
            SimKind::Virtual => DEFAULT_VIRTUAL_TOTAL_MEMORY,
        };
        let limits = if limits.is_empty() {
            vec![DeviceLimits::with_total(default)]
        } else {
            limits.to_vec()
        };
        let devices = limits
            .iter()
            .map(|&l| match kind {
                SimKind::Host => SimDevice::Host(HostAllocator::new(l)),
                SimKind::Virtual => SimDevice::Virtual(AddressSpaceAllocator::new(l)),
            })
            .collect();
        let cpu_limits = DeviceLimits::with_total(default);
        let cpu: SharedRaw = match kind {
            SimKind::Host => Arc::new(HostAllocator::new(cpu_limits)),
            SimKind::Virtual => Arc::new(
                AddressSpaceAllocator::new(cpu_limits)
                    .with_info(MemoryInfo::new(MemoryKind::Cpu, 0)),
            ),
        };
        SimBackend {
            kind,
            devices,
            cpu,
            events: None,
        }
    }

    /// The same devices, whose host streams carry `events` (as the `cuda` backend's carry the
    /// driver's): what a stream frees comes free for other streams once an event recorded on
    /// it after the free has completed, rather than only at its reset. For tests of that path
    /// away from a GPU ([`crate::SimEvents`]); every device shares the one set of events.
    pub fn with_stream_events(mut self, events: Arc<dyn StreamEvents>) -> Self {
        self.events = Some(events);
        self
    }

    fn device(&self, device: u32) -> Result<&SimDevice> {
        self.devices
            .get(device as usize)
            .ok_or_else(|| self.no_device(device))
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn device_count(&self) -> u32 {
        self.devices.len() as u32
    }

    fn raw(&self, kind: MemoryKind, device: u32) -> Result<SharedRaw> {
        if kind == MemoryKind::Cpu {
            return Ok(self.cpu.clone());
        }
        let info = MemoryInfo::new(kind, device);
        Ok(match self.device(device)? {
            SimDevice::Host(h) => Arc::new(h.clone().with_info(info)),
            SimDevice::Virtual(v) => Arc::new(v.clone().with_info(info)),
        })
    }

    fn mempool(&self, device: u32, config: &ArenaConfig) -> Result<Arc<dyn Allocator>> {
        Ok(Arc::new(PoolAllocator::new(
            self.raw(MemoryKind::Cuda, device)?,
            config,
        )))
    }

    fn device_stats(&self, device: u32) -> Result<RawStats> {
        let mut stats = self.raw(MemoryKind::Cuda, device)?.raw_stats();
        // The simulated events are one set for every device: their waits count on each.
        if let Some(events) = &self.events {
            let (device, stream) = events.blocking_waits();
            stats.device_waits += device;
            stats.stream_waits += stream;
        }
        Ok(stats)
    }

    fn virtual_memory(&self, device: u32) -> Result<SharedVm> {
        let info = MemoryInfo::new(MemoryKind::Cuda, device);
        Ok(match self.device(device)? {
            SimDevice::Host(h) => Arc::new(h.clone().with_info(info).vm()),
            SimDevice::Virtual(v) => Arc::new(v.clone().with_info(info).vm()),
        })
    }

    fn stream_events(&self, device: u32) -> Option<Arc<dyn StreamEvents>> {
        self.device(device).ok()?;
        self.events.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::stream_events::SimEvents;

    #[test]
    fn simulated_devices_have_no_stream_events_unless_given_them() {
        let plain = SimBackend::new(SimKind::Virtual, &[]);
        assert!(plain.stream_events(0).is_none());
        let events: Arc<dyn StreamEvents> = SimEvents::immediate();
        let with = SimBackend::new(SimKind::Host, &[]).with_stream_events(events);
        assert!(with.stream_events(0).is_some());
        assert!(with.stream_events(1).is_none(), "no device 1");
    }

    #[test]
    fn simulated_events_blocking_waits_count_in_every_devices_stats() {
        let sim = SimEvents::new();
        let limits = [DeviceLimits::with_total(1 << 30); 2];
        let b = SimBackend::new(SimKind::Virtual, &limits).with_stream_events(sim.clone());
        let waits = |d| {
            let s = b.device_stats(d).expect("device");
            (s.device_waits, s.stream_waits)
        };
        assert_eq!((waits(0), waits(1)), ((0, 0), (0, 0)));
        let ev = sim.record(7).expect("record");
        assert!(!sim.is_done(ev).expect("event"), "work queued");
        sim.synchronize(ev).expect("wait for it");
        assert_eq!((waits(0), waits(1)), ((0, 1), (0, 1)));
        sim.synchronize_device().expect("wait for everything");
        sim.release(ev);
        assert_eq!((waits(0), waits(1)), ((1, 1), (1, 1)));
    }
}
