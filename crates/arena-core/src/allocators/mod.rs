//! What every allocator is ([`allocator::Allocator`], ONNX Runtime's `OrtAllocator` in Rust)
//! and the allocator that is not an arena: the memory pool's simulation.

pub(crate) mod allocator;
pub(crate) mod block_state;
pub(crate) mod live_blocks;
pub(crate) mod pool;
