//! Which sub-arena owns an address: every region and every reserve of an arena, by address
//! range, with the sub-arena that holds it (`sub_arenas.rs`).
//!
//! A free on the thread that allocated never looks here: it tries its own sub-arena first. The
//! directory answers the rest (a pointer freed, copied into or asked about from another
//! thread), so it is read far more often than it changes (regions come and go with growth and
//! shrinking, and move between sub-arenas when a thread's are idle) and a read lock suffices.
//! Entries never overlap: the raw allocator hands out disjoint ranges. Each also names the
//! sub-arena that grew it (its home), which takes it back when it needs it (issue 25).

use parking_lot::RwLock;

/// Address ranges → sub-arena index; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    /// `(base, end, sub, home)`, ascending by base, disjoint.
    ranges: RwLock<Vec<(u64, u64, u32, u32)>>,
}

impl Directory {
    /// Records that `[base, base + size)` belongs to sub-arena `sub`.
    pub(crate) fn insert(&self, base: u64, size: u64, sub: u32) {
        let mut r = self.ranges.write();
        let at = r.partition_point(|e| e.0 < base);
        r.insert(at, (base, base.saturating_add(size), sub, sub));
    }

    /// Records that the range starting at `base` now belongs to sub-arena `sub`; its home.
    pub(crate) fn move_to(&self, base: u64, sub: u32) -> Option<u32> {
        let mut r = self.ranges.write();
        let i = r.binary_search_by_key(&base, |e| e.0).ok()?;
        r[i].2 = sub;
        Some(r[i].3)
    }

    /// The sub-arena holding the range starting at `base`, and its home.
    pub(crate) fn owner_and_home(&self, base: u64) -> Option<(u32, u32)> {
        let r = self.ranges.read();
        let i = r.binary_search_by_key(&base, |e| e.0).ok()?;
        Some((r[i].2, r[i].3))
    }

    /// Forgets the range starting at `base`.
    pub(crate) fn remove(&self, base: u64) {
        let mut r = self.ranges.write();
        if let Ok(i) = r.binary_search_by_key(&base, |e| e.0) {
            r.remove(i);
        }
    }

    /// The sub-arena owning the range that contains `addr`.
    pub(crate) fn owner(&self, addr: u64) -> Option<u32> {
        let r = self.ranges.read();
        let i = r.partition_point(|e| e.0 <= addr).checked_sub(1)?;
        let (_, end, sub, _) = r[i];
        (addr < end).then_some(sub)
    }

    /// Forgets everything.
    pub(crate) fn clear(&self) {
        self.ranges.write().clear();
    }

    /// Every range, for the invariant check.
    pub(crate) fn entries(&self) -> Vec<(u64, u64, u32)> {
        self.ranges.read().iter().map(|e| (e.0, e.1, e.2)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_belongs_to_the_range_that_contains_it() {
        let d = Directory::default();
        d.insert(0x1000, 0x1000, 3);
        d.insert(0x4000, 0x100, 5);
        assert_eq!(d.owner(0x1000), Some(3));
        assert_eq!(d.owner(0x1fff), Some(3));
        assert_eq!(d.owner(0x2000), None);
        assert_eq!(d.owner(0x40ff), Some(5));
        assert_eq!(d.owner(0xfff), None);
        assert_eq!(d.move_to(0x4000, 7), Some(5), "its home");
        assert_eq!(d.owner_and_home(0x4000), Some((7, 5)));
        assert_eq!(d.owner(0x4010), Some(7));
        d.remove(0x1000);
        assert_eq!(d.owner(0x1800), None);
        assert_eq!(d.owner(0x4000), Some(7));
    }

    #[test]
    fn a_range_at_the_top_of_the_address_space_does_not_wrap() {
        let d = Directory::default();
        d.insert(u64::MAX - 255, 256, 1);
        assert_eq!(d.owner(u64::MAX - 1), Some(1));
        assert_eq!(d.owner(0), None);
    }
}
