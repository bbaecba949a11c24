//! Size classes: 256-byte rounding and the 21 power-of-two bins of ONNX Runtime's BFC arena.

pub use crate::types::sizes::{round_up_256, MIN_ALLOCATION_BITS, MIN_ALLOCATION_SIZE};

/// Number of bins. Bin `b` holds free chunks of `[256 << b, 256 << (b + 1))` bytes; the last
/// bin has no upper bound.
pub const NUM_BINS: usize = 21;

/// The bin for a chunk of `size` bytes: `min(20, floor(log2(max(size, 256) / 256)))`.
#[inline]
pub fn bin_for_size(size: u64) -> usize {
    let v = (size >> MIN_ALLOCATION_BITS).max(1);
    let log2 = 63 - v.leading_zeros() as usize;
    log2.min(NUM_BINS - 1)
}

/// The smallest size bin `b` holds.
#[inline]
pub fn bin_size(b: usize) -> u64 {
    MIN_ALLOCATION_SIZE << b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_goes_up_to_the_next_multiple_of_256() {
        assert_eq!(round_up_256(0), Some(0));
        assert_eq!(round_up_256(1), Some(256));
        assert_eq!(round_up_256(4), Some(256));
        assert_eq!(round_up_256(256), Some(256));
        assert_eq!(round_up_256(257), Some(512));
        assert_eq!(round_up_256(u64::MAX - 255), Some(u64::MAX - 255));
    }

    #[test]
    fn rounding_that_would_overflow_is_none() {
        assert_eq!(round_up_256(u64::MAX - 254), None);
        assert_eq!(round_up_256(u64::MAX), None);
    }

    #[test]
    fn bins_match_onnx_runtime_boundaries() {
        assert_eq!(bin_for_size(256), 0);
        assert_eq!(bin_for_size(511), 0);
        assert_eq!(bin_for_size(512), 1);
        assert_eq!(bin_for_size(4096), 4);
        assert_eq!(bin_for_size(8192), 5);
        assert_eq!(bin_for_size(1 << 20), 12);
        assert_eq!(bin_for_size(8 << 20), 15);
        assert_eq!(bin_for_size(32 << 20), 17);
        assert_eq!(bin_for_size(256 << 20), 20);
        assert_eq!(bin_for_size(u64::MAX), 20);
    }

    #[test]
    fn every_bin_holds_sizes_from_its_own_size_to_the_next() {
        for b in 0..NUM_BINS {
            assert_eq!(bin_for_size(bin_size(b)), b);
            if b + 1 < NUM_BINS {
                assert_eq!(bin_for_size(bin_size(b + 1) - 1), b);
            }
        }
    }
}
