//! The arena's virtual-memory mode: where pages get mapped and unmapped. The chunks, bins,
//! streams and stats are the arena's own (one code path with the region mode); what differs
//! is where a chunk's memory comes from.
//!
//! - The regions are address ranges reserved from the [`VirtualMemory`] (the device's total
//!   memory by default), so free space coalesces across what used to be region boundaries; a
//!   second range is reserved only when a request fits in no free space of the ranges held.
//! - Free memory is of two kinds. Mapped free chunks are in the bins, as in the region mode,
//!   so allocating from mapped memory and freeing are the region mode's paths, with no page
//!   check and no driver call. Unmapped free memory (whole pages) is held by free chunks
//!   tagged with the stream [`UNMAPPED`], which no stream takes and which merge only with
//!   each other, indexed by bins of their own.
//! - When no mapped free chunk fits, the arena maps pages: it picks the unmapped chunk, with
//!   the mapped free neighbours the stream may take, that needs the fewest new pages (lowest
//!   address among equals), maps them, and joins the pieces into the chunk handed out.
//! - Mapped memory may grow past the peak of chunk bytes in use since the last shrink by
//!   `arena.vm_peak_headroom_percent`; a mapping that would pass that first unmaps wholly
//!   free pages elsewhere, highest addresses first. So held memory stays within the headroom
//!   of the live peak however fragmented the address space gets, and a warm arena, whose
//!   mapped pages cover its peak, maps nothing.
//! - `arena.vm_unmap_threshold_bytes`, when set, bounds free memory kept mapped: a free that
//!   leaves more unmaps wholly free pages down to it, so held memory follows live memory.
//! - Decision 7: a mapping the device refuses unmaps every other wholly free page and tries
//!   once more; `shrink` unmaps every wholly free page and gives back idle ranges.
//!
//! Stats: `TotalAllocated` is bytes mapped (plus reserves), `NumArenaExtensions` the mapped
//! extents (maximal runs of mapped pages, the memory log's regions) and `NumArenaShrinkages`
//! counts runs of pages unmapped.

mod inspect;
mod paths;
mod pieces;
mod ranges;
mod unmap;

use super::{reusable, Clock, Source, State, StreamId};
use crate::arena::bins::{bin_for_size, NUM_BINS};
use crate::arena::chunks::Chunk;
use crate::arena::free_list::{FreeBins, NIL};
use crate::arena::pages::{PageTable, MAX_RANGE_PAGES};
use crate::raw::VirtualMemory;
use crate::types::config::{keys, ArenaConfig};
use crate::types::error::{ArenaError, Result};
use crate::types::memory_log::RegionLog;

/// The stream tag of unmapped free chunks: no stream is ever given it (stream ids count up
/// from 1), so no stream takes them and they merge only with each other.
pub(super) const UNMAPPED: StreamId = StreamId::MAX;

/// Requests of at most this many bytes (rounded) come from ranges of their own, as
/// PyTorch's small pool: small blocks with long lives would otherwise sit among large free
/// blocks, keep them from merging and pin their pages.
pub(super) const SMALL_POOL_MAX_BYTES: u64 = 1 << 20;
/// The pool of ranges for requests up to [`SMALL_POOL_MAX_BYTES`].
const SMALL: u8 = 1;
/// The pool of ranges for larger requests.
const LARGE: u8 = 0;

/// The page state and policy of an arena in virtual-memory mode.
#[derive(Debug, Clone)]
pub(crate) struct Paged {
    /// Which pages are mapped: exactly those of the chunks not tagged [`UNMAPPED`].
    pages: PageTable,
    /// Most bytes per mapping, whole pages: `arena.vm_map_unit_bytes` (at least a page). On
    /// CUDA a mapping costs nearly the same whatever its size (an H100: one 2 MiB page 35-50
    /// us to map and 29-42 to unmap, 16 pages in one mapping 60-110 and 45-67 in all,
    /// `scripts/gpu/vmm_cost.cpp`), but only a whole mapping can be unmapped, so the free pages
    /// of a mapping partly in use stay mapped; this bounds them.
    unit: u64,
    /// The first stream this sub-arena mapped pages for (0: none yet). Once another stream
    /// maps, `unit` is one page: see [`Paged::note_mapping_stream`].
    first_stream: StreamId,
    /// The headroom was used up when a request last found no mapped free chunk in its pool,
    /// and took one of the other pool: until pages are next mapped within the headroom, a
    /// request that finds none in its own pool takes one of the other on the common path too
    /// (`mixed` ÷ 16 on one thread: 8,200 such misses a pass, each through the slow path).
    pub(super) cross_pool: bool,
    /// Exactly the unmapped free chunks, by size (they are page-aligned whole pages).
    unmapped: FreeBins,
    /// Bytes reserved per range, a multiple of the page size.
    reserve_bytes: u64,
    /// `arena.vm_unmap_threshold_bytes`.
    threshold: Option<u64>,
    /// A free unmaps pages when mapped bytes minus chunk bytes in use pass this: the
    /// threshold, raised to what partly used pages hold after a trim that could not get
    /// below it (so frees scan again only once there is more free memory than that).
    trigger: u64,
    /// `arena.vm_peak_headroom_percent`.
    headroom_percent: u64,
    /// `arena.vm_churn_headroom_percent`: the most the headroom grows to by churn, as a
    /// percentage of the peak in use; mapped memory stays within this of the peak however
    /// the pages churn.
    churn_percent: u64,
    /// Bytes the headroom has grown by since the last shrink: what mappings took back of
    /// pages the headroom had just had unmapped (churn), up to `churn_percent` of the peak
    /// in all.
    slack: u64,
    /// The last runs of pages the headroom had unmapped, `(slot, lo, hi)`, newest last, at
    /// most [`CHURN_WINDOW`].
    evicted: std::collections::VecDeque<(u32, u64, u64)>,
    /// The peak in use when `evicted` was started: runs unmapped under a lower peak were
    /// squeezed out by a cap that has grown since, not by churn.
    evicted_at_peak: u64,
}

impl Source for Paged {
    const PAGED: bool = true;

    #[inline(always)]
    fn pages(&self) -> Option<&Paged> {
        Some(self)
    }

    #[inline(always)]
    fn pages_mut(&mut self) -> Option<&mut Paged> {
        Some(self)
    }

    /// Requests up to [`SMALL_POOL_MAX_BYTES`] from ranges of their own, as PyTorch's small pool.
    #[inline(always)]
    fn class_for(&self, rounded: u64) -> u8 {
        pool_for(rounded)
    }

    /// Its range's pool.
    #[inline(always)]
    fn class_of(&self, slot: u32) -> u8 {
        self.pages.pool(slot)
    }

    /// ORT's rule, and a free chunk of no stream merges with a free neighbour of a stream,
    /// which then covers both: otherwise the no-stream rest of every chunk a stream cut from
    /// fresh memory stays apart from it when it is freed, and the pages both touch can be
    /// neither reused whole nor unmapped. Unmapped chunks merge only with each other.
    #[inline(always)]
    fn streams_merge(a: StreamId, b: StreamId) -> bool {
        a == b || (a == 0 || b == 0) && a != UNMAPPED && b != UNMAPPED
    }
}

/// Chunks in use may hold up to 1/2^DEAD_SHIFT of the bytes in use past their requests (see
/// [`Paged::dead_bytes_budget`]). 11 was chosen on the eight traces of docs/virtual-memory.md:
/// the largest budget that left every trace's held memory the same or lower (10 held more on
/// ResNet-50 training); on mixed it saves 6 % of the instructions and 15 % of the mispredicted
/// branches of a warm pass.
const DEAD_SHIFT: u32 = 11;

/// How many runs of pages unmapped for the headroom are remembered: a mapping of pages
/// among them is churn (the same pages out and back in), and grows the headroom instead.
const CHURN_WINDOW: usize = 64;

/// `pct` percent of `bytes`, rounded down (`u64::MAX` past it). The common path's pool
/// fallback asks this on every miss: a 64-bit product divided by a constant where it fits,
/// not a 128-bit division.
#[inline]
fn percent_of(bytes: u64, pct: u64) -> u64 {
    match bytes.checked_mul(pct) {
        Some(v) => v / 100,
        None => u64::try_from(u128::from(bytes) * u128::from(pct) / 100).unwrap_or(u64::MAX),
    }
}

impl Paged {
    /// The policy of `config` over `vm`. A page size that is not a multiple of the
    /// granularity is `ERR_ARENA_INVALID_CONFIG`.
    pub(super) fn new(vm: &dyn VirtualMemory, config: &ArenaConfig) -> Result<Self> {
        let g = vm.granularity();
        if !g.is_power_of_two() || g < 256 {
            return Err(ArenaError::invalid_argument(format!(
                "the virtual memory of {} has a granularity of {g} bytes, not a power of two of at least 256",
                vm.info()
            )));
        }
        let page = match config.vm_page_size_bytes {
            0 => g,
            p => p,
        };
        if !page.is_power_of_two() || !page.is_multiple_of(g) {
            return Err(ArenaError::InvalidConfig {
                key: keys::VM_PAGE_SIZE_BYTES.into(),
                value: page.to_string(),
                reason: format!(
                    "must be a power of two and a multiple of the granularity of {} ({g} bytes)",
                    vm.info()
                ),
            });
        }
        let reserve = match config.vm_reserve_bytes {
            0 => vm.total_memory(),
            r => r,
        };
        // A range holds at most MAX_RANGE_PAGES pages (a backend's granularity, unlike the
        // page size key, has no upper bound: saturate).
        let reserve = reserve
            .checked_next_multiple_of(page)
            .unwrap_or(u64::MAX - (page - 1))
            .clamp(page, page.saturating_mul(MAX_RANGE_PAGES));
        Ok(Paged {
            pages: PageTable::new(page),
            unit: (config.vm_map_unit_bytes / page * page).max(page),
            first_stream: 0,
            cross_pool: false,
            unmapped: FreeBins::new(),
            reserve_bytes: reserve,
            threshold: config.vm_unmap_threshold_bytes,
            trigger: config.vm_unmap_threshold_bytes.unwrap_or(u64::MAX),
            headroom_percent: config.vm_peak_headroom_percent,
            churn_percent: config.vm_churn_headroom_percent,
            slack: 0,
            evicted: std::collections::VecDeque::new(),
            evicted_at_peak: 0,
        })
    }

    pub(super) fn page(&self) -> u64 {
        self.pages.page_size()
    }

    /// Pages are about to be mapped for stream `consumer`: from the second stream on, one page
    /// per mapping. Streams free in rhythms of their own, and a mapping partly in use by one
    /// stream's memory keeps the free pages of another's mapped: four PyTorch threads, each on
    /// a stream of its own, held 836-1006 MiB at the driver in 64 MiB mappings (expandable
    /// segments: 920), 828-852 in pages (an H200, six and four runs). One stream keeps the
    /// larger mappings, which cost fewer driver calls and, unmapped only whole, churn less
    /// (BERT serving's replay: 584 MiB held so, 610 in pages).
    fn note_mapping_stream(&mut self, consumer: StreamId) {
        match self.first_stream {
            _ if consumer == 0 => {}
            0 => self.first_stream = consumer,
            s if s != consumer => self.unit = self.page(),
            _ => {}
        }
    }

    /// Mapped bytes the headroom allows for a peak of `peak` chunk bytes in use.
    #[inline]
    fn cap(&self, peak: u64) -> u64 {
        let base = percent_of(peak, self.headroom_percent);
        let most = base.max(percent_of(peak, self.churn_percent));
        peak.saturating_add(base.saturating_add(self.slack).min(most))
    }

    /// The most dead bytes (past their rounded sizes) the chunks in use may hold when
    /// `in_use` chunk bytes are in use: `in_use / 2^DEAD_SHIFT` in whole pages (none under
    /// 4 GiB in use at 2 MiB pages), and none where memory is held strictly (the churn
    /// ceiling at or below the peak headroom: `arena.vm_churn_headroom_percent=0`).
    pub(super) fn dead_bytes_budget(&self, in_use: u64) -> u64 {
        if self.churn_percent <= self.headroom_percent {
            return 0;
        }
        // Pages are a power of two (checked where the table is made): a mask, not a division,
        // on this path of every near fit.
        (in_use >> DEAD_SHIFT) & !(self.page() - 1)
    }

    /// Bytes of `[lo, hi)` in range `slot` that the headroom unmapped lately.
    fn evicted_overlap(&self, slot: u32, lo: u64, hi: u64) -> u64 {
        self.evicted
            .iter()
            .filter(|e| e.0 == slot)
            .map(|&(_, a, b)| b.min(hi).saturating_sub(a.max(lo)))
            .sum()
    }

    /// The first unmapped free chunk, in no promised order, for which `pred` is true.
    fn find_unmapped(&self, pred: impl FnMut(u32) -> bool) -> Option<u32> {
        self.unmapped.find_any(pred)
    }
}

/// What a sub-arena mapping pages needs from the rest of the arena.
pub(super) struct Elsewhere<'a> {
    pub(super) config: &'a ArenaConfig,
    /// Bytes the other sub-arenas hold or are obtaining: `arena.max_mem` is one budget.
    pub(super) held: u64,
    /// A new region id, unique across sub-arenas.
    pub(super) region_id: &'a dyn Fn() -> u64,
    /// Mapped bytes this sub-arena may hold whatever its own headroom says: while other
    /// threads' sub-arenas are busy too, what the arena-wide ceiling leaves it (0: none).
    pub(super) cap_floor: u64,
    /// Whether a host stream of another sub-arena has work pending, as its events last said
    /// (asked only when the headroom would unmap): then no unmap waits for the device.
    pub(super) host_work_elsewhere: &'a dyn Fn() -> bool,
}

/// Which free pages an unmapping pass looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Mapped free chunks of at least a page (from the bins): cheap, for the threshold.
    Large,
    /// As `Large`, for the headroom of a mapping for this stream: the runs are remembered as
    /// evicted (churn), and the stream's own pending work on them is waited for. The flag
    /// says whether the device may be waited for as far as the rest of the arena knows: no
    /// host stream of another sub-arena has work pending (it may wait on the caller).
    Headroom(StreamId, bool),
    /// Every run of adjacent mapped free chunks, whatever their streams: for shrink and out
    /// of memory.
    Everything,
}

/// Pages a mapping is for, which an unmapping pass must leave alone: `(slot, lo, hi)`,
/// page-aligned.
type Keep = Option<(u32, u64, u64)>;

/// Where an allocation that needs pages mapped goes.
#[derive(Debug, Clone, Copy)]
struct Plan {
    slot: u32,
    /// The chunk's bytes: `[w0, w0 + rounded)`.
    w0: u64,
    /// The pages to map: `[m0, m1)`, all in one unmapped chunk.
    m0: u64,
    m1: u64,
}

/// The pool serving requests of `rounded` bytes.
#[inline]
fn pool_for(rounded: u64) -> u8 {
    if rounded <= SMALL_POOL_MAX_BYTES {
        SMALL
    } else {
        LARGE
    }
}

/// `x` rounded down to a page boundary of the range at `base` (ranges are aligned to the
/// granularity, not always to the page).
fn floor_to(x: u64, base: u64, page: u64) -> u64 {
    x - (x - base) % page
}

/// `x` rounded up to a page boundary of the range at `base`.
fn ceil_to(x: u64, base: u64, page: u64) -> u64 {
    (x - base)
        .checked_next_multiple_of(page)
        .map_or(u64::MAX, |o| base.saturating_add(o))
}

impl<S: Source> State<S> {
    fn paged(&self) -> Result<&Paged> {
        self.source
            .pages()
            .ok_or_else(|| ArenaError::invalid_argument("internal: the arena has no page table"))
    }

    /// Bytes of chunks in use (reserves are not in the pages).
    fn chunk_bytes_in_use(&self) -> u64 {
        self.stats.in_use - self.stats.reserved_bytes
    }

    /// Chunk bytes in use less the dead bytes of chunks handed out whole: what the peak the
    /// headroom follows counts.
    pub(super) fn requested_chunk_bytes(&self) -> u64 {
        self.chunk_bytes_in_use().saturating_sub(self.dead_bytes)
    }

    /// Mapped bytes here that no chunk in use covers.
    pub(super) fn vm_free_mapped(&self) -> u64 {
        self.held().saturating_sub(self.stats.in_use)
    }

    /// Whether no chunk is in use here but by other threads than this sub-arena's.
    pub(super) fn vm_idle(&self) -> bool {
        self.chunk_bytes_in_use() == self.foreign_in_use
    }

    /// Marks in-use chunk `id` as handed out to another thread than this sub-arena's.
    pub(super) fn mark_foreign(&mut self, id: u32) {
        let c = self.chunks.get_mut(id);
        if !c.foreign {
            c.foreign = true;
            self.foreign_in_use += c.size;
        }
    }

    /// Mapped bytes the headroom allows for a peak of `peak` chunk bytes in use (0 in the
    /// region mode).
    pub(super) fn vm_cap(&self, peak: u64) -> u64 {
        self.source.pages().map_or(0, |p| p.cap(peak))
    }

    /// The most mapped bytes the headroom ever grows to by churn for a peak of `peak`:
    /// `arena.vm_churn_headroom_percent` (or the peak headroom, if larger) over it.
    pub(super) fn vm_ceiling(&self, peak: u64) -> u64 {
        self.source.pages().map_or(0, |p| {
            let pct = p.headroom_percent.max(p.churn_percent);
            peak.saturating_add(percent_of(peak, pct))
        })
    }

    /// `bytes` rounded up to whole pages.
    pub(super) fn vm_pages_for(&self, bytes: u64) -> u64 {
        let page = self.source.pages().map_or(1, Paged::page);
        bytes.saturating_add(page - 1) & !(page - 1)
    }

    /// Unmaps up to `bytes` of this sub-arena's wholly free pages for another sub-arena's
    /// mapping for stream `consumer` (the arena-wide headroom); returns the bytes unmapped.
    /// `device_wait` false: a host stream has work pending somewhere, so no unmap here waits
    /// for the device.
    pub(super) fn vm_unmap_for_another(
        &mut self,
        vm: &dyn VirtualMemory,
        bytes: u64,
        consumer: StreamId,
        device_wait: bool,
    ) -> u64 {
        let before = self.stats.total_allocated;
        // A refused unmap leaves its pages mapped and counted; the next pass tries again.
        let _ = self.vm_unmap_free(vm, None, bytes, Scan::Headroom(consumer, device_wait));
        before - self.stats.total_allocated
    }

    /// The ranges reserved or given back since the last call, as `(base, size, reserved)`.
    pub(super) fn take_range_changes(&mut self) -> Vec<(u64, u64, bool)> {
        std::mem::take(&mut self.range_changes)
    }

    /// Whether free chunk `id` is in the unmapped bins.
    pub(super) fn vm_holds_unmapped(&self, id: u32) -> bool {
        self.source.pages().is_some_and(|p| p.unmapped.contains(id))
    }

    /// No mapped free chunk fits `rounded` bytes: maps the pages of the best place for them
    /// (reserving another range when there is none) and returns the free chunk of exactly
    /// those bytes. Changes nothing on failure, but for pages unmapped on the way (decision
    /// 7).
    pub(super) fn vm_grow_and_find(
        &mut self,
        vm: &dyn VirtualMemory,
        elsewhere: &Elsewhere<'_>,
        rounded: u64,
        size: u64,
        consumer: StreamId,
        clock: Option<&Clock>,
    ) -> Result<u32> {
        let planned = self.vm_plan(rounded, consumer, clock);
        // Mapping pages for it (in a new range when no place is planned) would first unmap
        // free pages elsewhere, the headroom being used up: a mapped free chunk of the other
        // pool, where one fits, costs no driver call. The pools are kept apart only while
        // the headroom has room.
        let page = self.paged()?.page();
        let need = planned.map_or(rounded.saturating_add(page - 1) & !(page - 1), |p| {
            p.m1 - p.m0
        });
        if need > 0 && self.vm_would_unmap(need, rounded, elsewhere.cap_floor) {
            let (chunks, hosted) = (&self.chunks, &self.hosted);
            let any = self.bins.best_fit_any(rounded, |id| {
                reusable(chunks.get(id), consumer, hosted, clock)
            });
            if let Some(id) = any {
                if let Some(p) = self.source.pages_mut() {
                    p.cross_pool = true;
                }
                return Ok(id);
            }
            // A free chunk of another stream, once the device has no work of before left: an
            // unmap for the headroom would wait for the device all the same, and then map
            // pages again (two streams taking turns on one buffer remapped it on every
            // allocation). No pages move.
            let stranded = self.bins.best_fit_any(rounded, |_| true);
            // Never for a host stream's chunk (its events say when it is free), nor past a host
            // stream's pending work, here or in another sub-arena, as for the headroom's
            // unmaps: that work may wait on this caller. Then new pages instead.
            let host = |id: u32| self.hosted.contains(self.chunks.get(id).stream);
            if stranded.is_some_and(|id| !host(id) && !self.hosted.any_incomplete())
                && !(elsewhere.host_work_elsewhere)()
                && vm.synchronize().is_ok()
            {
                self.unknown_work = false;
                // After the wait no free chunk here has work left: every chunk of a stream
                // without events goes back to no stream, so the rest of this turn takes them
                // without a wait each, and an allocation on no stream (which takes only memory
                // of no stream) takes them at all: a stream's turn and one on no stream
                // remapped the memory every turn (`mixed` by turns, 14,000 pages a pass).
                self.untag_after_wait();
                let (chunks, hosted) = (&self.chunks, &self.hosted);
                let any = self.bins.best_fit_any(rounded, |id| {
                    reusable(chunks.get(id), consumer, hosted, clock)
                });
                if let Some(id) = any {
                    return Ok(id);
                }
            }
        }
        if need > 0 && !self.vm_would_unmap(need, rounded, elsewhere.cap_floor) {
            if let Some(p) = self.source.pages_mut() {
                p.cross_pool = false;
            }
        }
        let (plan, new_range) = match planned {
            Some(plan) => (plan, None),
            None => {
                let slot = self.vm_add_range(vm, rounded, size, elsewhere.region_id)?;
                match self.vm_plan(rounded, consumer, clock) {
                    Some(plan) => (plan, Some(slot)),
                    None => {
                        self.vm_drop_range(vm, slot);
                        return Err(ArenaError::oom(
                            size,
                            "no free space fits it even in a newly reserved range",
                        ));
                    }
                }
            }
        };
        let id = match self.vm_map(vm, elsewhere, plan, rounded, size, consumer) {
            Ok(id) => id,
            Err(e) => {
                if let Some(slot) = new_range {
                    self.vm_drop_range(vm, slot);
                }
                return Err(e);
            }
        };
        Ok(self.vm_carve(id, plan.w0, plan.w0 + rounded))
    }

    /// Whether pages for all of `rounded` bytes would pass the headroom (the common path's
    /// cheap stand-in for the slow path's plan).
    pub(super) fn vm_full_for(&self, rounded: u64) -> bool {
        self.vm_would_unmap(self.vm_pages_for(rounded), rounded, 0)
    }

    /// Whether mapping `need` more bytes for a chunk of `rounded` bytes would pass the
    /// headroom over the peak.
    fn vm_would_unmap(&self, need: u64, rounded: u64, floor: u64) -> bool {
        let Some(p) = self.source.pages() else {
            return false;
        };
        let peak = self
            .peak_chunk_bytes
            .max(self.requested_chunk_bytes().saturating_add(rounded));
        p.pages.mapped_bytes().saturating_add(need) > p.cap(peak).max(floor)
    }

    /// The place for `rounded` bytes for stream `consumer` that needs the fewest pages
    /// mapped (lowest address among equals): an unmapped chunk alone, or with the mapped
    /// free chunk just below or above it when the stream may take that. `None` when no
    /// unmapped chunk serves.
    fn vm_plan(&self, rounded: u64, consumer: StreamId, clock: Option<&Clock>) -> Option<Plan> {
        let p = self.source.pages()?;
        let page = p.page();
        // A mapped free neighbour the stream may take joins the span.
        let usable = |id: u32| -> Option<&Chunk> {
            let c = self.chunks.get(id);
            (!c.in_use && c.stream != UNMAPPED && reusable(c, consumer, &self.hosted, clock))
                .then_some(c)
        };
        let pool = pool_for(rounded);
        let mut best: Option<((u64, u64), Plan)> = None;
        p.find_unmapped(|uid| {
            let u = *self.chunks.get(uid);
            if p.pages.pool(u.region) != pool {
                return false;
            }
            let (u0, u1) = (u.addr, u.addr + u.size);
            let below = (u.prev != NIL).then(|| usable(u.prev)).flatten();
            let above = (u.next != NIL).then(|| usable(u.next)).flatten();
            let lo = below.map_or(u0, |c| c.addr);
            let hi = above.map_or(u1, |c| c.addr + c.size);
            if hi - lo < rounded {
                return false;
            }
            // From the bottom of the free span, or up to its top.
            for w0 in [lo, hi - rounded] {
                let w1 = w0 + rounded;
                let base = self.regions.get(u.region).base;
                let (m0, m1) = (
                    floor_to(w0, base, page).max(u0),
                    ceil_to(w1, base, page).min(u1),
                );
                let missing = if m1 > m0 { (m1 - m0) / page } else { 0 };
                let key = (missing, w0);
                if best.as_ref().is_none_or(|b| key < b.0) {
                    best = Some((
                        key,
                        Plan {
                            slot: u.region,
                            w0,
                            m0,
                            m1: m1.max(m0),
                        },
                    ));
                }
            }
            false
        });
        best.map(|b| b.1)
    }
}

#[cfg(test)]
mod tests;
