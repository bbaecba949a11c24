//! From JS values to Rust ones and back: checked integers and bigints, config objects, coded
//! errors, and the generation-tagged handle table that JS objects point into.

pub(crate) mod bigint;
pub(crate) mod convert;
pub(crate) mod error;
pub(crate) mod handles;
