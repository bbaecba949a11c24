//! `ArenaConfig` parsing: ORT's keys and defaults, and DESIGN decision 2's strictness.

use cuda_arena_core::types::config::{keys, nearest_key};
use cuda_arena_core::{ArenaConfig, ArenaError, ExtendStrategy};

fn parse(key: &str, value: &str) -> Result<ArenaConfig, ArenaError> {
    ArenaConfig::from_pairs([(key, value)])
}

fn rejection(key: &str, value: &str) -> (String, String, String) {
    match parse(key, value) {
        Err(ArenaError::InvalidConfig { key, value, reason }) => (key, value, reason),
        other => panic!("{key}={value:?} should be rejected, got {other:?}"),
    }
}

#[test]
fn no_pairs_give_onnx_runtime_defaults() {
    let c = ArenaConfig::from_pairs(Vec::<(String, String)>::new()).expect("empty is valid");
    assert_eq!(c.extend_strategy, ExtendStrategy::NextPowerOfTwo);
    assert_eq!(c.initial_chunk_size_bytes, 1_048_576);
    assert_eq!(c.max_dead_bytes_per_chunk, 134_217_728);
    assert_eq!(c.initial_growth_chunk_size_bytes, 2_097_152);
    assert_eq!(c.max_power_of_two_extend_bytes, 1_073_741_824);
    assert_eq!(c.max_mem, u64::MAX);
    assert!(!c.use_cuda_mempool);
    assert_eq!(c.cuda_mempool_release_threshold, None);
    assert_eq!(c.cuda_mempool_bytes_to_keep_on_shrink, 0);
}

#[test]
fn every_key_is_parsed_into_its_field() {
    let c = ArenaConfig::from_pairs([
        ("arena.extend_strategy", "1"),
        ("arena.initial_chunk_size_bytes", "4096"),
        ("arena.max_dead_bytes_per_chunk", "512"),
        ("arena.initial_growth_chunk_size_bytes", "8192"),
        ("arena.max_power_of_two_extend_bytes", "65536"),
        ("arena.max_mem", "1000000"),
        ("arena.use_cuda_mempool", "1"),
        ("arena.cuda_mempool_release_threshold", "0"),
        ("arena.cuda_mempool_bytes_to_keep_on_shrink", "77"),
    ])
    .expect("valid");
    assert_eq!(c.extend_strategy, ExtendStrategy::SameAsRequested);
    assert_eq!(
        (
            c.initial_chunk_size_bytes,
            c.max_dead_bytes_per_chunk,
            c.initial_growth_chunk_size_bytes
        ),
        (4096, 512, 8192)
    );
    assert_eq!(
        (c.max_power_of_two_extend_bytes, c.max_mem),
        (65536, 1_000_000)
    );
    assert!(c.use_cuda_mempool);
    assert_eq!(
        c.cuda_mempool_release_threshold,
        Some(0),
        "an explicit 0 is kept, not treated as unset"
    );
    assert_eq!(c.cuda_mempool_bytes_to_keep_on_shrink, 77);
}

#[test]
fn max_mem_zero_means_unlimited() {
    assert_eq!(
        parse("arena.max_mem", "0").expect("valid").max_mem,
        u64::MAX
    );
    assert_eq!(
        parse("arena.max_mem", "18446744073709551615")
            .expect("valid")
            .max_mem,
        u64::MAX
    );
}

#[test]
fn values_that_are_not_plain_digits_are_rejected_naming_key_and_value() {
    for bad in [
        "4096abc", " 1", "1 ", "1e9", "+1", "-1", "", "0x10", "1.0", "١٢",
    ] {
        let (key, value, reason) = rejection("arena.initial_chunk_size_bytes", bad);
        assert_eq!(key, "arena.initial_chunk_size_bytes");
        assert_eq!(value, bad);
        assert!(!reason.is_empty());
    }
}

#[test]
fn int32_keys_must_be_between_1_and_int32_max() {
    for key in [
        keys::INITIAL_CHUNK_SIZE_BYTES,
        keys::MAX_DEAD_BYTES_PER_CHUNK,
        keys::INITIAL_GROWTH_CHUNK_SIZE_BYTES,
    ] {
        rejection(key, "0");
        rejection(key, "2147483648");
        assert!(parse(key, "2147483647").is_ok());
        assert!(parse(key, "1").is_ok());
    }
}

#[test]
fn onnx_runtime_plugin_test_values_are_rejected_or_accepted_alike() {
    rejection("arena.initial_chunk_size_bytes", "not_a_number");
    rejection("arena.initial_chunk_size_bytes", "-100");
    rejection("arena.max_mem", "abc");
    assert!(parse("arena.max_mem", "0").is_ok());
}

#[test]
fn extend_strategy_accepts_only_0_and_1() {
    assert_eq!(
        parse("arena.extend_strategy", "0")
            .expect("valid")
            .extend_strategy,
        ExtendStrategy::NextPowerOfTwo
    );
    for bad in ["-1", "2", "", "abc", " 1", "01"] {
        rejection("arena.extend_strategy", bad);
    }
}

#[test]
fn flags_accept_only_0_and_1() {
    for bad in ["true", "2", "", "yes"] {
        rejection("arena.use_cuda_mempool", bad);
    }
}

#[test]
fn max_power_of_two_extend_bytes_is_rounded_up_to_a_multiple_of_256() {
    assert_eq!(
        parse("arena.max_power_of_two_extend_bytes", "1000")
            .expect("valid")
            .max_power_of_two_extend_bytes,
        1024
    );
    assert_eq!(
        parse("arena.max_power_of_two_extend_bytes", "1")
            .expect("valid")
            .max_power_of_two_extend_bytes,
        256
    );
    rejection("arena.max_power_of_two_extend_bytes", "0");
    rejection("arena.max_power_of_two_extend_bytes", "9223372036854775808");
}

#[test]
fn values_past_u64_are_rejected() {
    rejection("arena.max_mem", "18446744073709551616");
    rejection(
        "arena.cuda_mempool_release_threshold",
        "99999999999999999999999",
    );
}

#[test]
fn an_unknown_arena_key_is_rejected_with_the_nearest_known_key() {
    let (key, _, reason) = rejection("arena.max_memory", "5");
    assert_eq!(key, "arena.max_memory");
    assert!(reason.contains("arena.max_mem"), "{reason}");
    assert_eq!(nearest_key("arena.extend_stratgy"), "arena.extend_strategy");
    assert_eq!(
        nearest_key("arena.initial_chunk_size"),
        "arena.initial_chunk_size_bytes"
    );
}

#[test]
fn keys_outside_the_arena_namespace_are_ignored() {
    let c = ArenaConfig::from_pairs([
        ("session.foo", "bar"),
        ("max_mem", "oops"),
        ("ARENA.max_mem", "x"),
    ])
    .expect("ignored");
    assert_eq!(c, ArenaConfig::default());
}

#[test]
fn keys_are_case_sensitive() {
    rejection("arena.Max_Mem", "5");
}

#[test]
fn later_pairs_override_earlier_ones() {
    let c = ArenaConfig::from_pairs([("arena.max_mem", "1024"), ("arena.max_mem", "2048")])
        .expect("valid");
    assert_eq!(c.max_mem, 2048);
}

#[test]
fn a_rejected_config_error_has_the_invalid_config_code() {
    assert_eq!(
        parse("arena.max_mem", "-5").expect_err("negative").code(),
        "ERR_ARENA_INVALID_CONFIG"
    );
}

#[test]
fn configs_built_in_code_are_validated_by_the_arena() {
    let c = ArenaConfig {
        max_power_of_two_extend_bytes: 1000,
        ..ArenaConfig::default()
    };
    let err = cuda_arena_core::Arena::new(cuda_arena_core::AddressSpaceAllocator::default(), c)
        .expect_err("not a multiple of 256");
    assert_eq!(err.code(), "ERR_ARENA_INVALID_CONFIG");
}

#[test]
fn differing_keys_names_exactly_the_keys_that_differ() {
    let a = ArenaConfig::default();
    let b = ArenaConfig {
        max_mem: 1 << 30,
        extend_strategy: ExtendStrategy::SameAsRequested,
        ..a.clone()
    };
    assert_eq!(
        a.differing_keys(&b),
        vec!["arena.extend_strategy", "arena.max_mem"]
    );
    assert!(a.differing_keys(&a.clone()).is_empty());
}

/// Issue 11, item 11: the README's maximum was refused with a message quoting 2^63.
#[test]
fn the_documented_maximum_of_max_power_of_two_extend_bytes_is_accepted_and_round_trips() {
    let c = parse("arena.max_power_of_two_extend_bytes", "9223372036854775807")
        .expect("2^63-1 is in the documented range");
    assert_eq!(c.max_power_of_two_extend_bytes, 1 << 63);
    c.validate().expect("what the parser returns validates");
    let pairs = c.to_pairs();
    let back = ArenaConfig::from_pairs(pairs.clone()).expect("a parsed config's own pairs parse");
    assert_eq!(back, c);
    assert_eq!(back.to_pairs(), pairs);
}

#[test]
fn the_virtual_memory_keys_are_parsed_into_their_fields() {
    let c = ArenaConfig::from_pairs([
        ("arena.use_virtual_memory", "1"),
        ("arena.vm_page_size_bytes", "4194304"),
        ("arena.vm_reserve_bytes", "17179869184"),
        ("arena.vm_unmap_threshold_bytes", "0"),
        ("arena.vm_peak_headroom_percent", "25"),
        ("arena.vm_churn_headroom_percent", "0"),
        ("arena.vm_map_unit_bytes", "0"),
    ])
    .expect("valid");
    assert_eq!(c.vm_map_unit_bytes, 0);
    assert!(c.use_virtual_memory);
    assert_eq!(
        (
            c.vm_page_size_bytes,
            c.vm_reserve_bytes,
            c.vm_peak_headroom_percent,
            c.vm_churn_headroom_percent
        ),
        (4 << 20, 16 << 30, 25, 0)
    );
    assert_eq!(
        c.vm_unmap_threshold_bytes,
        Some(0),
        "an explicit 0 is kept, not treated as unset"
    );
    let d = ArenaConfig::default();
    assert!(
        d.use_virtual_memory,
        "the default device arena maps pages (issue 25)"
    );
    assert_eq!(
        (
            d.vm_page_size_bytes,
            d.vm_reserve_bytes,
            d.vm_unmap_threshold_bytes
        ),
        (0, 0, None)
    );
    assert_eq!(d.vm_peak_headroom_percent, 2);
    assert_eq!(d.vm_churn_headroom_percent, 30);
    assert_eq!(d.vm_map_unit_bytes, 64 << 20);
}

#[test]
fn bad_virtual_memory_values_are_rejected_naming_the_key() {
    for (key, value) in [
        ("arena.use_virtual_memory", "2"),
        ("arena.use_virtual_memory", "true"),
        ("arena.vm_page_size_bytes", "3000"),
        ("arena.vm_page_size_bytes", "128"),
        ("arena.vm_page_size_bytes", "2147483648"),
        ("arena.vm_page_size_bytes", "-4096"),
        ("arena.vm_reserve_bytes", "4611686018427387905"),
        ("arena.vm_reserve_bytes", "1e9"),
        ("arena.vm_unmap_threshold_bytes", " 1"),
        ("arena.vm_unmap_threshold_bytes", "18446744073709551616"),
        ("arena.vm_peak_headroom_percent", "1001"),
        ("arena.vm_peak_headroom_percent", "2.5"),
        ("arena.vm_churn_headroom_percent", "1001"),
        ("arena.vm_churn_headroom_percent", "-1"),
        ("arena.vm_map_unit_bytes", "4611686018427387905"),
        ("arena.vm_map_unit_bytes", "64MiB"),
    ] {
        let (k, v, reason) = rejection(key, value);
        assert_eq!((k.as_str(), v.as_str()), (key, value), "{reason}");
    }
    assert_eq!(nearest_key("arena.vm_page_size"), keys::VM_PAGE_SIZE_BYTES);
    assert_eq!(
        nearest_key("arena.use_virtual_mem"),
        keys::USE_VIRTUAL_MEMORY
    );
}

#[test]
fn virtual_memory_fields_built_in_code_are_validated() {
    let c = ArenaConfig {
        vm_page_size_bytes: 3000,
        ..ArenaConfig::default()
    };
    assert_eq!(
        c.validate().map_err(|e| e.code()),
        Err("ERR_ARENA_INVALID_CONFIG")
    );
    let c = ArenaConfig {
        vm_peak_headroom_percent: 5000,
        ..ArenaConfig::default()
    };
    assert_eq!(
        c.validate().map_err(|e| e.code()),
        Err("ERR_ARENA_INVALID_CONFIG")
    );
}
