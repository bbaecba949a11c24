//! Where a sub-arena's memory comes from: the one thing the arena's two modes differ in, as a
//! type. A sub-arena ([`State`](super::State)) is generic over its source, so each mode's
//! paths are compiled apart: the region mode's have no page check at all, and the
//! virtual-memory mode's none of the "is there a page table?" tests a shared build asked on
//! every allocation and free (issue 25). The modes themselves are a few lines in `modes.rs`
//! that pick one.
//!
//! - [`Regions`]: ONNX Runtime's regions, each a raw allocation that stays whole until it is
//!   wholly free (`regions.rs`); chunks of different streams never merge.
//! - [`Paged`]: ranges of reserved addresses whose pages are mapped when a
//!   chunk first needs them and unmapped when surplus (`vm.rs` and `vm/`); a free chunk of no
//!   stream merges into a stream's free neighbour.

use super::vm::Paged;
use crate::streams::stream::StreamId;
use std::fmt::Debug;

/// A sub-arena's source of memory (see the module docs).
pub(crate) trait Source: Clone + Debug + Send + Sync + 'static {
    /// Pages mapped on demand inside reserved ranges (the virtual-memory mode): unmapped free
    /// memory is tagged [`UNMAPPED`](super::vm::UNMAPPED), free memory of no stream merges into
    /// a stream's free neighbour, and the dead bytes of chunks handed out whole are counted.
    const PAGED: bool;

    /// The page table and policy, for the paged source; `None` (a constant) for regions.
    fn pages(&self) -> Option<&Paged>;

    /// As [`Source::pages`], to change them.
    fn pages_mut(&mut self) -> Option<&mut Paged>;

    /// The class of bins (the pool) a request of `rounded` bytes is fitted from.
    fn class_for(&self, rounded: u64) -> u8;

    /// The class of bins the free chunks of region `slot` are in.
    fn class_of(&self, slot: u32) -> u8;

    /// Whether adjacent free chunks of streams `a` and `b` (0: no stream) merge.
    fn streams_merge(a: StreamId, b: StreamId) -> bool;
}

/// The region mode's source: regions are raw allocations, listed in the sub-arena's own
/// region set; there is nothing more to hold.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Regions;

impl Source for Regions {
    const PAGED: bool = false;

    #[inline(always)]
    fn pages(&self) -> Option<&Paged> {
        None
    }

    #[inline(always)]
    fn pages_mut(&mut self) -> Option<&mut Paged> {
        None
    }

    /// One class: ORT's bins.
    #[inline(always)]
    fn class_for(&self, _rounded: u64) -> u8 {
        0
    }

    #[inline(always)]
    fn class_of(&self, _slot: u32) -> u8 {
        0
    }

    /// ORT's rule: only chunks of one stream.
    #[inline(always)]
    fn streams_merge(a: StreamId, b: StreamId) -> bool {
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::super::vm::UNMAPPED;
    use super::*;

    #[test]
    fn regions_merge_only_free_chunks_of_one_stream() {
        assert!(Regions::streams_merge(0, 0));
        assert!(Regions::streams_merge(3, 3));
        assert!(!Regions::streams_merge(0, 3));
        assert!(!Regions::streams_merge(3, 0));
        assert!(!Regions::streams_merge(3, 4));
    }

    #[test]
    fn pages_merge_no_stream_into_a_stream_but_unmapped_only_with_unmapped() {
        assert!(Paged::streams_merge(0, 3));
        assert!(Paged::streams_merge(3, 0));
        assert!(!Paged::streams_merge(3, 4));
        assert!(Paged::streams_merge(UNMAPPED, UNMAPPED));
        assert!(!Paged::streams_merge(0, UNMAPPED));
        assert!(!Paged::streams_merge(UNMAPPED, 0));
        assert!(!Paged::streams_merge(3, UNMAPPED));
    }

    #[test]
    fn regions_have_one_class_of_bins() {
        assert_eq!(Regions.class_for(256), 0);
        assert_eq!(Regions.class_for(u64::MAX - 255), 0);
        assert_eq!(Regions.class_of(7), 0);
        assert!(Regions.pages().is_none());
    }
}
