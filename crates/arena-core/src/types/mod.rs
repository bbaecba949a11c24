//! The vocabulary every part shares: the arena config, errors and their codes, memory info,
//! the memory log and the stats.

pub mod config;
pub(crate) mod error;
pub(crate) mod memory_info;
pub(crate) mod memory_log;
pub(crate) mod recording_summary;
pub mod sizes;
pub(crate) mod stats;
