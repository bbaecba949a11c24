//! Where a virtual-memory sub-arena's memory comes from: reserving address ranges, giving
//! them back, and mapping the pages a plan picked (in units the backend accepts).

use super::*;

impl<S: Source> State<S> {
    /// Reserves a range for at least `rounded` bytes: `arena.vm_reserve_bytes` (the
    /// device's memory), or just enough when that is refused. Returns its region slot; the
    /// range is one unmapped free chunk.
    pub(super) fn vm_add_range(
        &mut self,
        vm: &dyn VirtualMemory,
        rounded: u64,
        size: u64,
        region_id: &dyn Fn() -> u64,
    ) -> Result<u32> {
        let p = self.paged()?;
        let need = rounded.checked_next_multiple_of(p.page()).ok_or_else(|| {
            ArenaError::oom(
                size,
                "the size rounded up to whole pages does not fit in 64 bits",
            )
        })?;
        // More than the device has can never be served, whatever the page size: said first,
        // with no advice that cannot work.
        let device = vm.total_memory();
        if need > device {
            return Err(ArenaError::oom(
                size,
                format!("it is more than the device's {device} bytes of memory"),
            ));
        }
        if need / p.page() > MAX_RANGE_PAGES {
            return Err(ArenaError::oom(
                size,
                format!(
                    "it spans more than {MAX_RANGE_PAGES} pages of {} bytes, the most one range holds; a larger {} serves it",
                    p.page(),
                    keys::VM_PAGE_SIZE_BYTES
                ),
            ));
        }
        let want = p.reserve_bytes.max(need);
        let (base, len) = match vm.reserve(want) {
            Ok(base) => (base, want),
            Err(ArenaError::OutOfMemory { .. }) if want > need => match vm.reserve(need) {
                Ok(base) => (base, need),
                Err(e) => return Err(oom_for(size, "reserving address space", e)),
            },
            Err(e) => return Err(oom_for(size, "reserving address space", e)),
        };
        let slot = self.insert_region(base, len, region_id());
        self.range_changes.push((base, len, true));
        let id = self.regions.get(slot).first_chunk;
        self.bins.remove(id);
        self.chunks.get_mut(id).stream = UNMAPPED;
        if let Some(p) = self.source.pages_mut() {
            p.pages.add_range(slot, base, len, pool_for(rounded));
            p.unmapped.insert(id, len, base);
        }
        Ok(slot)
    }

    /// Gives back range `slot`, which has no chunk in use and nothing mapped.
    pub(super) fn vm_drop_range(&mut self, vm: &dyn VirtualMemory, slot: u32) {
        let r = *self.regions.get(slot);
        if vm.release(r.base, r.size).is_err() {
            // Kept: a range the backend would not take back still tiles correctly.
            return;
        }
        self.range_changes.push((r.base, r.size, false));
        let mut id = r.first_chunk;
        while id != NIL {
            let next = self.chunks.get(id).next;
            self.bins.remove(id);
            if let Some(p) = self.source.pages_mut() {
                p.unmapped.remove(id);
            }
            self.chunks.remove(id);
            id = next;
        }
        self.regions.remove(slot);
        if let Some(p) = self.source.pages_mut() {
            p.pages.remove_range(slot);
        }
    }

    /// Maps the pages `plan` needs, within the budget (`arena.max_mem`) and the headroom
    /// over the peak for stream `consumer`, unmapping free pages elsewhere first where those
    /// say so. Returns the
    /// free chunk that now holds the first mapped page (or `plan.w0` when nothing was
    /// missing).
    pub(super) fn vm_map(
        &mut self,
        vm: &dyn VirtualMemory,
        elsewhere: &Elsewhere<'_>,
        plan: Plan,
        rounded: u64,
        size: u64,
        consumer: StreamId,
    ) -> Result<u32> {
        let page = self.paged()?.page();
        let base = self.regions.get(plan.slot).base;
        let need = plan.m1 - plan.m0;
        let keep = Some((
            plan.slot,
            floor_to(plan.w0, base, page),
            ceil_to(plan.w0 + rounded, base, page),
        ));
        if need > 0 {
            let (config, held_elsewhere) = (elsewhere.config, elsewhere.held);
            // The budget: mapped pages count as held, in every sub-arena.
            let held = self.stats.total_allocated.saturating_add(held_elsewhere);
            if held.saturating_add(need) > config.max_mem {
                let over = held.saturating_add(need) - config.max_mem;
                self.vm_unmap_free(vm, keep, over, Scan::Everything);
                let held = self.stats.total_allocated.saturating_add(held_elsewhere);
                if held.saturating_add(need) > config.max_mem {
                    return Err(ArenaError::oom(
                        size,
                        format!(
                            "mapping {need} more bytes for it would pass arena.max_mem {} ({held} bytes held)",
                            crate::types::config::MaxMem(config.max_mem)
                        ),
                    ));
                }
            }
            // Churn: pages the headroom unmapped lately are wanted back. The headroom grows by
            // them rather than unmapping others in their place.
            let peak_now = self.peak_chunk_bytes;
            if let Some(p) = self.source.pages_mut() {
                if peak_now > p.evicted_at_peak {
                    p.evicted.clear();
                    p.evicted_at_peak = peak_now;
                }
                let back = p.evicted_overlap(plan.slot, plan.m0, plan.m1);
                p.slack = p.slack.saturating_add(back);
            }
            // The headroom: map past the peak only as far as it allows.
            let p = self.paged()?;
            let peak = self
                .peak_chunk_bytes
                .max(self.requested_chunk_bytes().saturating_add(rounded));
            let cap = p.cap(peak).max(elsewhere.cap_floor);
            let mapped = p.pages.mapped_bytes();
            if mapped.saturating_add(need) > cap {
                let device_wait = !(elsewhere.host_work_elsewhere)();
                self.vm_unmap_free(
                    vm,
                    keep,
                    mapped + need - cap,
                    Scan::Headroom(consumer, device_wait),
                );
            }
            if let Some(p) = self.source.pages_mut() {
                p.note_mapping_stream(consumer);
            }
            let unit = self.paged()?.unit;
            let mut got = map_in_units(vm, plan.m0, need, unit);
            if matches!(got, Err(ArenaError::OutOfMemory { .. }))
                // Decision 7: every other wholly free page goes back, then once more.
                && self.vm_unmap_free(vm, keep, u64::MAX, Scan::Everything).0 > 0
            {
                got = map_in_units(vm, plan.m0, need, unit);
            }
            if let Err(e) = got {
                return Err(oom_for(
                    size,
                    &format!("mapping {need} bytes at {:#x}", plan.m0),
                    e,
                ));
            }
            if let Some(p) = self.source.pages_mut() {
                p.trigger = p.threshold.unwrap_or(u64::MAX);
            }
            return Ok(self.vm_mark_mapped(plan.slot, plan.m0, plan.m1));
        }
        // Nothing to map (the span's mapped neighbours hold it): the chunk at w0.
        Ok(self.vm_chunk_at(self.regions.get(plan.slot).first_chunk, plan.w0))
    }
}

/// Maps `[addr, addr + len)` in mappings of at most `unit` bytes, lowest first, one
/// [`VirtualMemory::map`] call each. On failure unmaps what it mapped and returns the error.
/// (Unmapping a whole mapping just made fails only if the driver does; its pages would then
/// stay mapped unknown to the page table, which `check_invariants` reports.)
pub(super) fn map_in_units(vm: &dyn VirtualMemory, addr: u64, len: u64, unit: u64) -> Result<()> {
    let mut at = addr;
    while at < addr + len {
        let n = unit.min(addr + len - at);
        if let Err(e) = vm.map(at, n) {
            let mut back = addr;
            while back < at {
                let m = unit.min(at - back);
                // Mapped just now and never handed out: no work uses them.
                let _ = vm.unmap_idle(back, m);
                back += m;
            }
            // The backend's reason speaks of the moment this piece failed, with the pieces
            // before it mapped: say so, or "0 bytes free" reads as the device's state.
            return Err(match e {
                ArenaError::OutOfMemory { requested, reason } if at > addr => ArenaError::oom(
                    requested,
                    format!(
                        "{reason}, with {} of the {len} bytes mapped already (given back)",
                        at - addr
                    ),
                ),
                e => e,
            });
        }
        at += n;
    }
    Ok(())
}

/// `e` as the out-of-memory error of an allocation of `size` bytes (other errors as they
/// are).
pub(super) fn oom_for(size: u64, what: &str, e: ArenaError) -> ArenaError {
    match e {
        ArenaError::OutOfMemory { reason, .. } => {
            ArenaError::oom(size, format!("{what} for it: {reason}"))
        }
        e => e,
    }
}
