//! The allocation granule: every request is rounded to it (the arena's bins and the config's
//! sizes alike).

/// log2 of the allocation granule.
pub const MIN_ALLOCATION_BITS: u32 = 8;
/// Every request is rounded up to a multiple of this; every chunk starts at a multiple of it
/// from its region's base.
pub const MIN_ALLOCATION_SIZE: u64 = 1 << MIN_ALLOCATION_BITS;

/// `n` rounded up to a multiple of 256, or `None` if that does not fit in a `u64`.
#[inline]
pub fn round_up_256(n: u64) -> Option<u64> {
    n.checked_add(MIN_ALLOCATION_SIZE - 1)
        .map(|v| v & !(MIN_ALLOCATION_SIZE - 1))
}
