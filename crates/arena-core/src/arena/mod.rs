//! The BFC arena ([`Arena`]: ONNX Runtime's semantics, in `bfc.rs`; its virtual-memory mode in
//! `bfc/vm.rs`) and the structures it is made of: size bins, the free lists, the chunk slab,
//! regions, mapped pages, address maps, the live-block ledger and the lock.

mod bfc;
pub mod bins;
pub(crate) mod chunks;
pub(crate) mod directory;
pub mod free_list;
pub(crate) mod hosted_streams;
pub(crate) mod in_use_quota;
pub(crate) mod lock;
pub(crate) mod pages;
pub(crate) mod region;
pub(crate) mod sub_arenas;
pub(crate) mod thread_slot;

pub use bfc::Arena;
pub(crate) use bfc::{Source, State};
pub use sub_arenas::{leave_shared_sub_arena, uses_own_sub_arena};
