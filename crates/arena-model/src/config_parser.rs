//! The `config_parser` target: `ArenaConfig::from_pairs` on key/value pairs decoded from bytes.

use crate::MAX_MESSAGE_CHARS;
use cuda_arena_core::types::config::{keys, nearest_key, nearest_typed_key};
use cuda_arena_core::{
    env_arena_options, session_arena_options, AddressSpaceAllocator, Arena, ArenaConfig, ArenaError,
};

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
    if let Err(e) = Arena::new(AddressSpaceAllocator::default(), cfg.clone()) {
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
