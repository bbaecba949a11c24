//! Helpers shared by the integration tests.
#![allow(dead_code)]

use cuda_arena_core::{
    Allocator, Arena, ArenaConfig, ArenaError, DeviceLimits, HostAllocator, MemoryLog,
    VirtualAllocator,
};

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

pub fn config(pairs: &[(&str, &str)]) -> ArenaConfig {
    ArenaConfig::from_pairs(pairs.iter().copied()).expect("test config is valid")
}

/// An arena over an 80 GiB virtual device.
pub fn virtual_arena(pairs: &[(&str, &str)]) -> Arena<VirtualAllocator> {
    Arena::new(VirtualAllocator::default(), config(pairs)).expect("arena")
}

/// An arena over a virtual device with the given limits.
pub fn limited_arena(limits: DeviceLimits, pairs: &[(&str, &str)]) -> Arena<VirtualAllocator> {
    Arena::new(VirtualAllocator::new(limits), config(pairs)).expect("arena")
}

/// An arena over real host memory (4 GiB simulated device).
pub fn host_arena(pairs: &[(&str, &str)]) -> Arena<HostAllocator> {
    Arena::new(HostAllocator::default(), config(pairs)).expect("arena")
}

pub fn alloc(a: &(impl Allocator + ?Sized), size: u64) -> u64 {
    a.alloc(size)
        .expect("alloc succeeds")
        .expect("non-zero size gives an address")
}

pub fn code<T: std::fmt::Debug>(r: Result<T, ArenaError>) -> &'static str {
    r.expect_err("call should fail").code()
}

/// Everything observable about an allocator's state, to compare before and after a call.
pub fn snapshot(a: &(impl Allocator + ?Sized)) -> MemoryLog {
    a.memory_log()
}
