//! Conversions between JS values and the core's types.

use crate::bigint::U64Arg;
use crate::error::{invalid, js, with_message, Result};
use cuda_arena_core::{AllocatorStats, ArenaConfig, ArenaError, MemoryLog, RawStats};
use napi::bindgen_prelude::BigInt;
use napi_derive::napi;

/// Largest safe integer of a JS number.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `v` as a whole number in `0 ..= 2^53−1`, or `None` (NaN, infinities, fractions, negatives,
/// larger values). A round trip through `u64` rather than `f64::fract`, which is a libm call
/// on the fast path.
#[inline]
pub fn whole(v: f64) -> Option<u64> {
    if v >= 0.0 && v <= MAX_SAFE_INTEGER as f64 && (v as u64) as f64 == v {
        Some(v as u64)
    } else {
        None
    }
}

/// A whole JS number in `min..=max`. Integer arguments cross as `f64` and are checked here,
/// never converted by napi (whose `u32` wraps `-1` to 2^32−1 and truncates `1.9` to 1), so a
/// direct caller of the binding gets the same refusal as one of the TypeScript API.
pub fn int_arg(name: &str, v: f64, min: u64, max: u64) -> Result<u64> {
    match whole(v) {
        Some(n) if n >= min && n <= max => Ok(n),
        _ => Err(invalid(format!(
            "{name} must be an integer {min} … {max}, got {v}"
        ))),
    }
}

/// A `u32` argument (device ids, counts) given as a JS number.
pub fn u32_arg(name: &str, v: f64) -> Result<u32> {
    int_arg(name, v, 0, u64::from(u32::MAX)).map(|n| n as u32)
}

/// A size from a JS number: a non-negative safe integer.
#[inline]
pub fn size_num(name: &str, v: f64) -> Result<u64> {
    whole(v).ok_or_else(|| {
        invalid(format!(
            "{name} must be a non-negative safe integer, got {v}"
        ))
    })
}

/// A size from a JS bigint. Negative is an invalid argument; 2^64 or more can never be
/// served (DESIGN decision 4: out of memory).
pub fn size_arg(name: &str, v: U64Arg) -> Result<u64> {
    match v {
        U64Arg::Value(n) => Ok(n),
        U64Arg::Negative(v) => Err(invalid(format!("{name} must not be negative, got {v}"))),
        U64Arg::TooLarge(v) => Err(with_message(
            ArenaError::OutOfMemory {
                requested: u64::MAX,
                reason: String::new(),
            },
            format!("out of memory allocating {v} bytes: {name} does not fit in 64 bits"),
        )),
    }
}

/// An address argument: a bigint in 0 … 2^64−1; anything else is no address of ours.
pub fn addr_arg(v: U64Arg) -> Result<u64> {
    match v {
        U64Arg::Value(n) => Ok(n),
        U64Arg::Negative(v) | U64Arg::TooLarge(v) => Err(with_message(
            ArenaError::UnknownPointer {
                addr: 0,
                reason: String::new(),
            },
            format!(
                "unknown pointer {v:x}: a negative or wider than 64-bit value is not an address \
                 this allocator handed out"
            ),
        )),
    }
}

/// Pairs given as two arrays of the same length (the TS layer passes an object's own
/// entries; a JS object itself is never enumerated here, since napi's conversion would also
/// walk inherited properties, `Object.prototype` included).
pub fn pairs_arg(keys: Vec<String>, values: Vec<String>) -> Result<Vec<(String, String)>> {
    if keys.len() != values.len() {
        return Err(invalid(format!(
            "{} keys and {} values were given",
            keys.len(),
            values.len()
        )));
    }
    Ok(keys.into_iter().zip(values).collect())
}

/// `arena.*` pairs (already flattened by the TS layer) → config.
pub fn config_arg(pairs: Vec<(String, String)>) -> Result<ArenaConfig> {
    ArenaConfig::from_pairs(pairs).map_err(js)
}

fn big(v: u64) -> BigInt {
    BigInt::from(v)
}

/// `getStats()` values, bigint.
#[napi(object)]
pub struct JsStats {
    pub limit: BigInt,
    pub in_use: BigInt,
    pub requested_in_use: BigInt,
    pub total_allocated: BigInt,
    pub reserved_bytes: BigInt,
    pub max_in_use: BigInt,
    pub num_allocs: BigInt,
    pub num_reserves: BigInt,
    pub num_arena_extensions: BigInt,
    pub num_arena_shrinkages: BigInt,
    pub max_alloc_size: BigInt,
}

impl From<AllocatorStats> for JsStats {
    fn from(s: AllocatorStats) -> Self {
        JsStats {
            limit: BigInt::from(s.limit),
            in_use: big(s.in_use),
            requested_in_use: big(s.requested_in_use),
            total_allocated: big(s.total_allocated),
            reserved_bytes: big(s.reserved_bytes),
            max_in_use: big(s.max_in_use),
            num_allocs: big(s.num_allocs),
            num_reserves: big(s.num_reserves),
            num_arena_extensions: big(s.num_arena_extensions),
            num_arena_shrinkages: big(s.num_arena_shrinkages),
            max_alloc_size: big(s.max_alloc_size),
        }
    }
}

/// `deviceStats()` values.
#[napi(object)]
pub struct JsDeviceStats {
    pub raw_allocs: BigInt,
    pub raw_frees: BigInt,
    pub raw_failures: BigInt,
    pub raw_bytes_outstanding: BigInt,
    pub device_waits: BigInt,
    pub stream_waits: BigInt,
    pub free: Option<BigInt>,
    pub total: Option<BigInt>,
}

impl From<RawStats> for JsDeviceStats {
    fn from(s: RawStats) -> Self {
        JsDeviceStats {
            raw_allocs: big(s.raw_allocs),
            raw_frees: big(s.raw_frees),
            raw_failures: big(s.raw_failures),
            raw_bytes_outstanding: big(s.raw_bytes_outstanding),
            device_waits: big(s.device_waits),
            stream_waits: big(s.stream_waits),
            free: s.free.map(big),
            total: s.total.map(big),
        }
    }
}

#[napi(object)]
pub struct JsChunk {
    pub addr: BigInt,
    pub size: BigInt,
    pub requested_size: BigInt,
    pub in_use: bool,
    pub stream: Option<BigInt>,
    pub sync_id: BigInt,
}

#[napi(object)]
pub struct JsRegion {
    pub id: BigInt,
    pub base: BigInt,
    pub size: BigInt,
    pub chunks: Vec<JsChunk>,
}

#[napi(object)]
pub struct JsReserve {
    pub addr: BigInt,
    pub size: BigInt,
}

#[napi(object)]
pub struct JsBin {
    pub bin_size: BigInt,
    pub chunks: BigInt,
    pub in_use_chunks: BigInt,
    pub bytes: BigInt,
    pub in_use_bytes: BigInt,
    pub requested_bytes: BigInt,
}

#[napi(object)]
pub struct JsMemoryLog {
    pub regions: Vec<JsRegion>,
    pub reserves: Vec<JsReserve>,
    pub bins: Vec<JsBin>,
    pub stats: JsStats,
}

impl From<MemoryLog> for JsMemoryLog {
    fn from(log: MemoryLog) -> Self {
        JsMemoryLog {
            regions: log
                .regions
                .into_iter()
                .map(|r| JsRegion {
                    id: big(r.id),
                    base: big(r.base),
                    size: big(r.size),
                    chunks: r
                        .chunks
                        .into_iter()
                        .map(|c| JsChunk {
                            addr: big(c.addr),
                            size: big(c.size),
                            requested_size: big(c.requested_size),
                            in_use: c.in_use,
                            stream: c.stream.map(big),
                            sync_id: big(c.sync_id),
                        })
                        .collect(),
                })
                .collect(),
            reserves: log
                .reserves
                .into_iter()
                .map(|r| JsReserve {
                    addr: big(r.addr),
                    size: big(r.size),
                })
                .collect(),
            bins: log
                .bins
                .into_iter()
                .map(|b| JsBin {
                    bin_size: big(b.bin_size),
                    chunks: big(b.chunks),
                    in_use_chunks: big(b.in_use_chunks),
                    bytes: big(b.bytes),
                    in_use_bytes: big(b.in_use_bytes),
                    requested_bytes: big(b.requested_bytes),
                })
                .collect(),
            stats: log.stats.into(),
        }
    }
}
