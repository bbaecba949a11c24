//! Chunk surgery at page boundaries in virtual-memory mode: cutting the free run around a
//! mapping into pieces, joining them into the chunk handed out, keeping mapped and unmapped
//! free chunks in their own bins.

use super::*;

impl<S: Source> State<S> {
    /// The chunk containing `addr`, walking from chunk `from` (in the same range) either
    /// way.
    pub(super) fn vm_chunk_at(&self, from: u32, addr: u64) -> u32 {
        let mut id = from;
        loop {
            let c = self.chunks.get(id);
            if addr < c.addr && c.prev != NIL {
                id = c.prev;
            } else if addr >= c.addr + c.size && c.next != NIL {
                id = c.next;
            } else {
                return id;
            }
        }
    }

    /// Cuts free chunk `id` at `at` bytes from its start (`0 < at < size`); both pieces keep
    /// its stream and stay in whichever bins it was in. Returns the upper piece.
    pub(super) fn vm_cut(&mut self, id: u32, at: u64) -> u32 {
        let c = *self.chunks.get(id);
        let unmapped = c.stream == UNMAPPED;
        self.vm_unbin(id, unmapped);
        let rest_id = self.cut_links(id, at);
        self.vm_bin(id, unmapped);
        self.vm_bin(rest_id, unmapped);
        rest_id
    }

    pub(super) fn vm_unbin(&mut self, id: u32, unmapped: bool) {
        if unmapped {
            if let Some(p) = self.source.pages_mut() {
                p.unmapped.remove(id);
            }
        } else {
            self.bins.remove(id);
        }
    }

    pub(super) fn vm_bin(&mut self, id: u32, unmapped: bool) {
        let c = *self.chunks.get(id);
        if unmapped {
            if let Some(p) = self.source.pages_mut() {
                p.unmapped.insert(id, c.size, c.addr);
            }
        } else {
            let class = self.class_of(c.region);
            self.bins.insert_class(id, c.size, c.addr, class);
        }
    }

    /// The free chunks tiling exactly `[lo, hi)`, cutting the ones at either end, starting
    /// the search at chunk `from`.
    pub(super) fn vm_pieces(&mut self, from: u32, lo: u64, hi: u64) -> Vec<u32> {
        let mut id = self.vm_chunk_at(from, lo);
        let c = *self.chunks.get(id);
        if c.addr < lo {
            id = self.vm_cut(id, lo - c.addr);
        }
        let mut pieces = Vec::new();
        loop {
            let c = *self.chunks.get(id);
            if c.addr + c.size > hi {
                self.vm_cut(id, hi - c.addr);
            }
            pieces.push(id);
            let c = self.chunks.get(id);
            if c.addr + c.size >= hi || c.next == NIL {
                return pieces;
            }
            id = c.next;
        }
    }

    /// Joins the free chunks `pieces` (adjacent, in address order, all in the same bins)
    /// into the first, which leaves the bins and gets `stream`. Returns it.
    pub(super) fn vm_join(&mut self, pieces: &[u32], stream: StreamId) -> u32 {
        let Some((&first, rest)) = pieces.split_first() else {
            return NIL;
        };
        for &id in pieces {
            let unmapped = self.chunks.get(id).stream == UNMAPPED;
            self.vm_unbin(id, unmapped);
        }
        for &id in rest {
            self.merge(first, id);
        }
        let c = self.chunks.get_mut(first);
        c.stream = stream;
        c.sync_id = 0;
        first
    }

    /// Puts free chunk `id` (in no bins) back, merged with the neighbours its tag merges
    /// with, and returns the chunk it ended up in.
    pub(super) fn vm_settle(&mut self, id: u32) -> u32 {
        let mut id = id;
        let unmapped = self.chunks.get(id).stream == UNMAPPED;
        let next = self.chunks.get(id).next;
        if next != NIL && self.mergeable(id, next) {
            self.vm_unbin(next, unmapped);
            self.merge(id, next);
        }
        let prev = self.chunks.get(id).prev;
        if prev != NIL && self.mergeable(prev, id) {
            self.vm_unbin(prev, unmapped);
            self.merge(prev, id);
            id = prev;
        }
        self.vm_bin(id, unmapped);
        id
    }

    /// Pages `[m0, m1)` of range `slot`, in one unmapped chunk, are mapped now: they become a
    /// mapped free chunk (no stream). Returns the chunk holding `m0`.
    pub(super) fn vm_mark_mapped(&mut self, slot: u32, m0: u64, m1: u64) -> u32 {
        let holder = self.source.pages().and_then(|p| {
            p.find_unmapped(|id| {
                let c = self.chunks.get(id);
                c.region == slot && c.addr <= m0 && m1 <= c.addr + c.size
            })
        });
        let Some(holder) = holder else {
            return NIL;
        };
        let pieces = self.vm_pieces(holder, m0, m1);
        let id = self.vm_join(&pieces, 0);
        if let Some(p) = self.source.pages_mut() {
            let mut at = m0;
            while at < m1 {
                let n = p.unit.min(m1 - at);
                p.pages.set_run(slot, at, n, true);
                at += n;
            }
            self.stats.total_allocated += m1 - m0;
            self.stats.num_arena_extensions = p.pages.extents();
        }
        self.vm_settle(id)
    }

    /// Makes `[w0, w1)`, covered by mapped free chunks the caller may take (one of them
    /// `near`), one free chunk in the bins with no stream, and returns it.
    pub(super) fn vm_carve(&mut self, near: u32, w0: u64, w1: u64) -> u32 {
        let pieces = self.vm_pieces(near, w0, w1);
        let id = self.vm_join(&pieces, 0);
        self.vm_bin(id, false);
        id
    }
}
