//! Bookkeeping shared by the simulated backends: limits, live blocks and counters.

use super::{DeviceLimits, RawStats};
use crate::types::error::{ArenaError, Result};
use std::collections::HashMap;

#[derive(Debug)]
pub(crate) struct SimDevice {
    limits: DeviceLimits,
    /// Live blocks: address → size.
    live: HashMap<u64, u64>,
    stats: RawStats,
}

impl SimDevice {
    pub(crate) fn new(limits: DeviceLimits) -> Self {
        SimDevice {
            limits,
            live: HashMap::new(),
            stats: RawStats::default(),
        }
    }

    /// Checks `size` against the limits; a refusal is counted.
    pub(crate) fn admit(&mut self, size: u64) -> Result<()> {
        let reason = if size == 0 {
            return Err(ArenaError::invalid_argument("a raw allocation of 0 bytes"));
        } else if size > self.limits.max_allocation {
            format!(
                "the device's largest allocation is {} bytes",
                self.limits.max_allocation
            )
        } else if size > self.limits.total_memory - self.stats.raw_bytes_outstanding {
            format!(
                "the device has {} of {} bytes free",
                self.limits.total_memory - self.stats.raw_bytes_outstanding,
                self.limits.total_memory
            )
        } else {
            return Ok(());
        };
        Err(self.refuse(size, reason))
    }

    /// Counts a refusal found after admission (the backing allocator said no).
    pub(crate) fn refuse(&mut self, size: u64, reason: String) -> ArenaError {
        self.stats.raw_failures += 1;
        ArenaError::oom(size, reason)
    }

    pub(crate) fn record_alloc(&mut self, addr: u64, size: u64) {
        self.live.insert(addr, size);
        self.stats.raw_allocs += 1;
        self.stats.raw_bytes_outstanding += size;
    }

    /// Checks that `addr` is a live block of `size` bytes, without changing anything.
    pub(crate) fn check_free(&self, addr: u64, size: u64) -> Result<()> {
        match self.live.get(&addr) {
            Some(&s) if s == size => Ok(()),
            Some(&s) => Err(ArenaError::unknown_pointer(
                addr,
                format!("raw block is {s} bytes, free was given {size}"),
            )),
            None => Err(ArenaError::unknown_pointer(addr, "not a live raw block")),
        }
    }

    pub(crate) fn record_free(&mut self, addr: u64, size: u64) {
        self.live.remove(&addr);
        self.stats.raw_frees += 1;
        self.stats.raw_bytes_outstanding -= size;
    }

    /// Checks that `len` more bytes may be mapped (virtual-memory form): the device's total
    /// counts, its largest allocation does not (the memory comes one granule at a time).
    pub(crate) fn admit_mapped(&mut self, len: u64) -> Result<()> {
        let free = self.limits.total_memory - self.stats.raw_bytes_outstanding;
        if len > free {
            return Err(self.refuse(
                len,
                format!(
                    "the device has {free} of {} bytes free",
                    self.limits.total_memory
                ),
            ));
        }
        Ok(())
    }

    /// Counts a map of `len` bytes: one raw allocation.
    pub(crate) fn record_map(&mut self, len: u64) {
        self.stats.count_map(len);
    }

    /// Counts an unmap of `len` bytes: one raw free.
    pub(crate) fn record_unmap(&mut self, len: u64) {
        self.stats.count_unmap(len);
    }

    /// The device's size.
    pub(crate) fn total_memory(&self) -> u64 {
        self.limits.total_memory
    }

    /// Checks that `[addr, addr + len)` lies inside one live block.
    pub(crate) fn check_range(&self, addr: u64, len: u64) -> Result<()> {
        let inside = self.live.iter().any(|(&base, &size)| {
            addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + size)
        });
        if inside {
            Ok(())
        } else {
            Err(ArenaError::unknown_pointer(
                addr,
                format!("{len} bytes from here are not inside one live raw block"),
            ))
        }
    }

    pub(crate) fn stats(&self) -> RawStats {
        RawStats {
            free: Some(self.limits.total_memory - self.stats.raw_bytes_outstanding),
            total: Some(self.limits.total_memory),
            ..self.stats
        }
    }

    /// Every live block, for teardown.
    pub(crate) fn blocks(&self) -> Vec<(u64, u64)> {
        self.live.iter().map(|(&a, &s)| (a, s)).collect()
    }
}
