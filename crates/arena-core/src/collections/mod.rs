//! Data structures with no arena policy in them, shared by the arena and the other
//! allocators: maps keyed by device address.

pub(crate) mod addr_map;
