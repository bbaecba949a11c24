//! Streams: the arena's logical streams and their sync clock (`stream.rs`), events on streams
//! the host owns (`stream_events.rs`), the host stream each thread allocated on last
//! (`threads_on.rs`), the bounded table of those host streams (`foreign_streams.rs`), and how
//! that table lends one to a call without a count (`lent_streams.rs`).

pub mod foreign_streams;
pub(crate) mod lent_streams;
pub(crate) mod stream;
pub mod stream_events;
pub(crate) mod threads_on;
