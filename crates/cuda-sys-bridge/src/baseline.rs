//! `cuMemAllocAsync` on the device's default pool, with an unlimited release threshold: the
//! stream-ordered allocator CUDA itself offers, as a baseline for the benchmarks.

use crate::device::DeviceContext;
use crate::driver;
use cuda_arena_core::{
    Allocator, AllocatorStats, ArenaError, MemoryInfo, MemoryKind, MemoryLog, Result,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Allocates from the default pool on one stream of its own.
#[derive(Debug)]
pub struct DefaultPoolAllocator {
    ctx: Arc<DeviceContext>,
    pool: usize,
    stream: usize,
    state: Mutex<(HashMap<u64, u64>, AllocatorStats)>,
}

impl DefaultPoolAllocator {
    pub(crate) fn new(ctx: Arc<DeviceContext>) -> Result<Self> {
        let _current = ctx.make_current()?;
        let pool = driver::default_mem_pool(ctx.dev)?;
        driver::pool_set_release_threshold(pool, u64::MAX)?;
        let stream = driver::stream_create()?;
        Ok(DefaultPoolAllocator {
            ctx,
            pool: pool as usize,
            stream: stream as usize,
            state: Mutex::new(Default::default()),
        })
    }

    fn s(&self) -> driver::CUstream {
        self.stream as driver::CUstream
    }
}

impl Drop for DefaultPoolAllocator {
    fn drop(&mut self) {
        let Ok(_current) = self.ctx.make_current() else {
            return;
        };
        let s = self.s();
        for &addr in self.state.get_mut().0.keys() {
            let _ = driver::free_async(addr, s);
        }
        let _ = driver::stream_synchronize(self.s());
        let _ = driver::stream_destroy(self.s());
        let _ = driver::pool_trim_to(self.pool as driver::CUmemoryPool, 0);
    }
}

fn no_copies() -> ArenaError {
    ArenaError::InvalidArgument {
        reason: "the default-pool baseline has no copies".into(),
    }
}

impl Allocator for DefaultPoolAllocator {
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        let _current = self.ctx.make_current()?;
        let addr = driver::alloc_async(size, self.s())?;
        let mut st = self.state.lock();
        st.0.insert(addr, size);
        st.1.add_in_use(size, size);
        Ok(Some(addr))
    }

    fn free(&self, addr: u64) -> Result<()> {
        let mut st = self.state.lock();
        let size =
            st.0.remove(&addr)
                .ok_or_else(|| ArenaError::UnknownPointer {
                    addr,
                    reason: "not live".into(),
                })?;
        st.1.remove_in_use(size, size);
        let _current = self.ctx.make_current()?;
        driver::free_async(addr, self.s())
    }

    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        self.alloc(size)
    }

    fn info(&self) -> MemoryInfo {
        MemoryInfo::new(MemoryKind::Cuda, self.ctx.ordinal)
    }

    fn stats(&self) -> AllocatorStats {
        let mut s = self.state.lock().1;
        if let Ok(_current) = self.ctx.make_current() {
            s.total_allocated =
                driver::pool_reserved_current(self.pool as driver::CUmemoryPool).unwrap_or(0);
        }
        s
    }

    fn memory_log(&self) -> MemoryLog {
        MemoryLog {
            stats: self.stats(),
            ..Default::default()
        }
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        self.state
            .lock()
            .0
            .get(&addr)
            .copied()
            .ok_or_else(|| ArenaError::UnknownPointer {
                addr,
                reason: "not live".into(),
            })
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        self.allocated_size(addr)
    }

    fn write(&self, _: u64, _: &[u8]) -> Result<()> {
        Err(no_copies())
    }

    fn read(&self, _: u64, _: &mut [u8]) -> Result<()> {
        Err(no_copies())
    }

    fn fill(&self, _: u64, _: u8, _: u64) -> Result<()> {
        Err(no_copies())
    }

    /// A benchmark baseline, never handed out by a factory: frees what is live.
    fn retire(&self) {
        let mut st = self.state.lock();
        let Ok(_current) = self.ctx.make_current() else {
            return;
        };
        for (addr, _) in st.0.drain() {
            let _ = driver::free_async(addr, self.s());
        }
        st.1 = AllocatorStats::default();
    }
}
