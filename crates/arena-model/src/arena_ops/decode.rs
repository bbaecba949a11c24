//! Bytes to a setup and a list of operations: every input decodes to something, so the fuzzer
//! explores configs, sizes and streams rather than failing to parse.

use super::*;

/// Picks from `table` with one byte, or, for bytes from 0xF0, takes the next four bytes.
fn pick(r: &mut Bytes<'_>, table: &[u64]) -> u64 {
    let b = r.byte();
    if b >= 0xF0 {
        u64::from(r.u32())
    } else {
        table[usize::from(b) % table.len()]
    }
}

const INT32_MAX: u64 = i32::MAX as u64;

fn decode_setup(r: &mut Bytes<'_>) -> Setup {
    let b = r.byte();
    let kind = match b % 8 {
        0..=3 => Kind::Arena,
        4 => Kind::ArenaWithoutStreams,
        5 | 6 => Kind::Pool,
        _ => Kind::Plain,
    };
    let backend = if b & 0x80 != 0 {
        Backend::Host
    } else {
        Backend::Virtual
    };
    let retire = b & 0x40 != 0;
    let sizes = [
        1 << 20,
        2 << 20,
        256,
        4096,
        65536,
        1,
        255,
        257,
        1000,
        3 << 20,
    ];
    let int32 = |r: &mut Bytes<'_>| pick(r, &sizes).clamp(1, INT32_MAX).to_string();
    let mut pairs = vec![
        ("arena.extend_strategy", (r.byte() & 1).to_string()),
        ("arena.initial_chunk_size_bytes", int32(r)),
        ("arena.max_dead_bytes_per_chunk", int32(r)),
        ("arena.initial_growth_chunk_size_bytes", int32(r)),
        (
            "arena.max_power_of_two_extend_bytes",
            pick(
                r,
                &[
                    1 << 30,
                    1 << 20,
                    2 << 20,
                    4 << 20,
                    256,
                    1,
                    65536,
                    i64::MAX as u64,
                    1000,
                ],
            )
            .max(1)
            .to_string(),
        ),
        (
            "arena.max_mem",
            pick(
                r,
                &[
                    0,
                    1 << 20,
                    4 << 20,
                    16 << 20,
                    300_000,
                    256,
                    64 << 20,
                    3 << 20,
                ],
            )
            .to_string(),
        ),
    ];
    if kind == Kind::Pool {
        pairs.push(("arena.use_cuda_mempool", "1".into()));
        let threshold = r.byte();
        if !threshold.is_multiple_of(4) {
            pairs.push((
                "arena.cuda_mempool_release_threshold",
                pick(r, &[0, 1 << 20, 4 << 20, u64::MAX, 4096]).to_string(),
            ));
        }
        pairs.push((
            "arena.cuda_mempool_bytes_to_keep_on_shrink",
            pick(r, &[0, 1 << 20, 4 << 20, u64::MAX]).to_string(),
        ));
    }
    let mut total_memory = pick(
        r,
        &[
            1 << 20,
            4 << 20,
            16 << 20,
            64 << 20,
            3 << 20,
            300_000,
            1 << 30,
            80 << 30,
        ],
    );
    if backend == Backend::Host {
        total_memory = total_memory.min(HOST_TOTAL_MAX);
    }
    // Bit 0x20 of the first byte: the arena in virtual-memory mode.
    let vm_granularity = (b & 0x20 != 0 && matches!(kind, Kind::Arena | Kind::ArenaWithoutStreams))
        .then(|| decode_vm(r, &mut pairs, backend, total_memory));
    let max_allocation = pick(
        r,
        &[
            u64::MAX,
            1 << 20,
            2 << 20,
            4 << 20,
            16 << 20,
            65536,
            (2 << 20) + 256,
        ],
    );
    Setup {
        kind,
        backend,
        pairs: pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        limits: DeviceLimits {
            total_memory,
            max_allocation,
        },
        retire,
        vm_granularity,
    }
}

/// The virtual-memory keys of an input: pages of 1 to 4 granules, a range of the device's
/// size or of a few pages (so requests need new ranges), a headroom that asks for pages back
/// at once, soon or never, and no threshold or a small one. Returns the granularity.
fn decode_vm(
    r: &mut Bytes<'_>,
    pairs: &mut Vec<(&'static str, String)>,
    backend: Backend,
    total_memory: u64,
) -> u64 {
    let granularity = match backend {
        // The host's pages.
        Backend::Host => HostAllocator::default().vm().granularity(),
        Backend::Virtual => pick(r, &[4096, 65536, 8192, 1 << 20]).clamp(4096, 2 << 20),
    };
    let granularity = if granularity.is_power_of_two() {
        granularity
    } else {
        4096
    };
    let page = granularity << (r.byte() % 3);
    let mut reserve = pick(r, &[0, 1 << 20, 4 << 20, 65536, 300_000]).min(1 << 30);
    if reserve == 0 && total_memory / page > 1 << 16 {
        // The range defaults to the device's size: keep its page table small.
        reserve = page << 12;
    }
    pairs.push(("arena.vm_page_size_bytes", page.to_string()));
    pairs.push(("arena.vm_reserve_bytes", reserve.to_string()));
    pairs.push((
        "arena.vm_peak_headroom_percent",
        pick(r, &[2, 0, 10, 1000]).min(1000).to_string(),
    ));
    pairs.push((
        "arena.vm_churn_headroom_percent",
        pick(r, &[30, 0, 5, 1000]).min(1000).to_string(),
    ));
    // One page, a few pages, and the default (64 MiB, often past the whole range here).
    pairs.push((
        "arena.vm_map_unit_bytes",
        pick(r, &[0, page * 4, 64 << 20, page * 2]).to_string(),
    ));
    let threshold = r.byte();
    if !threshold.is_multiple_of(3) {
        pairs.push((
            "arena.vm_unmap_threshold_bytes",
            pick(r, &[0, 65536, 1 << 20, 300_000]).to_string(),
        ));
    }
    granularity
}

/// Sizes: zero, small, medium, powers of two and their neighbours, sizes at the device's
/// limits and at `max_mem`, sizes whose rounding overflows, and sizes used just before.
fn decode_size(r: &mut Bytes<'_>, setup: &Setup, recent: &mut [u64; 4]) -> u64 {
    let max_mem = setup
        .pairs
        .iter()
        .find(|(k, _)| k == "arena.max_mem")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .filter(|&m| m != 0)
        .unwrap_or(u64::MAX);
    let class = r.byte();
    let size = match class % 16 {
        0 => 0,
        1..=4 => 1 + u64::from(r.byte()) * (1 + u64::from(r.byte() % 16)),
        5..=7 => 1 + u64::from(r.u16()),
        8 | 9 => (1 + u64::from(r.u16())) * 256,
        10 => {
            let p = 1u64 << (8 + r.byte() % 24);
            (p + u64::from(r.byte() % 3)).saturating_sub(1)
        }
        11 => setup
            .limits
            .total_memory
            .saturating_sub(u64::from(r.byte()) * 256),
        12 => max_mem.saturating_sub(255) + u64::from(r.byte() % 255),
        13 => u64::MAX - u64::from(r.byte()),
        _ => recent[usize::from(r.byte() % 4)],
    };
    recent.rotate_right(1);
    recent[0] = size;
    size
}

/// An input as a setup and at most 1,024 operations (`MAX_OPS`). Total: every byte string
/// decodes.
pub fn decode_ops(data: &[u8]) -> (Setup, Vec<Op>) {
    let mut r = Bytes::new(data);
    let setup = decode_setup(&mut r);
    let mut recent = [256, 4096, 1 << 20, 1];
    let mut ops = Vec::new();
    while !r.is_empty() && ops.len() < MAX_OPS {
        let code = r.byte();
        let stream = |r: &mut Bytes<'_>| usize::from(r.byte()) % STREAMS;
        let op = match code % 16 {
            0..=4 => {
                let size = decode_size(&mut r, &setup, &mut recent);
                let s = r.byte() % 4;
                Op::Alloc {
                    size,
                    stream: (s < 3).then_some(usize::from(s)),
                }
            }
            5 => Op::Reserve(decode_size(&mut r, &setup, &mut recent)),
            6..=8 => Op::Free(usize::from(r.byte())),
            9 => Op::FreeBogus {
                pick: usize::from(r.u16()),
                kind: r.byte() % 4,
            },
            10 => Op::Shrink,
            11 => Op::Sync {
                from: stream(&mut r),
                to: stream(&mut r),
            },
            12 => Op::Reset(stream(&mut r)),
            13 => Op::ReleaseStream(stream(&mut r)),
            _ => Op::Access {
                pick: usize::from(r.byte()),
                kind: r.byte() % 4,
            },
        };
        ops.push(op);
    }
    (setup, ops)
}
