//! `ArenaConfig`: the arena's knobs, parsed strictly from ONNX Runtime's `arena.*` keys.
//!
//! Values are whole decimal integers: digits only, no sign, no spaces, no trailing text
//! (DESIGN decision 2). Every rejection names the key, the value and the reason; an
//! unknown `arena.*` key names the nearest known one. Keys outside `arena.` are ignored.

use crate::types::error::{ArenaError, Result};
use crate::types::sizes::round_up_256;

/// How the arena grows when no free chunk fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendStrategy {
    /// `arena.extend_strategy=0`: regions double in size up to `max_power_of_two_extend_bytes`.
    NextPowerOfTwo,
    /// `arena.extend_strategy=1`: each region is exactly the rounded request.
    SameAsRequested,
}

/// Default `arena.extend_strategy`.
pub const DEFAULT_EXTEND_STRATEGY: ExtendStrategy = ExtendStrategy::NextPowerOfTwo;
/// Default `arena.initial_chunk_size_bytes`: 1 MiB.
pub const DEFAULT_INITIAL_CHUNK_SIZE_BYTES: u64 = 1 << 20;
/// Default `arena.max_dead_bytes_per_chunk`: 128 MiB.
pub const DEFAULT_MAX_DEAD_BYTES_PER_CHUNK: u64 = 128 << 20;
/// Default `arena.initial_growth_chunk_size_bytes`: 2 MiB.
pub const DEFAULT_INITIAL_GROWTH_CHUNK_SIZE_BYTES: u64 = 2 << 20;
/// Default `arena.max_power_of_two_extend_bytes`: 1 GiB.
pub const DEFAULT_MAX_POWER_OF_TWO_EXTEND_BYTES: u64 = 1 << 30;
/// Default `arena.max_mem`: unlimited.
pub const DEFAULT_MAX_MEM: u64 = u64::MAX;
/// Default `arena.cuda_mempool_bytes_to_keep_on_shrink`: trim everything unused.
pub const DEFAULT_CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK: u64 = 0;
/// Default `arena.vm_peak_headroom_percent` (see [`ArenaConfig::vm_peak_headroom_percent`]).
pub const DEFAULT_VM_PEAK_HEADROOM_PERCENT: u64 = 2;
/// Default `arena.vm_churn_headroom_percent` (see [`ArenaConfig::vm_churn_headroom_percent`]).
pub const DEFAULT_VM_CHURN_HEADROOM_PERCENT: u64 = 30;
/// Default `arena.vm_map_unit_bytes` (see [`ArenaConfig::vm_map_unit_bytes`]): 64 MiB.
pub const DEFAULT_VM_MAP_UNIT_BYTES: u64 = 64 << 20;
/// Largest `arena.vm_page_size_bytes`: 1 GiB.
pub const MAX_VM_PAGE_SIZE_BYTES: u64 = 1 << 30;
/// Largest `arena.vm_reserve_bytes`: 2^62 (far past any device; addresses stay in 64 bits).
pub const MAX_VM_RESERVE_BYTES: u64 = 1 << 62;

/// The exact key names, as ONNX Runtime spells them.
pub mod keys {
    /// `0` next power of two, `1` same as requested.
    pub const EXTEND_STRATEGY: &str = "arena.extend_strategy";
    /// Size of the first region (power-of-two strategy).
    pub const INITIAL_CHUNK_SIZE_BYTES: &str = "arena.initial_chunk_size_bytes";
    /// A free chunk is split when the waste would reach this many bytes.
    pub const MAX_DEAD_BYTES_PER_CHUNK: &str = "arena.max_dead_bytes_per_chunk";
    /// Growth size after a shrink.
    pub const INITIAL_GROWTH_CHUNK_SIZE_BYTES: &str = "arena.initial_growth_chunk_size_bytes";
    /// Cap on power-of-two region growth.
    pub const MAX_POWER_OF_TWO_EXTEND_BYTES: &str = "arena.max_power_of_two_extend_bytes";
    /// Total bytes the arena may hold from the raw allocator; `0` = unlimited.
    pub const MAX_MEM: &str = "arena.max_mem";
    /// `1` selects the CUDA memory-pool allocator instead of the BFC arena.
    pub const USE_CUDA_MEMPOOL: &str = "arena.use_cuda_mempool";
    /// The pool's release threshold in bytes.
    pub const CUDA_MEMPOOL_RELEASE_THRESHOLD: &str = "arena.cuda_mempool_release_threshold";
    /// Bytes the pool keeps when trimmed by a shrink.
    pub const CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK: &str =
        "arena.cuda_mempool_bytes_to_keep_on_shrink";
    /// `1`: the device arena lives in one reserved address range and maps pages on demand.
    pub const USE_VIRTUAL_MEMORY: &str = "arena.use_virtual_memory";
    /// Page size of the virtual-memory mode; `0` = the backend's granularity.
    pub const VM_PAGE_SIZE_BYTES: &str = "arena.vm_page_size_bytes";
    /// Size of the address range reserved at a time; `0` = the device's total memory.
    pub const VM_RESERVE_BYTES: &str = "arena.vm_reserve_bytes";
    /// Free memory kept mapped; past it, a free unmaps wholly free pages. Unset: no limit.
    pub const VM_UNMAP_THRESHOLD_BYTES: &str = "arena.vm_unmap_threshold_bytes";
    /// How far mapped memory may grow past the peak in use before pages are remapped.
    pub const VM_PEAK_HEADROOM_PERCENT: &str = "arena.vm_peak_headroom_percent";
    /// How far the headroom may grow when the pages it unmapped are wanted back (churn).
    pub const VM_CHURN_HEADROOM_PERCENT: &str = "arena.vm_churn_headroom_percent";
    /// The most one mapping (one driver allocation) covers; only whole mappings unmap.
    pub const VM_MAP_UNIT_BYTES: &str = "arena.vm_map_unit_bytes";

    /// The typed (camelCase) name of every key, as the TypeScript API spells it, with the
    /// key; in documentation order.
    pub const TYPED: [(&str, &str); 16] = [
        ("extendStrategy", EXTEND_STRATEGY),
        ("initialChunkSizeBytes", INITIAL_CHUNK_SIZE_BYTES),
        ("maxDeadBytesPerChunk", MAX_DEAD_BYTES_PER_CHUNK),
        (
            "initialGrowthChunkSizeBytes",
            INITIAL_GROWTH_CHUNK_SIZE_BYTES,
        ),
        ("maxPowerOfTwoExtendBytes", MAX_POWER_OF_TWO_EXTEND_BYTES),
        ("maxMem", MAX_MEM),
        ("useCudaMempool", USE_CUDA_MEMPOOL),
        (
            "cudaMempoolReleaseThreshold",
            CUDA_MEMPOOL_RELEASE_THRESHOLD,
        ),
        (
            "cudaMempoolBytesToKeepOnShrink",
            CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK,
        ),
        ("useVirtualMemory", USE_VIRTUAL_MEMORY),
        ("vmPageSizeBytes", VM_PAGE_SIZE_BYTES),
        ("vmReserveBytes", VM_RESERVE_BYTES),
        ("vmUnmapThresholdBytes", VM_UNMAP_THRESHOLD_BYTES),
        ("vmPeakHeadroomPercent", VM_PEAK_HEADROOM_PERCENT),
        ("vmChurnHeadroomPercent", VM_CHURN_HEADROOM_PERCENT),
        ("vmMapUnitBytes", VM_MAP_UNIT_BYTES),
    ];

    /// Every known key, in documentation order.
    pub const ALL: [&str; 16] = [
        EXTEND_STRATEGY,
        INITIAL_CHUNK_SIZE_BYTES,
        MAX_DEAD_BYTES_PER_CHUNK,
        INITIAL_GROWTH_CHUNK_SIZE_BYTES,
        MAX_POWER_OF_TWO_EXTEND_BYTES,
        MAX_MEM,
        USE_CUDA_MEMPOOL,
        CUDA_MEMPOOL_RELEASE_THRESHOLD,
        CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK,
        USE_VIRTUAL_MEMORY,
        VM_PAGE_SIZE_BYTES,
        VM_RESERVE_BYTES,
        VM_UNMAP_THRESHOLD_BYTES,
        VM_PEAK_HEADROOM_PERCENT,
        VM_CHURN_HEADROOM_PERCENT,
        VM_MAP_UNIT_BYTES,
    ];
}

/// The arena's configuration. Build it with [`ArenaConfig::default`] and field updates, or
/// parse it with [`ArenaConfig::from_pairs`]; [`ArenaConfig::validate`] checks field ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArenaConfig {
    /// How regions grow. Default next power of two.
    pub extend_strategy: ExtendStrategy,
    /// First region size for the power-of-two strategy, 1..=2^31-1. Default 1 MiB.
    pub initial_chunk_size_bytes: u64,
    /// Split a free chunk when the leftover reaches this, 1..=2^31-1. Default 128 MiB.
    pub max_dead_bytes_per_chunk: u64,
    /// Growth size after `shrink`, 1..=2^31-1. Default 2 MiB.
    pub initial_growth_chunk_size_bytes: u64,
    /// Cap on power-of-two growth, a multiple of 256 up to 2^63 (parsing takes 1 … 2^63−1
    /// and rounds up). Default 1 GiB.
    pub max_power_of_two_extend_bytes: u64,
    /// Bytes the arena may hold from the raw allocator; `u64::MAX` means unlimited.
    pub max_mem: u64,
    /// Use the CUDA memory-pool allocator instead of the BFC arena. Default false.
    pub use_cuda_mempool: bool,
    /// Pool release threshold; `None` means "not given", which the pool treats as
    /// unlimited (DESIGN decision 9).
    pub cuda_mempool_release_threshold: Option<u64>,
    /// Bytes the pool keeps on shrink. Default 0.
    pub cuda_mempool_bytes_to_keep_on_shrink: u64,
    /// Virtual-memory mode for the device arena (`docs/virtual-memory.md`): one reserved
    /// address range, pages mapped on demand, wholly free pages unmapped. Applies where the
    /// backend has a virtual-memory form for device memory ([`crate::Backend::virtual_memory`])
    /// and the arena is made with [`crate::Arena::with_virtual_memory`] (factories do both);
    /// pinned and CPU arenas ignore it. Default true (issue 25); `false` gives ONNX Runtime's
    /// region arena bit for bit.
    pub use_virtual_memory: bool,
    /// Page size in bytes: `0` (the default) for the backend's granularity, else a power of
    /// two up to 1 GiB that is a multiple of it.
    pub vm_page_size_bytes: u64,
    /// Bytes of address space reserved at a time: `0` (the default) for the device's total
    /// memory; at most 2^62. Another range is reserved only when a request fits in no free
    /// space of the ranges held.
    pub vm_reserve_bytes: u64,
    /// Wholly free pages kept mapped, in bytes: a free that leaves more unmaps the excess.
    /// `None` (the default): no limit, free pages stay mapped until the peak headroom, a
    /// shrink or an out-of-memory needs them.
    pub vm_unmap_threshold_bytes: Option<u64>,
    /// Mapped memory may exceed the peak of chunk bytes in use (since the last shrink) by
    /// this percentage before the arena unmaps wholly free pages elsewhere to map new ones,
    /// 0 … 1000. Default 2.
    pub vm_peak_headroom_percent: u64,
    /// When a mapping wants back pages the headroom recently had unmapped (the same pages out
    /// and in again), the headroom grows by them instead, up to this percentage of the peak
    /// in use, 0 … 1000; at or below `vm_peak_headroom_percent` it never grows. Default 30.
    pub vm_churn_headroom_percent: u64,
    /// A run of pages is mapped in mappings of at most this many bytes (rounded down to
    /// whole pages, and at least one page), each one driver allocation; `0`: one page each.
    /// Only a whole mapping can be unmapped (CUDA cannot unmap part of one), so the free
    /// pages of a mapping partly in use stay mapped; larger mappings cost fewer driver
    /// calls. A sub-arena that a second stream maps pages in maps one page each from then
    /// on (streams free in rhythms of their own). 0 … 2^62. Default 64 MiB.
    pub vm_map_unit_bytes: u64,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            extend_strategy: DEFAULT_EXTEND_STRATEGY,
            initial_chunk_size_bytes: DEFAULT_INITIAL_CHUNK_SIZE_BYTES,
            max_dead_bytes_per_chunk: DEFAULT_MAX_DEAD_BYTES_PER_CHUNK,
            initial_growth_chunk_size_bytes: DEFAULT_INITIAL_GROWTH_CHUNK_SIZE_BYTES,
            max_power_of_two_extend_bytes: DEFAULT_MAX_POWER_OF_TWO_EXTEND_BYTES,
            max_mem: DEFAULT_MAX_MEM,
            use_cuda_mempool: false,
            cuda_mempool_release_threshold: None,
            cuda_mempool_bytes_to_keep_on_shrink: DEFAULT_CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK,
            use_virtual_memory: true,
            vm_page_size_bytes: 0,
            vm_reserve_bytes: 0,
            vm_unmap_threshold_bytes: None,
            vm_peak_headroom_percent: DEFAULT_VM_PEAK_HEADROOM_PERCENT,
            vm_churn_headroom_percent: DEFAULT_VM_CHURN_HEADROOM_PERCENT,
            vm_map_unit_bytes: DEFAULT_VM_MAP_UNIT_BYTES,
        }
    }
}

const INT32_MAX: u64 = i32::MAX as u64;
const INT64_MAX: u64 = i64::MAX as u64;
/// `arena.max_power_of_two_extend_bytes` accepts 1 … 2^63−1 and rounds up to a multiple of
/// 256, so the field can hold 2^63 (what 2^63−255 … 2^63−1 round to).
const MAX_POWER_OF_TWO_EXTEND_ROUNDED: u64 = INT64_MAX + 1;

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ArenaError {
    ArenaError::InvalidConfig {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Parses a whole decimal integer in `min..=max`: ASCII digits only.
fn parse_uint(key: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    if value.is_empty() {
        return Err(invalid(
            key,
            value,
            "expected a whole decimal number, got an empty string",
        ));
    }
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_digit()) {
        return Err(invalid(
            key,
            value,
            format!("expected a whole decimal number (digits only), found {bad:?}"),
        ));
    }
    let n: u64 = value
        .parse()
        .map_err(|_| invalid(key, value, format!("must be at most {max}")))?;
    if n < min || n > max {
        return Err(invalid(
            key,
            value,
            format!("must be between {min} and {max}"),
        ));
    }
    Ok(n)
}

/// Parses `0` or a power of two in `min..=max`.
fn parse_zero_or_power_of_two(key: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    let n = parse_uint(key, value, 0, u64::MAX)?;
    if n == 0 || (n.is_power_of_two() && (min..=max).contains(&n)) {
        return Ok(n);
    }
    Err(invalid(
        key,
        value,
        format!("must be 0 or a power of two between {min} and {max}"),
    ))
}

fn parse_flag(key: &str, value: &str) -> Result<bool> {
    match value {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(invalid(key, value, "must be 0 or 1")),
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev_diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev_diag + usize::from(ca != *cb);
            prev_diag = row[j + 1];
            row[j + 1] = sub.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// Edit distance, with a long input cut short first: suggestions are for typos, and the
/// distance costs time in the product of the lengths.
fn distance(key: &str, known: &str) -> usize {
    let cut: String = key.chars().take(64).collect();
    edit_distance(&cut, known)
}

/// The known key closest to `key`.
pub fn nearest_key(key: &str) -> &'static str {
    keys::ALL
        .iter()
        .copied()
        .min_by_key(|k| distance(key, k))
        .unwrap_or(keys::MAX_MEM)
}

/// The typed (camelCase) field name closest to `key`.
pub fn nearest_typed_key(key: &str) -> &'static str {
    keys::TYPED
        .iter()
        .map(|(typed, _)| *typed)
        .min_by_key(|k| distance(key, k))
        .unwrap_or("maxMem")
}

/// `arena.max_mem` as messages quote it: "unlimited" rather than 2^64−1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxMem(pub u64);

impl std::fmt::Display for MaxMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            u64::MAX => f.write_str("unlimited"),
            n => write!(f, "{n}"),
        }
    }
}

impl ArenaConfig {
    /// Parses `arena.*` pairs over the defaults. Later pairs override earlier ones; keys not
    /// starting with `arena.` are ignored; an unknown `arena.*` key is an error.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        let mut cfg = ArenaConfig::default();
        for (k, v) in pairs {
            cfg.set(k.as_ref(), v.as_ref())?;
        }
        Ok(cfg)
    }

    /// Applies one key/value pair, with the same rules as [`ArenaConfig::from_pairs`].
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            keys::EXTEND_STRATEGY => {
                self.extend_strategy = match value {
                    "0" => ExtendStrategy::NextPowerOfTwo,
                    "1" => ExtendStrategy::SameAsRequested,
                    _ => {
                        return Err(invalid(
                            key,
                            value,
                            "must be 0 (next power of two) or 1 (same as requested)",
                        ))
                    }
                }
            }
            keys::INITIAL_CHUNK_SIZE_BYTES => {
                self.initial_chunk_size_bytes = parse_uint(key, value, 1, INT32_MAX)?
            }
            keys::MAX_DEAD_BYTES_PER_CHUNK => {
                self.max_dead_bytes_per_chunk = parse_uint(key, value, 1, INT32_MAX)?
            }
            keys::INITIAL_GROWTH_CHUNK_SIZE_BYTES => {
                self.initial_growth_chunk_size_bytes = parse_uint(key, value, 1, INT32_MAX)?
            }
            keys::MAX_POWER_OF_TWO_EXTEND_BYTES => {
                // Regions must be multiples of 256; rounding here keeps every later region so.
                let n = parse_uint(key, value, 1, INT64_MAX)?;
                self.max_power_of_two_extend_bytes = round_up_256(n).unwrap_or(n);
            }
            keys::MAX_MEM => {
                let n = parse_uint(key, value, 0, u64::MAX)?;
                self.max_mem = if n == 0 { u64::MAX } else { n };
            }
            keys::USE_CUDA_MEMPOOL => self.use_cuda_mempool = parse_flag(key, value)?,
            keys::CUDA_MEMPOOL_RELEASE_THRESHOLD => {
                self.cuda_mempool_release_threshold = Some(parse_uint(key, value, 0, u64::MAX)?)
            }
            keys::CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK => {
                self.cuda_mempool_bytes_to_keep_on_shrink = parse_uint(key, value, 0, u64::MAX)?
            }
            keys::USE_VIRTUAL_MEMORY => self.use_virtual_memory = parse_flag(key, value)?,
            keys::VM_PAGE_SIZE_BYTES => {
                self.vm_page_size_bytes =
                    parse_zero_or_power_of_two(key, value, 256, MAX_VM_PAGE_SIZE_BYTES)?
            }
            keys::VM_RESERVE_BYTES => {
                self.vm_reserve_bytes = parse_uint(key, value, 0, MAX_VM_RESERVE_BYTES)?
            }
            keys::VM_UNMAP_THRESHOLD_BYTES => {
                self.vm_unmap_threshold_bytes = Some(parse_uint(key, value, 0, u64::MAX)?)
            }
            keys::VM_PEAK_HEADROOM_PERCENT => {
                self.vm_peak_headroom_percent = parse_uint(key, value, 0, 1000)?
            }
            keys::VM_CHURN_HEADROOM_PERCENT => {
                self.vm_churn_headroom_percent = parse_uint(key, value, 0, 1000)?
            }
            keys::VM_MAP_UNIT_BYTES => {
                self.vm_map_unit_bytes = parse_uint(key, value, 0, MAX_VM_RESERVE_BYTES)?
            }
            _ if key.starts_with("arena.") => {
                return Err(invalid(
                    key,
                    value,
                    format!("unknown key; did you mean {}?", nearest_key(key)),
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the field ranges the parser enforces, for configs built in code.
    pub fn validate(&self) -> Result<()> {
        let int32 = [
            (
                keys::INITIAL_CHUNK_SIZE_BYTES,
                self.initial_chunk_size_bytes,
            ),
            (
                keys::MAX_DEAD_BYTES_PER_CHUNK,
                self.max_dead_bytes_per_chunk,
            ),
            (
                keys::INITIAL_GROWTH_CHUNK_SIZE_BYTES,
                self.initial_growth_chunk_size_bytes,
            ),
        ];
        for (key, v) in int32 {
            if v == 0 || v > INT32_MAX {
                return Err(invalid(
                    key,
                    &v.to_string(),
                    format!("must be between 1 and {INT32_MAX}"),
                ));
            }
        }
        let p2 = self.max_power_of_two_extend_bytes;
        if p2 == 0 || p2 > MAX_POWER_OF_TWO_EXTEND_ROUNDED || !p2.is_multiple_of(256) {
            return Err(invalid(
                keys::MAX_POWER_OF_TWO_EXTEND_BYTES,
                &p2.to_string(),
                format!(
                    "must be a multiple of 256 between 256 and {MAX_POWER_OF_TWO_EXTEND_ROUNDED}"
                ),
            ));
        }
        if self.max_mem == 0 {
            return Err(invalid(keys::MAX_MEM, "0", "use u64::MAX for unlimited"));
        }
        let page = self.vm_page_size_bytes;
        if page != 0 && !(page.is_power_of_two() && (256..=MAX_VM_PAGE_SIZE_BYTES).contains(&page))
        {
            return Err(invalid(
                keys::VM_PAGE_SIZE_BYTES,
                &page.to_string(),
                format!("must be 0 or a power of two between 256 and {MAX_VM_PAGE_SIZE_BYTES}"),
            ));
        }
        if self.vm_reserve_bytes > MAX_VM_RESERVE_BYTES {
            return Err(invalid(
                keys::VM_RESERVE_BYTES,
                &self.vm_reserve_bytes.to_string(),
                format!("must be at most {MAX_VM_RESERVE_BYTES}"),
            ));
        }
        if self.vm_peak_headroom_percent > 1000 {
            return Err(invalid(
                keys::VM_PEAK_HEADROOM_PERCENT,
                &self.vm_peak_headroom_percent.to_string(),
                "must be between 0 and 1000",
            ));
        }
        if self.vm_churn_headroom_percent > 1000 {
            return Err(invalid(
                keys::VM_CHURN_HEADROOM_PERCENT,
                &self.vm_churn_headroom_percent.to_string(),
                "must be between 0 and 1000",
            ));
        }
        if self.vm_map_unit_bytes > MAX_VM_RESERVE_BYTES {
            return Err(invalid(
                keys::VM_MAP_UNIT_BYTES,
                &self.vm_map_unit_bytes.to_string(),
                format!("must be at most {MAX_VM_RESERVE_BYTES}"),
            ));
        }
        Ok(())
    }

    /// The config as `arena.*` pairs, every key present except an unset release threshold;
    /// `max_mem` unlimited is written `0`. Parsing the result gives back an equal config.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let strategy = match self.extend_strategy {
            ExtendStrategy::NextPowerOfTwo => "0",
            ExtendStrategy::SameAsRequested => "1",
        };
        let max_mem = if self.max_mem == u64::MAX {
            0
        } else {
            self.max_mem
        };
        let mut out = vec![
            (keys::EXTEND_STRATEGY, strategy.to_string()),
            (
                keys::INITIAL_CHUNK_SIZE_BYTES,
                self.initial_chunk_size_bytes.to_string(),
            ),
            (
                keys::MAX_DEAD_BYTES_PER_CHUNK,
                self.max_dead_bytes_per_chunk.to_string(),
            ),
            (
                keys::INITIAL_GROWTH_CHUNK_SIZE_BYTES,
                self.initial_growth_chunk_size_bytes.to_string(),
            ),
            (
                keys::MAX_POWER_OF_TWO_EXTEND_BYTES,
                // 2^63 is outside what the key accepts; 2^63−1 rounds back to it.
                self.max_power_of_two_extend_bytes
                    .min(INT64_MAX)
                    .to_string(),
            ),
            (keys::MAX_MEM, max_mem.to_string()),
            (
                keys::USE_CUDA_MEMPOOL,
                u8::from(self.use_cuda_mempool).to_string(),
            ),
        ];
        if let Some(t) = self.cuda_mempool_release_threshold {
            out.push((keys::CUDA_MEMPOOL_RELEASE_THRESHOLD, t.to_string()));
        }
        out.push((
            keys::CUDA_MEMPOOL_BYTES_TO_KEEP_ON_SHRINK,
            self.cuda_mempool_bytes_to_keep_on_shrink.to_string(),
        ));
        out.push((
            keys::USE_VIRTUAL_MEMORY,
            u8::from(self.use_virtual_memory).to_string(),
        ));
        out.push((
            keys::VM_PAGE_SIZE_BYTES,
            self.vm_page_size_bytes.to_string(),
        ));
        out.push((keys::VM_RESERVE_BYTES, self.vm_reserve_bytes.to_string()));
        if let Some(t) = self.vm_unmap_threshold_bytes {
            out.push((keys::VM_UNMAP_THRESHOLD_BYTES, t.to_string()));
        }
        out.push((
            keys::VM_PEAK_HEADROOM_PERCENT,
            self.vm_peak_headroom_percent.to_string(),
        ));
        out.push((
            keys::VM_CHURN_HEADROOM_PERCENT,
            self.vm_churn_headroom_percent.to_string(),
        ));
        out.push((keys::VM_MAP_UNIT_BYTES, self.vm_map_unit_bytes.to_string()));
        out
    }

    /// The keys whose values differ between `self` and `other`, in documentation order.
    pub fn differing_keys(&self, other: &ArenaConfig) -> Vec<&'static str> {
        let a = self.to_pairs();
        let b = other.to_pairs();
        keys::ALL
            .iter()
            .copied()
            .filter(|k| {
                let va = a.iter().find(|(key, _)| key == k).map(|(_, v)| v);
                let vb = b.iter().find(|(key, _)| key == k).map(|(_, v)| v);
                va != vb
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("max_mem", "max_mem"), 0);
        assert_eq!(edit_distance("max_men", "max_mem"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn to_pairs_round_trips_through_from_pairs() {
        let cfg = ArenaConfig {
            max_mem: 12345,
            cuda_mempool_release_threshold: Some(7),
            use_virtual_memory: true,
            vm_page_size_bytes: 1 << 16,
            vm_reserve_bytes: 12 << 30,
            vm_unmap_threshold_bytes: Some(0),
            vm_peak_headroom_percent: 7,
            vm_churn_headroom_percent: 11,
            vm_map_unit_bytes: 3 << 20,
            ..Default::default()
        };
        let back = ArenaConfig::from_pairs(cfg.to_pairs()).expect("own pairs parse");
        assert_eq!(back, cfg);
    }
}
