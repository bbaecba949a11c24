//! The shadow model of cuda-arena's allocators, and the bodies of the fuzz targets: test code,
//! in a crate of its own so that `cuda-arena-core` ships none of it. One model, used by
//! - the cargo-fuzz targets in `fuzz/` (nightly), which call [`config_parser`],
//!   [`arena_ops`] and [`trace_parser`] on the fuzzer's bytes;
//! - `cuda-arena-core`'s `tests/fuzz_replay.rs` (every `cargo test`), which calls the same
//!   functions on the committed corpus and on seeded random bytes, so CI checks exactly what
//!   the fuzzer fuzzes;
//! - `cuda-arena-core`'s `tests/model.rs`, which generates setups and operations with proptest
//!   and runs them through [`run_ops`] and [`run_ops_on_threads`].
//!
//! Each target takes arbitrary bytes and panics, saying what went wrong, when an invariant
//! fails. Nothing in `cuda-arena-core` panics on any input, so a panic here is a bug.
//! `docs/fuzzing.md` says what each checks and how to run the fuzzers.

mod arena_ops;
mod config_parser;
mod trace_parser;

pub use arena_ops::{
    arena_ops, decode_ops, run_ops, run_ops_on_threads, Backend, Kind, Op, OpsTally, Setup, STREAMS,
};
pub use config_parser::{config_parser, decode_pairs};
pub use trace_parser::trace_parser;

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
