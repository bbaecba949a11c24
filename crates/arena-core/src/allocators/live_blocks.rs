//! The live allocations of an allocator that hands out whole blocks (the plain allocator,
//! the pool stand-in and the CUDA memory pool): address → size and a tag (the stream a block
//! was allocated on, or whether it is a reserve). One place for the lookups they share, so
//! all of them report a foreign pointer or an out-of-range copy with the same code and words.
//! The arena keeps its own chunk table instead.

use crate::allocators::allocator::{out_of_range, range_inside};
use crate::collections::addr_map::AddrMap;
use crate::types::error::{ArenaError, Result};
use crate::types::memory_log::MemoryLog;
use crate::types::stats::AllocatorStats;

/// Live blocks of one allocator; see the module docs.
#[derive(Debug)]
pub struct LiveBlocks<T> {
    blocks: AddrMap<(u64, T)>,
    /// What errors name as the owner, e.g. `this memory pool`.
    owner: &'static str,
}

impl<T: Copy> LiveBlocks<T> {
    /// An empty set; `owner` is how errors name the allocator (`this allocator`).
    pub fn new(owner: &'static str) -> Self {
        LiveBlocks {
            blocks: AddrMap::default(),
            owner,
        }
    }

    /// Records a block handed out at `addr`.
    pub fn insert(&mut self, addr: u64, size: u64, tag: T) {
        self.blocks.insert(addr, (size, tag));
    }

    /// The size and tag of the block at `addr`, or `ERR_ARENA_UNKNOWN_POINTER` (DESIGN decision 8).
    pub fn get(&self, addr: u64) -> Result<(u64, T)> {
        self.blocks.get(&addr).copied().ok_or_else(|| {
            ArenaError::unknown_pointer(addr, format!("not a live allocation of {}", self.owner))
        })
    }

    /// Forgets the block at `addr`, returning its size and tag; `ERR_ARENA_UNKNOWN_POINTER` when
    /// there is none.
    pub fn remove(&mut self, addr: u64) -> Result<(u64, T)> {
        let found = self.get(addr)?;
        self.blocks.remove(&addr);
        Ok(found)
    }

    /// The tag of the block that holds all of `[addr, addr+len)`, or `ERR_ARENA_UNKNOWN_POINTER`
    /// when no single live block does.
    pub fn containing(&self, addr: u64, len: u64) -> Result<T> {
        self.blocks
            .iter()
            .find(|(&base, &(size, _))| range_inside(addr, len, base, size))
            .map(|(_, &(_, tag))| tag)
            .ok_or_else(|| out_of_range(addr, len, self.owner))
    }

    /// Changes every block tagged `from` to `to`.
    pub fn retag(&mut self, from: T, to: T)
    where
        T: PartialEq,
    {
        for (_, tag) in self.blocks.values_mut() {
            if *tag == from {
                *tag = to;
            }
        }
    }

    /// `(address, size, tag)` of every live block, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, T)> + '_ {
        self.blocks.iter().map(|(&a, &(s, t))| (a, s, t))
    }

    /// Empties the set, yielding `(address, size, tag)` of every block it held.
    pub fn drain(&mut self) -> impl Iterator<Item = (u64, u64, T)> + '_ {
        self.blocks.drain().map(|(a, (s, t))| (a, s, t))
    }

    /// The memory log of these blocks under `stats`.
    pub fn log(&self, stats: AllocatorStats) -> MemoryLog {
        MemoryLog::from_blocks(self.iter().map(|(a, s, _)| (a, s)), stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: ArenaError) -> &'static str {
        e.code()
    }

    #[test]
    fn a_removed_block_is_no_longer_found() {
        let mut live = LiveBlocks::new("this allocator");
        live.insert(0x1000, 256, 7u64);
        assert_eq!(live.remove(0x1000).ok(), Some((256, 7)));
        assert_eq!(
            live.get(0x1000).map_err(code),
            Err("ERR_ARENA_UNKNOWN_POINTER")
        );
    }

    #[test]
    fn a_range_must_lie_inside_one_block() {
        let mut live = LiveBlocks::new("this allocator");
        live.insert(0x1000, 256, 1u64);
        live.insert(0x1100, 256, 2u64);
        assert_eq!(live.containing(0x1100, 256).ok(), Some(2));
        // Spans two adjacent blocks: no single block holds it.
        assert_eq!(
            live.containing(0x10f0, 32).map_err(code),
            Err("ERR_ARENA_UNKNOWN_POINTER")
        );
        assert_eq!(
            live.containing(u64::MAX, 2).map_err(code),
            Err("ERR_ARENA_UNKNOWN_POINTER")
        );
    }

    #[test]
    fn errors_name_the_owner() {
        let live: LiveBlocks<()> = LiveBlocks::new("this memory pool");
        let msg = live
            .get(0x42)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("this memory pool"), "{msg}");
    }
}
