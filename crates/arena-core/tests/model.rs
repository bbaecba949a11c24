//! Randomized model test: random op sequences over random valid configs and device limits
//! on the `virtual` backend, checked after every op against the shadow model the fuzz targets
//! check too (`cuda-arena-model`: what it checks is listed in docs/fuzzing.md), for the region
//! arena and the virtual-memory mode (issue 14). Here proptest draws the setups and the ops,
//! over wider sizes and limits than the fuzzer's bytes decode to, and shrinks a failure to a
//! short sequence. The case count defaults to 10,000; `MODEL_CASES` overrides it.
//!
//! Issue 15: the same sequences also run with every allocation, reserve and free made on one
//! of four threads (chosen per op), one op at a time, so each thread has a sub-arena of its
//! own and frees, stream rules, out-of-memory paths and stats cross them; the model and every
//! check stay the same (2,000 cases; `MODEL_THREAD_CASES` overrides). Virtual-memory cases
//! on four threads share one sub-arena (the mode's design) and check the same.

use cuda_arena_core::DeviceLimits;
use cuda_arena_model::{run_ops_on_threads, Backend, Kind, Op, OpsTally, Setup, STREAMS};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::Mutex;

/// Threads of the many-thread run.
const THREADS: usize = 4;

/// What the sequences exercised, printed at the end so a reader can see the test bites.
#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    vm_cases: u64,
    model: OpsTally,
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        8 => 1u64..=4096,
        5 => 4097u64..=(1 << 20),
        3 => (1u64 << 20)..=(64 << 20),
        1 => (1u64 << 28)..=(1 << 36),
        1 => (u64::MAX - 512)..=u64::MAX,
    ]
}

/// An op and the thread that makes its allocator call (the many-thread run only; allocations,
/// reserves and frees).
fn op() -> impl Strategy<Value = (Op, usize)> {
    let here = |op: Op| (op, 0);
    prop_oneof![
        10 => (size(), proptest::option::of(0..STREAMS), 0..THREADS)
            .prop_map(|(size, stream, thread)| (Op::Alloc { size, stream }, thread)),
        1 => (size(), 0..THREADS).prop_map(|(size, thread)| (Op::Reserve(size), thread)),
        8 => (any::<usize>(), 0..THREADS).prop_map(|(pick, thread)| (Op::Free(pick), thread)),
        1 => (any::<usize>(), 0u8..4)
            .prop_map(move |(pick, kind)| here(Op::FreeBogus { pick, kind })),
        1 => Just(here(Op::Shrink)),
        2 => (0..STREAMS, 0..STREAMS).prop_map(move |(from, to)| here(Op::Sync { from, to })),
        1 => (0..STREAMS).prop_map(move |s| here(Op::Reset(s))),
        1 => (0..STREAMS).prop_map(move |s| here(Op::ReleaseStream(s))),
        1 => (any::<usize>(), 0u8..4).prop_map(move |(pick, kind)| here(Op::Access { pick, kind })),
    ]
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (
            0u8..2,
            1u64..=(16 << 20),
            1u64..=(256 << 20),
            1u64..=(16 << 20),
            1u64..=(4u64 << 30),
        ),
        proptest::option::of(1u64..=(8u64 << 30)),
        (1u64 << 20)..=(16u64 << 30),
        proptest::option::of(4096u64..=(4u64 << 30)),
    )
        .prop_map(
            |((strategy, initial, dead, growth, p2), max_mem, total, max_alloc)| {
                let mut pairs = vec![
                    ("arena.extend_strategy".to_string(), strategy.to_string()),
                    (
                        "arena.initial_chunk_size_bytes".to_string(),
                        initial.min(i32::MAX as u64).to_string(),
                    ),
                    (
                        "arena.max_dead_bytes_per_chunk".to_string(),
                        dead.min(i32::MAX as u64).to_string(),
                    ),
                    (
                        "arena.initial_growth_chunk_size_bytes".to_string(),
                        growth.min(i32::MAX as u64).to_string(),
                    ),
                    (
                        "arena.max_power_of_two_extend_bytes".to_string(),
                        p2.to_string(),
                    ),
                ];
                if let Some(m) = max_mem {
                    pairs.push(("arena.max_mem".to_string(), m.to_string()));
                }
                let limits = DeviceLimits {
                    total_memory: total,
                    max_allocation: max_alloc.unwrap_or(u64::MAX),
                };
                Setup {
                    kind: Kind::Arena,
                    backend: Backend::Virtual,
                    pairs,
                    limits,
                    retire: false,
                    vm_granularity: None,
                }
            },
        )
}

/// A setup in virtual-memory mode: a granularity of 4 KiB to 2 MiB, pages of 1 to 4
/// granules, ranges of a few pages to many (so requests also need new ranges), a headroom
/// from none to none needed, and no threshold or one from 0 up.
fn vm_setup() -> impl Strategy<Value = Setup> {
    (
        setup(),
        prop_oneof![Just(4096u64), Just(65536), Just(1 << 20), Just(2 << 20)],
        0u32..3,
        prop_oneof![Just(0u64), (1u64..=64).prop_map(|p| p << 20)],
        prop_oneof![Just(0u64), Just(2), Just(10), Just(1000)],
        proptest::option::of(prop_oneof![Just(0u64), 1u64..=(64 << 20)]),
    )
        .prop_map(
            |(mut setup, granularity, shift, reserve, headroom, threshold)| {
                let page = granularity << shift;
                // The default range is the device's size: keep its page table small.
                let reserve = if reserve == 0 && setup.limits.total_memory / page > (1 << 16) {
                    page << 12
                } else {
                    reserve
                };
                setup.pairs.extend([
                    ("arena.vm_page_size_bytes".to_string(), page.to_string()),
                    ("arena.vm_reserve_bytes".to_string(), reserve.to_string()),
                    (
                        "arena.vm_peak_headroom_percent".to_string(),
                        headroom.to_string(),
                    ),
                ]);
                if let Some(t) = threshold {
                    setup
                        .pairs
                        .push(("arena.vm_unmap_threshold_bytes".to_string(), t.to_string()));
                }
                setup.vm_granularity = Some(granularity);
                setup
            },
        )
}

#[test]
fn random_op_sequences_keep_every_invariant() {
    run_many("MODEL_CASES", 10_000, 0);
}

#[test]
fn random_op_sequences_on_four_threads_keep_every_invariant() {
    run_many("MODEL_THREAD_CASES", 2_000, THREADS);
}

fn run_many(env: &str, default_cases: u32, threads: usize) {
    let cases = std::env::var(env)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    // A third of the cases in virtual-memory mode.
    let strategy = (
        prop_oneof![2 => setup(), 1 => vm_setup()],
        proptest::collection::vec(op(), 1..120),
    );
    let tally = Mutex::new(Tally::default());
    let result = runner.run(&strategy, |(setup, ops)| {
        let exercised = run_ops_on_threads(&setup, &ops, threads).map_err(TestCaseError::fail)?;
        let mut t = tally.lock().expect("tally");
        t.cases += 1;
        t.vm_cases += u64::from(setup.vm_granularity.is_some());
        t.model.add(&exercised);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    println!(
        "{cases} random sequences on {} passed; what they exercised: {:?}",
        if threads == 0 {
            "one thread".to_string()
        } else {
            format!("{threads} threads")
        },
        tally.lock().expect("tally")
    );
}
