//! The bodies of the fuzz targets: one place that both cargo-fuzz (`fuzz/`, nightly) and the
//! stable replay in `tests/fuzz_replay.rs` (every `cargo test`) call, so CI checks exactly
//! what the fuzzer fuzzes. `docs/fuzzing.md` says how to run them.
//!
//! Each target takes arbitrary bytes and panics, saying what went wrong, when an invariant
//! fails. Nothing else in the crate panics on any input, so a panic here is a bug. Not part of
//! the supported API.

mod ops;

pub use ops::{arena_ops, decode_ops, run_ops, Backend, Kind, Op, OpsTally, Setup, STREAMS};

use crate::devices::namespaces::{env_arena_options, session_arena_options};
use crate::trace::trace_format::{
    format_trace, parse_trace_bytes, parse_trace_reader, ParsedTrace, TraceLineError,
    MAX_SKIPPED_KEPT, MAX_TRACE_LINES,
};
use crate::types::config::{keys, nearest_key, nearest_typed_key, ArenaConfig};
use crate::types::error::ArenaError;

/// The longest message an error about a caller's text may have. Messages quote at most 80
/// characters of a key or value, counted after escaping (40 in traces). (Before that was so,
/// 80 control characters made a 514-character message: the corpus keeps that input.)
pub const MAX_MESSAGE_CHARS: usize = 400;

/// Reads a fuzz input front to back; past the end every read gives zeros, so any byte string
/// decodes to something.
#[derive(Debug)]
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(crate) fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
}

/// Key/value pairs from bytes: one pair per line, split at the first `=`. A key of one byte
/// from 1 to the number of known keys stands for the known key of that rank, so the fuzzer
/// reaches every key's value parsing without having to spell the key.
pub fn decode_pairs(data: &[u8]) -> Vec<(String, String)> {
    data.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (key, value) = match line.iter().position(|&b| b == b'=') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => (line, &line[line.len()..]),
            };
            let key = match key {
                [k] if (1..=keys::ALL.len()).contains(&usize::from(*k)) => {
                    keys::ALL[usize::from(*k) - 1].to_string()
                }
                _ => String::from_utf8_lossy(key).into_owned(),
            };
            (key, String::from_utf8_lossy(value).into_owned())
        })
        .collect()
}

/// The `config_parser` target. For pairs decoded from `data` ([`decode_pairs`]):
/// - what `ArenaConfig::from_pairs` accepts validates, an arena can be made with it, and its
///   `to_pairs()` parse back to the same config;
/// - what it rejects is `ERR_ARENA_INVALID_CONFIG` naming the first pair that is wrong on its
///   own (every pair before it parses), an `arena.*` key, with a bounded message;
/// - the same pairs behind an environment or session prefix give the same result;
/// - the "did you mean" suggestions are known keys.
pub fn config_parser(data: &[u8]) {
    let pairs = decode_pairs(data);
    let parsed = ArenaConfig::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    match &parsed {
        Ok(cfg) => check_accepted(cfg),
        Err(e) => check_rejected(&pairs, e),
    }
    check_namespaces(&pairs, &parsed);
    // A suggestion costs an edit distance per known key; a few keys per input are enough.
    for (key, _) in pairs.iter().take(2) {
        let near = nearest_key(key);
        assert!(keys::ALL.contains(&near), "nearest_key({key:?}) = {near:?}");
        let typed = nearest_typed_key(key);
        assert!(
            keys::TYPED.iter().any(|(t, _)| *t == typed),
            "nearest_typed_key({key:?}) = {typed:?}"
        );
    }
}

fn check_accepted(cfg: &ArenaConfig) {
    if let Err(e) = cfg.validate() {
        panic!("a parsed config does not validate: {e}; {cfg:?}");
    }
    if let Err(e) = crate::Arena::new(crate::VirtualAllocator::default(), cfg.clone()) {
        panic!("an arena cannot be made with a parsed config: {e}; {cfg:?}");
    }
    let pairs = cfg.to_pairs();
    match ArenaConfig::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))) {
        Ok(back) => assert_eq!(&back, cfg, "to_pairs() {pairs:?} parse to another config"),
        Err(e) => panic!("to_pairs() {pairs:?} of a parsed config are rejected: {e}"),
    }
    assert!(
        cfg.differing_keys(cfg).is_empty(),
        "a config differs from itself"
    );
}

fn check_rejected(pairs: &[(String, String)], e: &ArenaError) {
    let ArenaError::InvalidConfig { key, value, .. } = e else {
        panic!("a rejection is not ERR_ARENA_INVALID_CONFIG: {e:?}");
    };
    assert!(
        key.starts_with("arena."),
        "rejected key {key:?} is not arena.*"
    );
    let message = e.to_string();
    assert!(
        message.chars().count() <= MAX_MESSAGE_CHARS,
        "a {}-character message: {}…",
        message.chars().count(),
        message.chars().take(200).collect::<String>()
    );
    // The first pair that fails on its own is the one named; everything before it parses.
    let first_bad = pairs
        .iter()
        .position(|(k, v)| ArenaConfig::default().set(k, v).is_err());
    let Some(i) = first_bad else {
        panic!("rejected ({e}) though every pair parses on its own");
    };
    assert_eq!(
        (&pairs[i].0, &pairs[i].1),
        (key, value),
        "the error names another pair than the first bad one"
    );
    let prefix = &pairs[..i];
    if let Err(e) = ArenaConfig::from_pairs(prefix.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        panic!("the pairs before the bad one are rejected: {e}");
    }
}

/// The pairs addressed to a factory or a session parse as the bare pairs do.
fn check_namespaces(pairs: &[(String, String)], bare: &Result<ArenaConfig, ArenaError>) {
    let arena_pairs: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, _)| k.starts_with("arena."))
        .cloned()
        .collect();
    let env: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (format!("ep_factory.Fuzz.{k}"), v.clone()))
        .collect();
    let session: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (format!("ep.fuzzep.{k}"), v.clone()))
        .collect();
    for (what, got) in [
        ("environment", env_arena_options(env, "Fuzz")),
        ("session", session_arena_options(session, "FuzzEP")),
    ] {
        assert_eq!(got, arena_pairs, "{what} options are not the arena.* pairs");
        let parsed = ArenaConfig::from_pairs(got.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(
            &parsed, bare,
            "{what} options parse otherwise than the bare pairs"
        );
    }
}

/// The `trace_parser` target. For any bytes:
/// - strict parsing fails at the first line lenient parsing skips, with the same error, or
///   at the line where lenient parsing stops too (a line too long); else both give the same
///   operations and strict skips nothing;
/// - every error names a line of the input and has a bounded message, and a lenient parse
///   keeps at most [`MAX_SKIPPED_KEPT`] of them while counting all;
/// - reading through a small buffer, a few bytes at a time, gives the same result;
/// - a line limit stops the parse at the line after it and changes nothing before;
/// - what parses, formatted again, parses back strictly to the same operations.
pub fn trace_parser(data: &[u8]) {
    let lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
    let lenient = parse_trace_bytes(data, true);
    let strict = parse_trace_bytes(data, false);
    match (&strict, &lenient) {
        (Ok(s), Ok(l)) => {
            assert!(
                s.skipped.is_empty() && s.skipped_lines == 0,
                "strict parsing skipped lines"
            );
            assert_eq!(s, l, "strict and lenient parsing differ");
        }
        (Err(e), Ok(l)) => assert_eq!(
            l.skipped.first(),
            Some(e),
            "strict parsing failed elsewhere than lenient's first skipped line"
        ),
        (Err(s), Err(l)) => assert!(
            s == l || s.line < l.line,
            "strict parsing failed at {s}, lenient at {l}"
        ),
        (Ok(_), Err(e)) => panic!("lenient parsing failed where strict parsing did not: {e}"),
    }
    for result in [&strict, &lenient] {
        match result {
            Ok(t) => {
                assert_eq!(
                    t.skipped.len(),
                    t.skipped_lines.min(MAX_SKIPPED_KEPT),
                    "skipped lines kept and counted differ"
                );
                for e in &t.skipped {
                    check_line_error(e, lines);
                }
            }
            Err(e) => check_line_error(e, lines),
        }
    }
    let capacity = 1 + usize::from(data.last().map_or(0, |b| b % 16));
    for lenient_mode in [false, true] {
        let whole = if lenient_mode { &lenient } else { &strict };
        let small = parse_trace_reader(
            std::io::BufReader::with_capacity(capacity, data),
            lenient_mode,
            MAX_TRACE_LINES,
        );
        assert_eq!(
            &small, whole,
            "reading {capacity} bytes at a time changes the result"
        );
    }
    check_line_limit(data, &lenient);
    if let Ok(t) = &lenient {
        let again = format_trace(&t.ops);
        match parse_trace_bytes(again.as_bytes(), false) {
            Ok(back) => assert_eq!(back.ops, t.ops, "formatted ops parse back otherwise"),
            Err(e) => panic!("formatted ops do not parse back: {e}\n{again}"),
        }
    }
}

/// A limit of `k` lines, `k` from the input: a parse that read no further than line `k` is
/// unchanged, any other stops with an error at line `k + 1`.
fn check_line_limit(data: &[u8], whole: &Result<ParsedTrace, TraceLineError>) {
    let k = usize::from(data.first().map_or(0, |b| b % 8));
    let limited = parse_trace_reader(data, true, k);
    let read_lines = match whole {
        Err(e) => e.line,
        Ok(_) => {
            data.split(|&b| b == b'\n').count()
                - usize::from(data.last() == Some(&b'\n') || data.is_empty())
        }
    };
    if read_lines <= k {
        assert_eq!(
            &limited, whole,
            "a limit of {k} lines changed a {read_lines}-line parse"
        );
    } else {
        match limited {
            Err(e) => assert_eq!(e.line, k + 1, "a limit of {k} lines stopped at {e}"),
            Ok(_) => panic!("a limit of {k} lines let {read_lines} lines through"),
        }
    }
}

fn check_line_error(e: &TraceLineError, lines: usize) {
    assert!(
        (1..=lines).contains(&e.line),
        "line {} of a {lines}-line input",
        e.line
    );
    let n = e.message.chars().count();
    assert!(
        n <= MAX_MESSAGE_CHARS,
        "a {n}-character message: {}…",
        e.message.chars().take(200).collect::<String>()
    );
}
