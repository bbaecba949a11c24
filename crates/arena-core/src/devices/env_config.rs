//! `CUDA_ARENA_CONF` (issue 13): an allocator's `arena.*` options in one environment
//! variable, for hosts that configure cuda-arena only through the environment (PyTorch's
//! pluggable allocator): `CUDA_ARENA_CONF="arena.extend_strategy=1,arena.max_mem=8589934592"`.
//!
//! As strict as every config here: entries are `key=value` separated by commas, with no
//! spaces, no empty entries, only `arena.*` keys, each at most once; the values then go through
//! [`ArenaConfig::from_pairs`]. Every rejection names the entry or key and says why; nothing
//! falls back to a default. The empty string means the defaults.

use crate::types::config::{nearest_key, ArenaConfig};
use crate::types::error::{bounded, ArenaError, Result};

/// The environment variable's name.
pub const ENV_CONF: &str = "CUDA_ARENA_CONF";

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ArenaError {
    ArenaError::InvalidConfig {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Splits `conf` into its `(key, value)` pairs, in order, checking the form (see the module
/// docs) but not the values.
pub fn parse_env_pairs(conf: &str) -> Result<Vec<(String, String)>> {
    if conf.is_empty() {
        return Ok(Vec::new());
    }
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (i, entry) in conf.split(',').enumerate() {
        let n = i + 1;
        if entry.is_empty() {
            return Err(invalid(
                ENV_CONF,
                conf,
                format!(
                    "entry {n} is empty: entries are arena.key=value separated by single commas"
                ),
            ));
        }
        let Some((key, value)) = entry.split_once('=') else {
            return Err(invalid(
                entry,
                "",
                format!("entry {n} has no '=': expected arena.key=value"),
            ));
        };
        if key.trim() != key || value.trim() != value {
            return Err(invalid(
                key,
                value,
                format!("entry {n} has spaces around its key or value"),
            ));
        }
        if !key.starts_with("arena.") {
            return Err(invalid(
                key,
                value,
                format!(
                    "{ENV_CONF} takes only arena.* keys; did you mean {}?",
                    nearest_key(&format!("arena.{key}"))
                ),
            ));
        }
        if pairs.iter().any(|(k, _)| k == key) {
            return Err(invalid(
                key,
                value,
                format!("the key is given twice in {ENV_CONF}"),
            ));
        }
        pairs.push((key.to_string(), value.to_string()));
    }
    Ok(pairs)
}

/// The configuration `conf` describes: its pairs over the defaults.
pub fn env_config(conf: &str) -> Result<ArenaConfig> {
    ArenaConfig::from_pairs(parse_env_pairs(conf)?)
}

/// A one-line description of why `conf` was refused, naming the key, for logs.
pub fn describe_env_error(e: &ArenaError) -> String {
    match e {
        ArenaError::InvalidConfig { key, .. } => {
            format!("{ENV_CONF} is invalid at {}: {e}", bounded(key))
        }
        other => format!("{ENV_CONF} is invalid: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::config::ExtendStrategy;

    /// The key an error names, or a panic naming what was accepted.
    fn refused(conf: &str) -> (String, String) {
        match env_config(conf) {
            Err(ArenaError::InvalidConfig { key, reason, .. }) => (key, reason),
            other => panic!("{conf:?} was not refused as an invalid config: {other:?}"),
        }
    }

    #[test]
    fn the_empty_string_is_the_defaults() {
        assert_eq!(env_config("").expect("defaults"), ArenaConfig::default());
    }

    #[test]
    fn pairs_are_applied_in_order_over_the_defaults() {
        let c = env_config("arena.extend_strategy=1,arena.max_mem=8589934592").expect("valid");
        assert_eq!(c.extend_strategy, ExtendStrategy::SameAsRequested);
        assert_eq!(c.max_mem, 8 << 30);
        assert_eq!(
            parse_env_pairs("arena.use_cuda_mempool=1").expect("valid"),
            vec![("arena.use_cuda_mempool".to_string(), "1".to_string())]
        );
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_key() {
        let (key, _) = refused("arena.extend_strategy=1,arena.max_mem=8GB");
        assert_eq!(key, "arena.max_mem");
        let (key, _) = refused("arena.use_cuda_mempool=yes");
        assert_eq!(key, "arena.use_cuda_mempool");
    }

    #[test]
    fn an_unknown_arena_key_is_refused_with_the_nearest_known_key() {
        let (key, reason) = refused("arena.max_memory=1");
        assert_eq!(key, "arena.max_memory");
        assert!(reason.contains("arena.max_mem"), "{reason}");
    }

    #[test]
    fn a_key_outside_arena_is_refused_not_ignored() {
        let (key, reason) = refused("max_mem=1");
        assert_eq!(key, "max_mem");
        assert!(reason.contains("arena.max_mem"), "{reason}");
    }

    #[test]
    fn empty_entries_are_refused() {
        for conf in [
            ",",
            "arena.max_mem=1,",
            ",arena.max_mem=1",
            "arena.max_mem=1,,arena.extend_strategy=1",
        ] {
            let (key, reason) = refused(conf);
            assert_eq!(key, ENV_CONF, "{conf:?}");
            assert!(reason.contains("empty"), "{conf:?}: {reason}");
        }
    }

    #[test]
    fn an_entry_without_an_equals_sign_is_refused() {
        let (key, reason) = refused("arena.max_mem");
        assert_eq!(key, "arena.max_mem");
        assert!(reason.contains("'='"), "{reason}");
    }

    #[test]
    fn spaces_are_refused_wherever_they_are() {
        for conf in [
            " arena.max_mem=1",
            "arena.max_mem =1",
            "arena.max_mem= 1",
            "arena.max_mem=1 ",
            "arena.max_mem=1, arena.extend_strategy=1",
            " ",
        ] {
            assert!(env_config(conf).is_err(), "{conf:?} was accepted");
        }
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let (key, reason) = refused("arena.max_mem=1,arena.max_mem=2");
        assert_eq!(key, "arena.max_mem");
        assert!(reason.contains("twice"), "{reason}");
    }

    #[test]
    fn a_value_with_an_equals_sign_is_refused_as_a_value() {
        let (key, _) = refused("arena.max_mem=1=2");
        assert_eq!(key, "arena.max_mem");
    }

    #[test]
    fn the_description_names_the_variable_and_the_key() {
        let e = env_config("arena.max_mem=lots").expect_err("invalid");
        let d = describe_env_error(&e);
        assert!(d.contains(ENV_CONF) && d.contains("arena.max_mem"), "{d}");
    }

    #[test]
    fn every_error_is_an_invalid_config() {
        for conf in [
            "x",
            "=",
            "=1",
            "arena.=1",
            "arena.max_mem=",
            "a=b=c",
            "arena.max_mem=-1",
        ] {
            assert_eq!(
                env_config(conf).map_err(|e| e.code()),
                Err("ERR_ARENA_INVALID_CONFIG"),
                "{conf:?}"
            );
        }
    }
}
