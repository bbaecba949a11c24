//! The fuzz targets of `fuzz/`, replayed on stable in every `cargo test`: for each target,
//! every input of its committed corpus (`fuzz/corpus/<target>/`: hand-written seeds and the
//! inputs `scripts/fuzz.sh` kept from real fuzzing), then a fixed number of pseudo-random
//! inputs from a fixed seed: fresh bytes and mutations of the corpus. The bodies are
//! `cuda_arena_model`'s, the ones the fuzzer runs (and `arena_ops` checks the shadow model
//! `tests/model.rs` checks too). `FUZZ_REPLAY_CASES` overrides the number of random inputs per
//! target (20,000).

use cuda_arena_model::{arena_ops, config_parser, trace_parser, OpsTally};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed, TestRunner};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.display().to_string(), bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no inputs", dir.display());
    files
}

/// Runs `body` on every corpus input of `target`, naming the file that fails.
fn replay_corpus<T>(target: &str, body: impl Fn(&[u8]) -> T) -> Vec<T> {
    corpus(target)
        .iter()
        .map(|(path, bytes)| {
            catch_unwind(AssertUnwindSafe(|| body(bytes)))
                .unwrap_or_else(|_| panic!("{target} fails on {path}"))
        })
        .collect()
}

/// A fuzz input, shown as an escaped byte string when a case fails.
#[derive(Clone)]
struct Input(Vec<u8>);

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// One way to change a corpus input: 0 overwrite a byte, 1 insert one, 2 remove one,
/// 3 copy a run of bytes elsewhere.
#[derive(Debug, Clone)]
struct Mutation {
    kind: u8,
    at: Index,
    from: Index,
    byte: u8,
    len: u8,
}

fn mutate(mut data: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if data.is_empty() {
            data.push(m.byte);
            continue;
        }
        let at = m.at.index(data.len());
        match m.kind {
            0 => data[at] = m.byte,
            1 => data.insert(at, m.byte),
            2 => {
                data.remove(at);
            }
            _ => {
                let from = m.from.index(data.len());
                let end = (from + usize::from(m.len)).min(data.len());
                let run: Vec<u8> = data[from..end].to_vec();
                data.splice(at..at, run);
            }
        }
    }
    data
}

/// Fresh random bytes, or a corpus input with a few mutations.
fn inputs(target: &str, max_len: usize) -> impl Strategy<Value = Input> {
    let seeds: Vec<Vec<u8>> = corpus(target).into_iter().map(|(_, b)| b).collect();
    let mutation = (
        0u8..4,
        any::<Index>(),
        any::<Index>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(kind, at, from, byte, len)| Mutation {
            kind,
            at,
            from,
            byte,
            len,
        });
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..max_len),
        (
            proptest::sample::select(seeds),
            proptest::collection::vec(mutation, 1..8)
        )
            .prop_map(|(seed, ms)| mutate(seed, &ms)),
    ]
    .prop_map(Input)
}

fn cases() -> u32 {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// Runs `body` on `cases()` inputs from a fixed seed; a failure is shrunk to a small input.
fn replay_random(target: &str, seed: u64, max_len: usize, body: impl Fn(&[u8])) {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&inputs(target, max_len), |data| {
        body(&data.0);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{target}: {e}");
    }
}

#[test]
fn config_parser_keeps_its_invariants_on_every_corpus_input() {
    replay_corpus("config_parser", config_parser);
}

#[test]
fn config_parser_keeps_its_invariants_on_random_inputs() {
    replay_random("config_parser", 1, 512, config_parser);
}

#[test]
fn arena_ops_keep_the_model_on_every_corpus_input() {
    replay_corpus("arena_ops", arena_ops);
}

#[test]
fn arena_ops_keep_the_model_on_random_inputs() {
    let total = std::sync::Mutex::new(OpsTally::default());
    replay_random("arena_ops", 2, 512, |data| {
        let t = arena_ops(data);
        total.lock().expect("tally").add(&t);
    });
    println!(
        "{} random inputs: {:?}",
        cases(),
        total.lock().expect("tally")
    );
}

#[test]
fn arena_ops_corpus_reaches_every_path_the_model_checks() {
    let mut total = OpsTally::default();
    for t in replay_corpus("arena_ops", arena_ops) {
        total.add(&t);
    }
    let reached = [
        ("out of memory", total.out_of_memory),
        (
            "regions released by a failing call",
            total.released_on_failure,
        ),
        (
            "regions released before a call succeeded",
            total.released_then_succeeded,
        ),
        ("cross-stream reuse after a wait", total.cross_stream_reuse),
        ("pool reuse", total.pool_reuse),
        ("refused frees", total.refused_frees),
        ("refused copies past the end", total.refused_accesses),
        ("host read-backs", total.host_read_backs),
        ("retired allocators", total.retired),
        (
            "pages unmapped in virtual-memory mode",
            total.vm_bytes_unmapped,
        ),
    ];
    for (what, n) in reached {
        assert!(n > 0, "no corpus input reaches {what}: {total:?}");
    }
}

#[test]
fn trace_parser_keeps_its_invariants_on_every_corpus_input() {
    replay_corpus("trace_parser", trace_parser);
}

#[test]
fn trace_parser_keeps_its_invariants_on_random_inputs() {
    replay_random("trace_parser", 3, 512, trace_parser);
}
