//! What a sub-arena shows of itself: its memory log (regions, chunks, bins) and the walk that
//! checks every invariant, for tests and debugging.

use super::*;

impl<S: Source> State<S> {
    pub(crate) fn log(&self) -> MemoryLog {
        let regions: Vec<RegionLog> = match self.source.pages() {
            Some(_) => self.vm_log_regions(),
            None => self.region_logs(),
        };
        self.log_with(regions)
    }

    pub(super) fn region_logs(&self) -> Vec<RegionLog> {
        self.regions
            .iter()
            .map(|(_, r)| {
                let mut chunks = Vec::new();
                let mut id = r.first_chunk;
                while id != NIL {
                    let c = self.chunks.get(id);
                    chunks.push(chunk_log(c));
                    id = c.next;
                }
                RegionLog {
                    id: r.id,
                    base: r.base,
                    size: r.size,
                    chunks,
                }
            })
            .collect()
    }

    /// The run of chunks the memory log shows from the chunk that starts at `addr`: that
    /// chunk, the free chunks after it and the first in-use one after those, within the log's
    /// region ([`MemoryLog::chunks_from`]); an unmapped chunk (virtual-memory mode) ends a
    /// log region. `None` when no chunk the log shows starts at `addr`.
    pub(crate) fn chunks_from(&self, addr: u64) -> Option<Vec<ChunkLog>> {
        // A free chunk is found by walking its region (free chunks are indexed by size).
        let mut c = match self.live.get(addr) {
            Some(id) => self.chunks.get(id),
            None => self.chunk_containing(addr).filter(|c| c.addr == addr)?,
        };
        let mut run = Vec::new();
        while c.stream != vm::UNMAPPED {
            run.push(chunk_log(c));
            if (c.in_use && run.len() > 1) || c.next == NIL {
                break;
            }
            c = self.chunks.get(c.next);
        }
        (!run.is_empty()).then_some(run)
    }

    pub(super) fn log_with(&self, regions: Vec<RegionLog>) -> MemoryLog {
        let mut bins: Vec<BinLog> = (0..NUM_BINS)
            .map(|b| BinLog {
                bin_size: bin_size(b),
                chunks: 0,
                in_use_chunks: 0,
                bytes: 0,
                in_use_bytes: 0,
                requested_bytes: 0,
            })
            .collect();
        for c in regions.iter().flat_map(|r| &r.chunks) {
            let b = &mut bins[bin_for_size(c.size)];
            b.chunks += 1;
            b.bytes += c.size;
            if c.in_use {
                b.in_use_chunks += 1;
                b.in_use_bytes += c.size;
                b.requested_bytes += c.requested_size;
            }
        }
        bins.retain(|b| b.chunks > 0);
        let mut reserves: Vec<ReserveLog> = self
            .reserves
            .iter()
            .map(|(&addr, &size)| ReserveLog { addr, size })
            .collect();
        reserves.sort_by_key(|r| r.addr);
        MemoryLog {
            regions,
            reserves,
            bins,
            stats: self.stats,
        }
    }

    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        self.bins.check()?;
        let (mut in_use, mut requested, mut held, mut free_chunks, mut live_chunks) =
            (0, 0, 0, 0, 0);
        let (mut dead, mut foreign) = (0, 0);
        let mut hosted_in_use = std::collections::BTreeMap::new();
        for (slot, r) in self.regions.iter() {
            let mut expect_addr = r.base;
            let mut prev = NIL;
            let mut id = r.first_chunk;
            while id != NIL {
                let c = self.chunks.get(id);
                if c.addr != expect_addr
                    || c.prev != prev
                    || c.region != slot
                    || c.size == 0
                    || !c.size.is_multiple_of(256)
                {
                    return Err(format!(
                        "region {} is not tiled correctly at chunk {id}: {c:?}",
                        r.id
                    ));
                }
                if c.in_use {
                    if self.bins.contains(id) || self.live.get(c.addr) != Some(id) {
                        return Err(format!(
                            "in-use chunk {id} is in a bin or missing from the address table"
                        ));
                    }
                    if c.requested_size == 0 || c.requested_size > c.size {
                        return Err(format!(
                            "chunk {id} has requested size {}",
                            c.requested_size
                        ));
                    }
                    live_chunks += 1;
                    in_use += c.size;
                    foreign += if c.foreign { c.size } else { 0 };
                    requested += c.requested_size;
                    if self.hosted.contains(c.stream) {
                        *hosted_in_use.entry(c.stream).or_insert(0u64) += 1;
                    }
                    if S::PAGED {
                        dead += c
                            .size
                            .saturating_sub(round_up_256(c.requested_size).unwrap_or(c.size));
                    }
                } else {
                    // Unmapped free memory (virtual-memory mode) has bins of its own.
                    let unmapped = c.stream == vm::UNMAPPED;
                    let binned = if unmapped {
                        self.vm_holds_unmapped(id)
                    } else {
                        self.bins.contains(id)
                    };
                    if !binned || self.live.get(c.addr).is_some() {
                        return Err(format!(
                            "free chunk {id} is not in a bin, or is in the address table"
                        ));
                    }
                    if c.next != NIL && self.mergeable(id, c.next) && !self.kept_apart(id, c.next) {
                        let n = self.chunks.get(c.next);
                        return Err(format!(
                            "free chunks {id} and {} of one stream are not merged (streams {} \
                             and {}, hosted {} and {})",
                            c.next,
                            c.stream,
                            n.stream,
                            self.hosted.contains(c.stream),
                            self.hosted.contains(n.stream)
                        ));
                    }
                    let hosted = self.hosted.contains(c.stream);
                    if c.foreign {
                        return Err(format!(
                            "free chunk {id} is marked handed to another thread"
                        ));
                    }
                    if hosted && c.sync_id == 0 {
                        return Err(format!(
                            "free chunk {id} of host stream {} carries no mark of its free",
                            c.stream
                        ));
                    }
                    free_chunks += u64::from(!unmapped);
                }
                expect_addr = c.addr + c.size;
                prev = id;
                id = c.next;
            }
            if expect_addr != r.base + r.size {
                return Err(format!("region {} chunks end at {expect_addr:#x}", r.id));
            }
            held += r.size;
        }
        if foreign != self.foreign_in_use {
            return Err(format!(
                "chunks handed to other threads hold {foreign} bytes, the count says {}",
                self.foreign_in_use
            ));
        }
        let mut extents = self.regions.len() as u64;
        if S::PAGED {
            (held, extents) = self.vm_check()?;
        }
        let reserved: u64 = self.reserves.values().sum();
        let s = &self.stats;
        let checks = [
            (
                "in-use chunks in the address table",
                self.live.len() as u64,
                live_chunks,
            ),
            ("free chunks in bins", self.bins.len() as u64, free_chunks),
            ("InUse", s.in_use, in_use + reserved),
            ("RequestedInUse", s.requested_in_use, requested + reserved),
            ("TotalAllocated", s.total_allocated, held + reserved),
            ("ReservedBytes", s.reserved_bytes, reserved),
            ("NumArenaExtensions", s.num_arena_extensions, extents),
            (
                "dead bytes of chunks handed out whole",
                self.dead_bytes,
                dead,
            ),
        ];
        for (what, got, want) in checks {
            if got != want {
                return Err(format!("{what} is {got}, the chunks add up to {want}"));
            }
        }
        if s.max_in_use < s.in_use {
            return Err("MaxInUse is below InUse".into());
        }
        for (id, counted) in self.hosted.in_use_counts() {
            let chunks = hosted_in_use.get(&id).copied().unwrap_or(0);
            if counted != chunks {
                return Err(format!(
                    "host stream {id} counts {counted} chunks in use, the chunks {chunks}"
                ));
            }
        }
        Ok(())
    }
}

/// What the memory log says of chunk `c`.
pub(super) fn chunk_log(c: &Chunk) -> ChunkLog {
    ChunkLog {
        addr: c.addr,
        size: c.size,
        requested_size: c.requested_size,
        in_use: c.in_use,
        stream: (c.stream != 0).then_some(c.stream),
        sync_id: c.sync_id,
        alloc_id: c.in_use.then_some(c.alloc_id),
    }
}
