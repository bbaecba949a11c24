//! A hash map keyed by device addresses, with a hasher suited to them: addresses are
//! multiples of 256, so the default SipHash is wasted work and a plain modulo would collide.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hashing, folded so both the low bits (bucket index) and the high bits
/// (hashbrown's tag) depend on every address bit.
#[derive(Debug, Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        let h = (n ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `HashMap` from address to `V`.
pub type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;
