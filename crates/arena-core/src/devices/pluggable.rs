//! One device's shared allocator as a pluggable-allocator host drives it (issue 13; PyTorch's
//! `CUDAPluggableAllocator` is the host the C library's `cuda_arena_torch_*` entry points
//! serve): every allocation on a stream the host owns, `record_stream`, a per-device memory
//! limit, and `empty_cache`. The C binding only converts arguments and reports errors.
//!
//! - Streams are handles the host owns; the null stream (0) is CUDA's legacy default stream,
//!   a stream like any other (PyTorch's default stream), named [`LEGACY_STREAM`].
//! - `record_stream(p, U)`: the block is also used on U. Its free then makes the stream it
//!   was allocated on wait (on the device; the host does not block) for an event recorded on
//!   U, before the free: the allocator's rule for that stream (reuse on it at once, on others
//!   once its work up to the free is done) then covers U's work too. Unlike PyTorch, which
//!   holds such a block back until U's event completes, this adds a dependency of the block's
//!   stream on U's work queued before the free.
//! - The memory fraction is a limit on the bytes the allocator holds from the driver
//!   (`TotalAllocated`), checked after each allocation: one that leaves more held gives its
//!   block back, returns idle memory to the driver (`shrink`) and tries once more, as PyTorch
//!   frees its cache and retries, then fails as out of memory. `arena.max_mem` still applies;
//!   the lower of the two binds.

use crate::allocators::allocator::Allocator;
use crate::devices::factory::Factory;
use crate::raw::RawStats;
use crate::streams::foreign_streams::ForeignStreams;
use crate::streams::stream_events::{StreamEvents, LEGACY_STREAM};
use crate::types::config::ArenaConfig;
use crate::types::error::{ArenaError, Result};
use crate::types::memory_info::{MemoryInfo, MemoryKind};
use crate::types::stats::AllocatorStats;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// No limit set.
const UNLIMITED: u64 = u64::MAX;

/// The host's handle for a stream, with the null stream named as the legacy stream.
pub fn stream_token(stream: u64) -> u64 {
    if stream == 0 {
        LEGACY_STREAM
    } else {
        stream
    }
}

/// A device's shared device-memory allocator, held as one user of its factory.
#[derive(Debug)]
pub struct PluggableDevice {
    device: u32,
    factory: Arc<Factory>,
    allocator: Arc<dyn Allocator>,
    streams: Arc<ForeignStreams>,
    /// The most bytes the allocator may hold after an allocation; [`UNLIMITED`] when unset.
    limit: AtomicU64,
    /// Live blocks used on streams besides their own (`record_stream`): address → handles.
    /// One entry per such block, removed at its free.
    uses: Mutex<BTreeMap<u64, Vec<u64>>>,
    /// Entries in `uses`, so that frees skip its lock while there are none.
    blocks_with_uses: AtomicUsize,
}

impl PluggableDevice {
    /// Joins (or creates) `factory`'s shared allocator for device memory of `device`, with
    /// `config` if it is created now. Returns the device and the factory's warnings.
    pub fn new(
        factory: Arc<Factory>,
        device: u32,
        config: &ArenaConfig,
    ) -> Result<(Self, Vec<String>)> {
        let created =
            factory.create_allocator(MemoryInfo::new(MemoryKind::Cuda, device), Some(config))?;
        let d = PluggableDevice {
            device,
            allocator: created.allocator,
            streams: created.streams,
            factory,
            limit: AtomicU64::new(UNLIMITED),
            uses: Mutex::new(BTreeMap::new()),
            blocks_with_uses: AtomicUsize::new(0),
        };
        Ok((d, created.warnings))
    }

    /// The same, with its own host streams carrying `events` instead of the factory's: for
    /// tests with simulated events.
    pub fn with_events(mut self, events: Arc<dyn StreamEvents>) -> Self {
        self.streams = Arc::new(ForeignStreams::with_events(Some(events)));
        self
    }

    /// The allocator.
    pub fn allocator(&self) -> &Arc<dyn Allocator> {
        &self.allocator
    }

    /// `size` bytes for use on `stream` (a host handle; 0: the legacy stream).
    pub fn alloc(&self, size: u64, stream: u64) -> Result<Option<u64>> {
        let Some(p) = self.alloc_on(size, stream)? else {
            return Ok(None);
        };
        let limit = self.limit.load(Ordering::Relaxed);
        if limit == UNLIMITED || self.allocator.stats().total_allocated <= limit {
            return Ok(Some(p));
        }
        self.allocator.free(p)?;
        // Idle memory goes back and the request is tried once more; a shrink that fails
        // leaves only less room.
        let _ = self.allocator.shrink();
        let Some(p) = self.alloc_on(size, stream)? else {
            return Ok(None);
        };
        let held = self.allocator.stats().total_allocated;
        if held <= limit {
            return Ok(Some(p));
        }
        self.allocator.free(p)?;
        // What this call grew goes back too (DESIGN decision 7: a failure may shrink).
        let _ = self.allocator.shrink();
        Err(ArenaError::OutOfMemory {
            requested: size,
            reason: format!(
                "the memory fraction limits device {} to {limit} bytes held, and this allocation \
                 would hold {held}",
                self.device
            ),
        })
    }

    fn alloc_on(&self, size: u64, stream: u64) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        if !self.allocator.is_stream_aware() {
            return self.allocator.alloc(size);
        }
        // A failed call changes nothing: a handle it made is not remembered.
        self.streams.with_stream(stream_token(stream), |s| {
            self.allocator.alloc_on_stream(size, s)
        })
    }

    /// Frees `addr`, allocated on `stream`; NULL is a no-op. A block recorded on other
    /// streams is freed only after its stream is made to wait for their work so far.
    pub fn free(&self, addr: u64, stream: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        let uses = if self.blocks_with_uses.load(Ordering::Acquire) > 0 {
            let used = self.uses.lock().remove(&addr);
            if used.is_some() {
                self.blocks_with_uses.fetch_sub(1, Ordering::AcqRel);
            }
            used
        } else {
            None
        };
        if let (Some(uses), Some(events)) = (uses, self.streams.events()) {
            order_after_uses(events.as_ref(), stream_token(stream), &uses);
        }
        self.allocator.free(addr)
    }

    /// The live block `addr` is also used on `stream`: its free waits for that stream's work.
    pub fn record_stream(&self, addr: u64, stream: u64) -> Result<()> {
        // Only live blocks: an unknown address is an error and nothing is remembered for it.
        self.allocator.allocated_size(addr)?;
        let token = stream_token(stream);
        let mut uses = self.uses.lock();
        let entry = uses.entry(addr).or_insert_with(|| {
            self.blocks_with_uses.fetch_add(1, Ordering::AcqRel);
            Vec::new()
        });
        if !entry.contains(&token) {
            entry.push(token);
        }
        Ok(())
    }

    /// Returns memory no block uses to the driver (PyTorch's `empty_cache`).
    pub fn empty_cache(&self) -> Result<()> {
        self.allocator.shrink()
    }

    /// What reached this device's driver ([`Factory::device_stats`]).
    pub fn device_stats(&self) -> Result<RawStats> {
        self.factory.device_stats(self.device)
    }

    /// Limits the bytes held to `fraction` (0 to 1) of the device's memory.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(ArenaError::invalid_argument(format!(
                "the memory fraction must be between 0 and 1, got {fraction}"
            )));
        }
        let total = self
            .factory
            .device_stats(self.device)?
            .total
            .ok_or_else(|| {
                ArenaError::invalid_argument(format!(
                    "the total memory of device {} is unknown",
                    self.device
                ))
            })?;
        // Below 2^53 bytes the product is exact enough; the cast saturates.
        let limit = (fraction * total as f64) as u64;
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    /// The limit the memory fraction set, if any.
    pub fn limit(&self) -> Option<u64> {
        Some(self.limit.load(Ordering::Relaxed)).filter(|&l| l != UNLIMITED)
    }

    /// Blocks with `record_stream` uses not yet freed.
    pub fn blocks_with_uses(&self) -> usize {
        self.blocks_with_uses.load(Ordering::Acquire)
    }

    /// The allocator's counters.
    pub fn stats(&self) -> AllocatorStats {
        self.allocator.stats()
    }
}

/// Makes `stream` wait for every stream in `uses` (but itself) as its work stands now. A use
/// whose event cannot be recorded (a stream the host destroyed) is waited for by
/// synchronizing the device, so the free is never early.
fn order_after_uses(events: &dyn StreamEvents, stream: u64, uses: &[u64]) {
    for &u in uses.iter().filter(|&&u| u != stream) {
        let ordered = events.record(u).and_then(|ev| {
            let waited = events.stream_wait(stream, ev);
            // The wait took the event's state: the event may be recorded again for anyone.
            events.release(ev);
            waited
        });
        if ordered.is_err() {
            // Nothing to report from a free; a failure leaves only the wait undone.
            let _ = events.synchronize_device();
            return;
        }
    }
}

impl Drop for PluggableDevice {
    fn drop(&mut self) {
        self.factory.release_allocator(&self.allocator);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::backend::{SimBackend, SimKind};
    use crate::raw::DeviceLimits;
    use crate::streams::stream_events::SimEvents;

    const MIB: u64 = 1 << 20;

    fn device(total: u64, conf: &[(&str, &str)]) -> (PluggableDevice, Arc<SimEvents>) {
        let backend = SimBackend::new(SimKind::Virtual, &[DeviceLimits::with_total(total)]);
        let factory = Arc::new(Factory::new("pluggable-test", Arc::new(backend)));
        let config = ArenaConfig::from_pairs(conf.iter().copied()).expect("valid");
        let sim = SimEvents::new();
        let (d, _) = PluggableDevice::new(factory, 0, &config).expect("device");
        (d.with_events(sim.clone()), sim)
    }

    #[test]
    fn the_null_stream_is_the_legacy_stream() {
        assert_eq!(stream_token(0), LEGACY_STREAM);
        assert_eq!(stream_token(0x1234), 0x1234);
    }

    #[test]
    fn a_block_on_the_default_stream_is_reused_there_at_once() {
        let (d, _) = device(1 << 30, &[]);
        let p = d.alloc(4096, 0).expect("alloc").expect("addr");
        d.free(p, 0).expect("free");
        assert_eq!(d.alloc(4096, 0).expect("alloc"), Some(p));
    }

    #[test]
    fn a_freed_block_recorded_on_another_stream_makes_its_stream_wait_for_that_one() {
        let (d, sim) = device(1 << 30, &[]);
        let (s, u) = (0x100, 0x200);
        let p = d.alloc(4096, s).expect("alloc").expect("addr");
        d.record_stream(p, u).expect("record");
        d.record_stream(p, u).expect("recorded once");
        d.record_stream(p, s)
            .expect("its own stream: nothing to wait for");
        assert_eq!(d.blocks_with_uses(), 1);
        d.free(p, s).expect("free");
        assert_eq!(sim.waits(), vec![(s, u)]);
        assert_eq!(d.blocks_with_uses(), 0, "the entry went with the block");
        assert_eq!(sim.outstanding(), 0, "the event went back to the pool");
    }

    #[test]
    fn record_stream_on_an_unknown_pointer_is_refused_and_remembers_nothing() {
        let (d, _) = device(1 << 30, &[]);
        let e = d.record_stream(0xdead_0000, 0x100).expect_err("unknown");
        assert_eq!(e.code(), "ERR_ARENA_UNKNOWN_POINTER");
        assert_eq!(d.blocks_with_uses(), 0);
    }

    #[test]
    fn a_use_that_cannot_be_recorded_is_waited_for_by_synchronizing_the_device() {
        let (d, sim) = device(1 << 30, &[]);
        let p = d.alloc(4096, 0x100).expect("alloc").expect("addr");
        d.record_stream(p, 0x200).expect("record");
        sim.fail_records_on(0x200);
        d.free(p, 0x100).expect("free");
        assert_eq!(sim.device_syncs(), 1);
    }

    #[test]
    fn the_memory_fraction_limits_the_bytes_held() {
        let (d, _) = device(64 * MIB, &[("arena.extend_strategy", "1")]);
        d.set_memory_fraction(0.25).expect("fraction");
        assert_eq!(d.limit(), Some(16 * MIB));
        let p = d.alloc(12 * MIB, 0).expect("fits").expect("addr");
        let e = d
            .alloc(8 * MIB, 0)
            .expect_err("20 MiB held would pass the limit");
        assert_eq!(e.code(), "ERR_ARENA_OUT_OF_MEMORY");
        assert!(
            d.stats().total_allocated <= 16 * MIB,
            "the failed call held nothing more"
        );
        d.free(p, 0).expect("free");
        let q = d
            .alloc(16 * MIB, 0)
            .expect("idle memory went back to make room")
            .expect("addr");
        d.free(q, 0).expect("free");
    }

    #[test]
    fn a_fraction_outside_zero_to_one_is_refused_and_changes_nothing() {
        let (d, _) = device(64 * MIB, &[]);
        for f in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let e = d.set_memory_fraction(f).expect_err("out of range");
            assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
        }
        assert_eq!(d.limit(), None);
    }

    #[test]
    fn empty_cache_returns_idle_memory() {
        let (d, _) = device(1 << 30, &[]);
        let p = d.alloc(8 * MIB, 0).expect("alloc").expect("addr");
        d.free(p, 0).expect("free");
        assert!(d.stats().total_allocated > 0);
        d.empty_cache().expect("shrink");
        assert_eq!(d.stats().total_allocated, 0);
    }

    #[test]
    fn a_failed_allocation_on_a_new_stream_remembers_no_stream() {
        let (d, _) = device(64 * MIB, &[]);
        assert!(d.alloc(1 << 40, 0x300).is_err());
        assert!(d.streams.is_empty());
    }
}
