//! cargo-fuzz target; the body, and what it checks, is cuda_arena_model::config_parser.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cuda_arena_model::config_parser(data);
});
