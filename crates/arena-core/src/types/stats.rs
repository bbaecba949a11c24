//! Allocator statistics with ONNX Runtime's `GetStats` key names.

/// `GetStats` keys in ONNX Runtime's emission order. Every key is always present
/// (DESIGN decision 1).
pub const STATS_KEYS: [&str; 11] = [
    "Limit",
    "InUse",
    "RequestedInUse",
    "TotalAllocated",
    "ReservedBytes",
    "MaxInUse",
    "NumAllocs",
    "NumReserves",
    "NumArenaExtensions",
    "NumArenaShrinkages",
    "MaxAllocSize",
];

/// Counters of one allocator. Byte counts are exact; "chunk" sizes are 256-rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocatorStats {
    /// `max_mem`, or -1 when unlimited.
    pub limit: i64,
    /// Bytes handed out: chunk sizes of live allocations plus live reserves.
    pub in_use: u64,
    /// Bytes asked for by live allocations and reserves (no rounding).
    pub requested_in_use: u64,
    /// Bytes held from the raw allocator: regions plus reserves.
    pub total_allocated: u64,
    /// Bytes of live reserves.
    pub reserved_bytes: u64,
    /// High-water mark of `in_use`.
    pub max_in_use: u64,
    /// Successful allocations and reserves, ever.
    pub num_allocs: u64,
    /// Successful reserves, ever.
    pub num_reserves: u64,
    /// Regions currently held (extensions minus regions released).
    pub num_arena_extensions: u64,
    /// Regions released by shrinking (mempool: shrink calls).
    pub num_arena_shrinkages: u64,
    /// Largest chunk or reserve handed out.
    pub max_alloc_size: u64,
}

impl AllocatorStats {
    /// Fresh stats for an allocator limited to `max_mem` bytes (`u64::MAX`: unlimited).
    pub fn with_limit(max_mem: u64) -> Self {
        let limit = if max_mem == u64::MAX {
            -1
        } else {
            i64::try_from(max_mem).unwrap_or(i64::MAX)
        };
        AllocatorStats {
            limit,
            ..Default::default()
        }
    }

    /// The value of one key of [`STATS_KEYS`], as ONNX Runtime prints it.
    pub fn get(&self, key: &str) -> Option<String> {
        let v = match key {
            "Limit" => return Some(self.limit.to_string()),
            "InUse" => self.in_use,
            "RequestedInUse" => self.requested_in_use,
            "TotalAllocated" => self.total_allocated,
            "ReservedBytes" => self.reserved_bytes,
            "MaxInUse" => self.max_in_use,
            "NumAllocs" => self.num_allocs,
            "NumReserves" => self.num_reserves,
            "NumArenaExtensions" => self.num_arena_extensions,
            "NumArenaShrinkages" => self.num_arena_shrinkages,
            "MaxAllocSize" => self.max_alloc_size,
            _ => return None,
        };
        Some(v.to_string())
    }

    /// All keys with decimal values, in [`STATS_KEYS`] order.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        STATS_KEYS
            .iter()
            .map(|&k| (k, self.get(k).unwrap_or_default()))
            .collect()
    }

    /// Accounts for `bytes` handed out (chunk size or reserve size), `requested` of them asked
    /// for: `InUse`, `RequestedInUse`, `NumAllocs`, `MaxInUse`, `MaxAllocSize`.
    pub fn add_in_use(&mut self, bytes: u64, requested: u64) {
        self.in_use += bytes;
        self.requested_in_use += requested;
        self.num_allocs += 1;
        self.max_in_use = self.max_in_use.max(self.in_use);
        self.max_alloc_size = self.max_alloc_size.max(bytes);
    }

    /// Accounts for a free of what [`AllocatorStats::add_in_use`] counted.
    pub fn remove_in_use(&mut self, bytes: u64, requested: u64) {
        self.in_use -= bytes;
        self.requested_in_use -= requested;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlimited_is_minus_one() {
        assert_eq!(AllocatorStats::with_limit(u64::MAX).limit, -1);
        assert_eq!(AllocatorStats::with_limit(1 << 20).limit, 1 << 20);
        assert_eq!(AllocatorStats::with_limit(u64::MAX - 1).limit, i64::MAX);
    }

    #[test]
    fn every_key_is_emitted_even_before_any_allocation() {
        let pairs = AllocatorStats::with_limit(u64::MAX).to_pairs();
        let keys: Vec<&str> = pairs.iter().map(|p| p.0).collect();
        assert_eq!(keys, STATS_KEYS);
        assert_eq!(pairs[0].1, "-1");
    }
}
