//! cargo-fuzz target; the body, and what it checks, is cuda_arena_model::arena_ops.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cuda_arena_model::arena_ops(data);
});
