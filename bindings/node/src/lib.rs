//! napi-rs binding of cuda-arena: converts arguments, calls `arena-core`, maps errors to JS
//! `Error`s whose `code` is the DESIGN's code. No arena logic lives here; the typed API users
//! import is in `ts/`. Every entry point catches panics, so none crosses into Node.
#![deny(unsafe_code)]
// napi classes and objects hold JS-facing values; Debug adds nothing for them.
#![allow(missing_debug_implementations)]
// In the test build napi does not register the exported functions, so they look unused.
#![cfg_attr(test, allow(dead_code))]

mod args;
mod exports;

// The modules keep the paths they had when the crate was flat.
pub(crate) use args::{bigint, convert, error, handles};
pub(crate) use exports::{allocator, stream};
