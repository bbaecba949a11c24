//! Chunks: contiguous pieces of a region, free or handed out, in a slab indexed by id.

use crate::arena::free_list::NIL;
use crate::streams::stream::StreamId;

/// One piece of a region. Chunks of a region tile it exactly, linked in address order.
/// Aligned to a cache line, which it fills: a chunk read is one line, not two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(align(64))]
pub struct Chunk {
    /// First byte; region base plus a multiple of 256.
    pub addr: u64,
    /// Bytes covered, a multiple of 256 (what `InUse` counts).
    pub size: u64,
    /// Bytes the user asked for; 0 while free.
    pub requested_size: u64,
    /// The chunk just below in the same region, or `NIL`.
    pub prev: u32,
    /// The chunk just above in the same region, or `NIL`.
    pub next: u32,
    /// Slot of the owning region.
    pub region: u32,
    /// Handed out (true) or in a bin (false).
    pub in_use: bool,
    /// Handed out to a thread other than its sub-arena's, from a sub-arena that was idle
    /// (virtual-memory mode, `bfc/vm/paths.rs`); false while free.
    pub foreign: bool,
    /// Stream that last took this chunk, 0 for none. Kept after a free: the memory may still
    /// be in use by work queued on that stream.
    pub stream: StreamId,
    /// The stream's sync id when it took the chunk; another stream may reuse the chunk once
    /// it has waited on a later event of that stream.
    pub sync_id: u64,
    /// Ordinal of the allocation holding it (for logs); meaningless while free.
    pub alloc_id: u64,
}

const _: () = assert!(
    std::mem::size_of::<Chunk>() == 64,
    "a chunk is one cache line"
);

/// Chunks by id; ids of removed chunks are reused.
#[derive(Debug, Default)]
pub struct ChunkSlab {
    chunks: Vec<Chunk>,
    vacant: Vec<u32>,
}

impl ChunkSlab {
    /// Stores `chunk`, returning its id.
    pub fn insert(&mut self, chunk: Chunk) -> u32 {
        if let Some(id) = self.vacant.pop() {
            self.chunks[id as usize] = chunk;
            id
        } else {
            self.chunks.push(chunk);
            u32::try_from(self.chunks.len() - 1).unwrap_or(NIL)
        }
    }

    /// Frees id `id` for reuse.
    pub fn remove(&mut self, id: u32) {
        self.vacant.push(id);
    }

    /// The chunk with id `id`.
    #[inline]
    pub fn get(&self, id: u32) -> &Chunk {
        &self.chunks[id as usize]
    }

    /// The chunk with id `id`, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Chunk {
        &mut self.chunks[id as usize]
    }
}
