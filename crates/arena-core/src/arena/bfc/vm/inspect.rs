//! What virtual-memory mode shows of itself: the memory log's regions (maximal runs of mapped
//! pages) and the walk that checks the page table against the chunks.

use super::*;

impl<S: Source> State<S> {
    /// The memory log's regions: each mapped extent with its chunks (unmapped free chunks
    /// separate the extents).
    pub(in crate::arena::bfc) fn vm_log_regions(&self) -> Vec<RegionLog> {
        let Some(p) = self.source.pages() else {
            return Vec::new();
        };
        let shift = p.page().trailing_zeros();
        let mut out = Vec::new();
        for (_, r) in self.regions.iter() {
            let mut id = r.first_chunk;
            let mut extent: Option<RegionLog> = None;
            while id != NIL {
                let c = self.chunks.get(id);
                if c.stream == UNMAPPED {
                    out.extend(extent.take());
                } else {
                    let e = extent.get_or_insert_with(|| RegionLog {
                        id: (r.id << 32) | ((c.addr - r.base) >> shift),
                        base: c.addr,
                        size: 0,
                        chunks: Vec::new(),
                    });
                    e.size += c.size;
                    e.chunks.push(crate::arena::bfc::inspect::chunk_log(c));
                }
                id = c.next;
            }
            out.extend(extent);
        }
        out
    }

    /// Invariants of the pages: the counts match the bits; unmapped free chunks are whole
    /// unmapped pages and every other chunk lies in mapped pages; the backend counts what the
    /// arena mapped. Returns `(mapped bytes, extents)`.
    pub(in crate::arena::bfc) fn vm_check(&self) -> std::result::Result<(u64, u64), String> {
        let p = self.paged().map_err(|e| e.to_string())?;
        let page = p.page();
        let (bytes, extents) = p.pages.recount();
        if (bytes, extents) != (p.pages.mapped_bytes(), p.pages.extents()) {
            return Err(format!(
                "the page table says {} bytes in {} extents, its bits {bytes} in {extents}",
                p.pages.mapped_bytes(),
                p.pages.extents()
            ));
        }
        let mut unmapped_chunks = 0;
        for (slot, r) in self.regions.iter() {
            let mut id = r.first_chunk;
            while id != NIL {
                let c = self.chunks.get(id);
                if c.stream == UNMAPPED {
                    unmapped_chunks += 1;
                    if c.in_use
                        || !(c.addr - r.base).is_multiple_of(page)
                        || !c.size.is_multiple_of(page)
                        || p.pages.unmapped_pages(slot, c.addr, c.size) != c.size / page
                        || self.bins.contains(id)
                    {
                        return Err(format!(
                            "unmapped chunk {id} at {:#x} (+{}) is not whole unmapped pages out of the bins",
                            c.addr, c.size
                        ));
                    }
                } else if !p.pages.all_mapped(slot, c.addr, c.size) || p.unmapped.contains(id) {
                    return Err(format!(
                        "chunk {id} at {:#x} (+{}) lies in part in unmapped pages",
                        c.addr, c.size
                    ));
                }
                id = c.next;
            }
        }
        if unmapped_chunks != p.unmapped.len() {
            return Err(format!(
                "{} chunks in the unmapped bins, {unmapped_chunks} unmapped chunks",
                p.unmapped.len()
            ));
        }
        p.unmapped.check()?;
        p.pages.check_starts()?;
        // What the backend has mapped is every sub-arena's: `SubArenas::check` compares.
        Ok((bytes, extents))
    }

    /// Bytes of pages this sub-arena has mapped (0 in the region mode).
    pub(crate) fn vm_mapped_bytes(&self) -> u64 {
        self.source.pages().map_or(0, |p| p.pages.mapped_bytes())
    }
}
