//! Maps from device addresses to small values.
//!
//! [`AddrTable`] finds the in-use chunk at an address on every free: open addressing with
//! linear probing and backward-shift deletion over addresses that are multiples of 256,
//! hashed by Fibonacci multiplication. An insert and a remove cost a few nanoseconds where a
//! general-purpose hash map costs twenty, and its memory follows the live allocations (a
//! per-region table indexed by address, ORT's approach, is faster still when warm but
//! touches a fresh page for most allocations in a cold arena).
//! [`AddrMap`] is the general-purpose map for the rarely used lookups.

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

/// Address 0 marks an empty slot; no allocator hands it out.
const EMPTY: u64 = 0;
const MIN_LOG2: u32 = 6;

/// Non-zero address → `u32`, as described in the module docs.
#[derive(Debug, Clone)]
pub struct AddrTable {
    /// `(address, value)`; address 0 marks an empty slot.
    slots: Vec<(u64, u32)>,
    /// `64 - log2(capacity)`: the hash's top bits pick the home slot.
    shift: u32,
    len: usize,
}

impl Default for AddrTable {
    fn default() -> Self {
        Self::with_log2(MIN_LOG2)
    }
}

impl AddrTable {
    fn with_log2(log2: u32) -> Self {
        AddrTable {
            slots: vec![(EMPTY, 0); 1 << log2],
            shift: 64 - log2,
            len: 0,
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        ((key >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The value for `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                return Some(v);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Sets `key` (non-zero, not present) to `value`.
    #[inline(always)]
    pub fn insert(&mut self, key: u64, value: u32) {
        debug_assert!(key != EMPTY && self.get(key).is_none());
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut i = self.home(key);
        while self.slots[i].0 != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = (key, value);
        self.len += 1;
    }

    /// Removes `key`, returning its value.
    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                break;
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
        let value = self.slots[i].1;
        // Backward shift: pull later entries of the probe run into the hole when their home
        // slot does not lie cyclically in (hole, their slot].
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let entry = self.slots[j];
            if entry.0 == EMPTY {
                break;
            }
            let h = self.home(entry.0);
            let stays = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !stays {
                self.slots[i] = entry;
                i = j;
            }
        }
        self.slots[i].0 = EMPTY;
        self.len -= 1;
        Some(value)
    }

    #[cold]
    fn grow(&mut self) {
        let log2 = 64 - self.shift + 1;
        let old = std::mem::replace(self, Self::with_log2(log2));
        for (k, v) in old.slots {
            if k != EMPTY {
                self.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_hash_map_under_random_inserts_and_removes() {
        let mut t = AddrTable::default();
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut x = 88172645463325252u64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, many collisions in their low bits.
            let key = 0x1000_0000 + (x % 3000) * 256 * 1024;
            if x.is_multiple_of(3) {
                assert_eq!(t.remove(key), model.remove(&key), "step {step}");
            } else if let std::collections::hash_map::Entry::Vacant(e) = model.entry(key) {
                e.insert(step);
                t.insert(key, step);
            }
            assert_eq!(t.get(key), model.get(&key).copied());
        }
        assert_eq!(t.len(), model.len());
        for (&k, &v) in &model {
            assert_eq!(t.get(k), Some(v));
        }
    }

    #[test]
    fn zero_is_never_a_key() {
        let mut t = AddrTable::default();
        assert_eq!(t.get(0), None);
        assert_eq!(t.remove(0), None);
        assert_eq!(t.len(), 0);
    }
}
