//! A structured snapshot of an allocator's memory: regions, their chunks, reserves, a
//! per-bin summary and the stats. What ONNX Runtime's `DumpMemoryLog` prints, as data.

use crate::types::stats::AllocatorStats;

/// One chunk of a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkLog {
    /// First byte.
    pub addr: u64,
    /// Bytes covered.
    pub size: u64,
    /// Bytes asked for (0 while free).
    pub requested_size: u64,
    /// Handed out.
    pub in_use: bool,
    /// Stream that last took it, if any.
    pub stream: Option<u64>,
    /// That stream's sync id when it took the chunk.
    pub sync_id: u64,
    /// Allocation ordinal while in use.
    pub alloc_id: Option<u64>,
}

/// One region and its chunks in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionLog {
    /// Extension ordinal.
    pub id: u64,
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// Chunks tiling the region, lowest address first.
    pub chunks: Vec<ChunkLog>,
}

/// A live reserve (a dedicated raw allocation outside the bins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveLog {
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
}

/// Chunks of one bin's size class (free and in use, as ORT's dump groups them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinLog {
    /// Smallest chunk size of the class.
    pub bin_size: u64,
    /// Chunks in the class.
    pub chunks: u64,
    /// Of which in use.
    pub in_use_chunks: u64,
    /// Bytes of all chunks in the class.
    pub bytes: u64,
    /// Bytes of in-use chunks.
    pub in_use_bytes: u64,
    /// Bytes requested by in-use chunks.
    pub requested_bytes: u64,
}

/// The whole picture.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryLog {
    /// Regions by ascending base address.
    pub regions: Vec<RegionLog>,
    /// Reserves by ascending address.
    pub reserves: Vec<ReserveLog>,
    /// Non-empty size classes, smallest first.
    pub bins: Vec<BinLog>,
    /// The stats at the same instant.
    pub stats: AllocatorStats,
}

impl MemoryLog {
    /// The log of an allocator without regions: every live block, as `(address, size)`,
    /// listed as a reserve, by address.
    pub fn from_blocks(blocks: impl Iterator<Item = (u64, u64)>, stats: AllocatorStats) -> Self {
        let mut reserves: Vec<ReserveLog> = blocks
            .map(|(addr, size)| ReserveLog { addr, size })
            .collect();
        reserves.sort_by_key(|r| r.addr);
        MemoryLog {
            regions: Vec::new(),
            reserves,
            bins: Vec::new(),
            stats,
        }
    }

    /// Every in-use chunk as `(addr, size, requested_size)`, by address.
    pub fn live_chunks(&self) -> Vec<(u64, u64, u64)> {
        self.regions
            .iter()
            .flat_map(|r| r.chunks.iter())
            .filter(|c| c.in_use)
            .map(|c| (c.addr, c.size, c.requested_size))
            .collect()
    }

    /// The run of chunks that starts at `addr`: that chunk, the free chunks after it, and the
    /// first in-use chunk after those, within its region; `None` when no chunk starts at
    /// `addr`. What [`crate::Allocator::chunks_from`] answers.
    pub fn chunks_from(&self, addr: u64) -> Option<Vec<ChunkLog>> {
        let r = self
            .regions
            .iter()
            .find(|r| addr >= r.base && addr - r.base < r.size)?;
        let first = r.chunks.iter().position(|c| c.addr == addr)?;
        let rest = &r.chunks[first + 1..];
        let end = rest
            .iter()
            .position(|c| c.in_use)
            .map_or(rest.len(), |i| i + 1);
        Some(r.chunks[first..first + 1 + end].to_vec())
    }
}
