//! cargo-fuzz target; the body, and what it checks, is cuda_arena_core::fuzzing::arena_ops.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cuda_arena_core::fuzzing::arena_ops(data);
});
