//! Which pages of an arena's reserved ranges are mapped, in virtual-memory mode: one bit per
//! page per range, with the mapped bytes and the number of mapped extents (maximal runs of
//! mapped pages, what the memory log shows as regions) kept as pages change.
//!
//! A bitmap rather than a set of runs: the arena asks "is all of this chunk mapped?" on its
//! common path, and for a chunk within one page that is one bit test. Ranges are indexed by
//! the slot of the region that stands for them in the arena's `RegionSet`.
//!
//! A second bitmap marks where each mapping starts (what one map call mapped, a *unit*: the
//! pages from its start up to the next start or unmapped page), because only whole mappings
//! can be unmapped (CUDA cannot unmap part of one).

/// Most pages in one range: its two bitmaps are then 2 MiB each, and a walk over a range's
/// pages (a mapping's bits, an invariant check) stays bounded, whatever the page size and
/// reserve the config asks for. At 2 MiB pages one range spans 32 TiB.
pub(crate) const MAX_RANGE_PAGES: u64 = 1 << 24;

/// Mapped pages of the arena's reserved ranges.
#[derive(Debug, Clone)]
pub(crate) struct PageTable {
    /// log2 of the page size.
    shift: u32,
    /// By region slot.
    ranges: Vec<Option<RangePages>>,
    mapped_bytes: u64,
    extents: u64,
}

#[derive(Debug, Clone)]
struct RangePages {
    base: u64,
    /// Pages in the range.
    pages: u64,
    /// Which pool of the arena the range serves (the arena's meaning; 0 or 1).
    pool: u8,
    /// Bit `p` set iff page `p` is mapped.
    bits: Vec<u64>,
    /// Bit `p` set iff page `p` is mapped and a mapping starts there.
    starts: Vec<u64>,
}

/// Bit `p` of a bitmap.
#[inline]
fn bit(words: &[u64], p: u64) -> bool {
    words[(p / 64) as usize] & (1 << (p % 64)) != 0
}

/// Sets or clears bit `p` of a bitmap.
fn set_bit(words: &mut [u64], p: u64, on: bool) {
    let (w, b) = ((p / 64) as usize, p % 64);
    if on {
        words[w] |= 1 << b;
    } else {
        words[w] &= !(1 << b);
    }
}

impl RangePages {
    #[inline]
    fn get(&self, p: u64) -> bool {
        bit(&self.bits, p)
    }

    fn set(&mut self, p: u64, on: bool) {
        set_bit(&mut self.bits, p, on);
    }

    #[inline]
    fn starts_at(&self, p: u64) -> bool {
        bit(&self.starts, p)
    }

    fn set_start(&mut self, p: u64, on: bool) {
        set_bit(&mut self.starts, p, on);
    }

    /// The first page in `from..to` where a mapping starts.
    fn next_start(&self, from: u64, to: u64) -> Option<u64> {
        let mut p = from;
        while p < to {
            let w = self.starts[(p / 64) as usize] >> (p % 64);
            if w != 0 {
                let q = p + u64::from(w.trailing_zeros());
                return (q < to).then_some(q);
            }
            p = (p / 64 + 1) * 64;
        }
        None
    }

    /// The last page in `from..=to` where a mapping starts.
    fn prev_start(&self, from: u64, to: u64) -> Option<u64> {
        let mut p = to;
        loop {
            let w = self.starts[(p / 64) as usize] << (63 - p % 64);
            if w != 0 {
                let q = p - u64::from(w.leading_zeros());
                return (q >= from).then_some(q);
            }
            let word_start = p / 64 * 64;
            if word_start <= from || word_start == 0 {
                return None;
            }
            p = word_start - 1;
        }
    }

    /// Whether pages `first..=last` are all mapped.
    #[inline]
    fn all(&self, first: u64, last: u64) -> bool {
        let (fw, lw) = (first / 64, last / 64);
        let lo_mask = !0u64 << (first % 64);
        let hi_mask = !0u64 >> (63 - last % 64);
        if fw == lw {
            let m = lo_mask & hi_mask;
            return self.bits[fw as usize] & m == m;
        }
        self.bits[fw as usize] & lo_mask == lo_mask
            && self.bits[(fw + 1) as usize..lw as usize]
                .iter()
                .all(|&w| w == !0)
            && self.bits[lw as usize] & hi_mask == hi_mask
    }

    /// Runs `(first, count)` of pages in `first..=last` that are (`mapped`) or are not mapped.
    fn runs(&self, first: u64, last: u64, mapped: bool) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut p = first;
        while p <= last {
            if self.get(p) != mapped {
                p += 1;
                continue;
            }
            let start = p;
            while p <= last && self.get(p) == mapped {
                p += 1;
            }
            out.push((start, p - start));
        }
        out
    }
}

impl PageTable {
    /// No ranges; pages of `page_size` bytes (a power of two).
    pub(crate) fn new(page_size: u64) -> Self {
        PageTable {
            shift: page_size.trailing_zeros(),
            ranges: Vec::new(),
            mapped_bytes: 0,
            extents: 0,
        }
    }

    /// Bytes per page.
    #[inline]
    pub(crate) fn page_size(&self) -> u64 {
        1 << self.shift
    }

    /// Bytes mapped in all ranges.
    #[inline]
    pub(crate) fn mapped_bytes(&self) -> u64 {
        self.mapped_bytes
    }

    /// Maximal runs of mapped pages in all ranges.
    pub(crate) fn extents(&self) -> u64 {
        self.extents
    }

    /// A range of `size` bytes (a multiple of the page size) at `base`, nothing mapped,
    /// standing for region slot `slot`, serving pool `pool`.
    pub(crate) fn add_range(&mut self, slot: u32, base: u64, size: u64, pool: u8) {
        let pages = size >> self.shift;
        let slot = slot as usize;
        if self.ranges.len() <= slot {
            self.ranges.resize_with(slot + 1, || None);
        }
        self.ranges[slot] = Some(RangePages {
            base,
            pages,
            pool,
            bits: vec![0; pages.div_ceil(64) as usize],
            starts: vec![0; pages.div_ceil(64) as usize],
        });
    }

    /// Forgets the range of region slot `slot` (nothing may be mapped in it).
    pub(crate) fn remove_range(&mut self, slot: u32) {
        if let Some(r) = self.ranges.get_mut(slot as usize) {
            *r = None;
        }
    }

    /// The pool region slot `slot`'s range serves (`u8::MAX` for no range).
    #[inline]
    pub(crate) fn pool(&self, slot: u32) -> u8 {
        self.range(slot).map_or(u8::MAX, |r| r.pool)
    }

    #[inline]
    fn range(&self, slot: u32) -> Option<&RangePages> {
        self.ranges.get(slot as usize).and_then(Option::as_ref)
    }

    /// Pages `(first, last)` of range `r` overlapping `[addr, addr + len)`, `len > 0`.
    #[inline]
    fn span(&self, r: &RangePages, addr: u64, len: u64) -> (u64, u64) {
        (
            (addr - r.base) >> self.shift,
            (addr + len - 1 - r.base) >> self.shift,
        )
    }

    /// Whether every page overlapping `[addr, addr + len)` (`len > 0`, inside the range of
    /// region slot `slot`) is mapped.
    #[inline]
    pub(crate) fn all_mapped(&self, slot: u32, addr: u64, len: u64) -> bool {
        let Some(r) = self.range(slot) else {
            return false;
        };
        let (first, last) = self.span(r, addr, len);
        if first == last {
            return r.get(first);
        }
        r.all(first, last)
    }

    /// How many pages overlapping `[addr, addr + len)` (`len > 0`) are not mapped.
    pub(crate) fn unmapped_pages(&self, slot: u32, addr: u64, len: u64) -> u64 {
        let Some(r) = self.range(slot) else {
            return len.div_ceil(self.page_size());
        };
        let (first, last) = self.span(r, addr, len);
        (first..=last).filter(|&p| !r.get(p)).count() as u64
    }

    /// Every mapped extent of region slot `slot`'s range, as `(address, bytes)`, lowest first.
    pub(crate) fn extents_of(&self, slot: u32) -> Vec<(u64, u64)> {
        match self.range(slot) {
            Some(r) if r.pages > 0 => r
                .runs(0, r.pages - 1, true)
                .into_iter()
                .map(|(p, n)| (r.base + (p << self.shift), n << self.shift))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Marks the page-aligned run `[addr, addr + len)` of slot `slot`'s range, which is
    /// wholly in the other state, as mapped (`on`: one mapping) or not (`off`: whole
    /// mappings).
    pub(crate) fn set_run(&mut self, slot: u32, addr: u64, len: u64, on: bool) {
        let shift = self.shift;
        let Some(r) = self.ranges.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let first = (addr - r.base) >> shift;
        let count = len >> shift;
        let last = first + count - 1;
        let left = first > 0 && r.get(first - 1);
        let right = last + 1 < r.pages && r.get(last + 1);
        for p in first..=last {
            r.set(p, on);
            r.set_start(p, on && p == first);
        }
        let neighbours = u64::from(left) + u64::from(right);
        if on {
            self.mapped_bytes += len;
            // A new run joins 0, 1 or 2 extents: 1 − neighbours more extents in all.
            self.extents = self.extents + 1 - neighbours;
        } else {
            self.mapped_bytes -= len;
            self.extents = self.extents + neighbours - 1;
        }
    }

    /// The whole mappings within the page-aligned `[lo, hi)` of slot `slot`'s range, all of
    /// it mapped: `[a, b)` from the first mapping that starts in it to the end of the last
    /// that ends in it, or `None` when no mapping lies wholly inside.
    pub(crate) fn whole_mappings(&self, slot: u32, lo: u64, hi: u64) -> Option<(u64, u64)> {
        let r = self.range(slot)?;
        let (first, end) = ((lo - r.base) >> self.shift, (hi - r.base) >> self.shift);
        let a = r.next_start(first, end)?;
        // A mapping that runs on past `hi` is left out: the one holding page `end`, if that
        // page is mapped and no mapping starts there.
        let b = if end < r.pages && r.get(end) && !r.starts_at(end) {
            r.prev_start(a, end - 1).filter(|&s| s > a).unwrap_or(a)
        } else {
            end
        };
        (b > a).then(|| (r.base + (a << self.shift), r.base + (b << self.shift)))
    }

    /// The highest address in `[floor, addr]` of slot `slot`'s range where a mapping starts
    /// (`floor` when none does).
    pub(crate) fn mapping_start_at_or_below(&self, slot: u32, addr: u64, floor: u64) -> u64 {
        let Some(r) = self.range(slot) else {
            return floor;
        };
        let (lo, p) = (
            (floor - r.base) >> self.shift,
            (addr - r.base) >> self.shift,
        );
        r.prev_start(lo, p)
            .map_or(floor, |s| r.base + (s << self.shift))
    }

    /// Checks the mapping starts: only on mapped pages, and on every mapped page after an
    /// unmapped one (or at the range's start).
    pub(crate) fn check_starts(&self) -> Result<(), String> {
        for r in self.ranges.iter().flatten() {
            for p in 0..r.pages {
                let opens = r.get(p) && (p == 0 || !r.get(p - 1));
                if (r.starts_at(p) && !r.get(p)) || (opens && !r.starts_at(p)) {
                    return Err(format!(
                        "page {p} of the range at {:#x}: mapped {}, a mapping starts there {}",
                        r.base,
                        r.get(p),
                        r.starts_at(p)
                    ));
                }
            }
        }
        Ok(())
    }

    /// `(mapped bytes, extents)` counted from the bits, for invariant checks.
    pub(crate) fn recount(&self) -> (u64, u64) {
        let (mut bytes, mut extents) = (0, 0);
        for r in self.ranges.iter().flatten() {
            if r.pages == 0 {
                continue;
            }
            for (_, n) in r.runs(0, r.pages - 1, true) {
                bytes += n << self.shift;
                extents += 1;
            }
        }
        (bytes, extents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;

    #[test]
    fn extents_join_and_split_as_pages_change() {
        let mut t = PageTable::new(P);
        t.add_range(0, 0x100_0000, 200 * P, 0);
        let at = |p: u64| 0x100_0000 + p * P;
        t.set_run(0, at(10), 2 * P, true);
        t.set_run(0, at(13), P, true);
        assert_eq!((t.mapped_bytes(), t.extents()), (3 * P, 2));
        t.set_run(0, at(12), P, true);
        assert_eq!((t.mapped_bytes(), t.extents()), (4 * P, 1));
        t.set_run(0, at(11), P, false);
        assert_eq!((t.mapped_bytes(), t.extents()), (3 * P, 2));
        assert_eq!(t.recount(), (3 * P, 2));
        assert_eq!(t.extents_of(0), vec![(at(10), P), (at(12), 2 * P)]);
    }

    #[test]
    fn only_whole_mappings_are_offered_for_unmapping() {
        let mut t = PageTable::new(P);
        t.add_range(0, 0x100_0000, 400 * P, 0);
        let at = |p: u64| 0x100_0000 + p * P;
        // Mappings [10, 14), [14, 20), [20, 21), [100, 300) (across words of the bitmaps).
        for (p, n) in [(10, 4), (14, 6), (20, 1), (100, 200)] {
            t.set_run(0, at(p), n * P, true);
        }
        t.check_starts().expect("consistent");
        assert_eq!(t.whole_mappings(0, at(10), at(21)), Some((at(10), at(21))));
        assert_eq!(t.whole_mappings(0, at(11), at(21)), Some((at(14), at(21))));
        assert_eq!(t.whole_mappings(0, at(10), at(19)), Some((at(10), at(14))));
        assert_eq!(t.whole_mappings(0, at(11), at(19)), None);
        assert_eq!(t.whole_mappings(0, at(100), at(299)), None);
        assert_eq!(
            t.whole_mappings(0, at(100), at(300)),
            Some((at(100), at(300)))
        );
        assert_eq!(t.mapping_start_at_or_below(0, at(19), at(10)), at(14));
        assert_eq!(t.mapping_start_at_or_below(0, at(13), at(11)), at(11));
        assert_eq!(t.mapping_start_at_or_below(0, at(250), at(12)), at(100));
        t.set_run(0, at(14), 7 * P, false);
        t.check_starts().expect("consistent after an unmap");
        assert_eq!(t.whole_mappings(0, at(10), at(14)), Some((at(10), at(14))));
    }

    #[test]
    fn mapped_tests_cover_every_page_a_span_touches() {
        let mut t = PageTable::new(P);
        t.add_range(3, 0x100_0000, 300 * P, 1);
        assert_eq!((t.pool(3), t.pool(4)), (1, u8::MAX));
        let at = |p: u64| 0x100_0000 + p * P;
        t.set_run(3, at(60), 80 * P, true);
        assert!(t.all_mapped(3, at(60), 80 * P));
        assert!(t.all_mapped(3, at(63) + 5, 256));
        assert!(
            !t.all_mapped(3, at(60) - 256, 512),
            "starts in the page below"
        );
        assert!(!t.all_mapped(3, at(139) + 256, P), "ends in the page above");
        assert!(!t.all_mapped(4, at(60), 256), "no such range");
        assert_eq!(t.unmapped_pages(3, at(58), 84 * P - 1), 4);
        assert_eq!(t.unmapped_pages(3, at(61) + 9, 3 * P), 0);
    }
}
