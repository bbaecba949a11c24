//! The memory-pool allocator (`arena.use_cuda_mempool=1`): a private pool per device,
//! stream-ordered allocation and free, trim on shrink; stats as ONNX Runtime's plugin
//! reports them (`TotalAllocated` is the pool's reserved memory).

use crate::device::DeviceContext;
use crate::driver;
use crate::stream::{check_live, with_stream};
use cuda_arena_core::{
    Allocator, AllocatorStats, ArenaConfig, ArenaError, LiveBlocks, MemoryInfo, MemoryKind,
    MemoryLog, Result, Stream,
};
use parking_lot::Mutex;
use std::sync::Arc;

/// A stream-ordered allocator over a private `CUmemoryPool`.
#[derive(Debug)]
pub struct CudaPoolAllocator {
    ctx: Arc<DeviceContext>,
    pool: usize,
    bytes_to_keep_on_shrink: u64,
    state: Mutex<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    /// Live allocations, tagged with the native stream each was allocated on.
    live: LiveBlocks<u64>,
    stats: AllocatorStats,
    /// Set by `retire`: the pool is trimmed and every call fails.
    retired: bool,
}

impl PoolState {
    fn check_live(&self) -> Result<()> {
        if self.retired {
            Err(ArenaError::Released {
                what: "the allocator".into(),
            })
        } else {
            Ok(())
        }
    }
}

impl CudaPoolAllocator {
    /// A new pool on `ctx`'s device. Without `arena.cuda_mempool_release_threshold` the
    /// threshold is unlimited (DESIGN decision 9); an explicit value, 0 included, is applied.
    pub(crate) fn new(ctx: Arc<DeviceContext>, config: &ArenaConfig) -> Result<Self> {
        ctx.make_current()?;
        let pool = driver::pool_create(ctx.ordinal)?;
        let threshold = config.cuda_mempool_release_threshold.unwrap_or(u64::MAX);
        if let Err(e) = driver::pool_set_release_threshold(pool, threshold) {
            let _ = driver::pool_destroy(pool);
            return Err(e);
        }
        Ok(CudaPoolAllocator {
            ctx,
            pool: pool as usize,
            bytes_to_keep_on_shrink: config.cuda_mempool_bytes_to_keep_on_shrink,
            state: Mutex::new(PoolState {
                live: LiveBlocks::new("this memory pool"),
                stats: AllocatorStats::default(),
                retired: false,
            }),
        })
    }

    fn raw_pool(&self) -> driver::CUmemoryPool {
        self.pool as driver::CUmemoryPool
    }

    fn allocate(&self, size: u64, stream: u64) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(None);
        }
        check_live(stream)?;
        self.ctx.make_current()?;
        // The driver call runs outside the lock, so threads allocate from the pool at once.
        let addr = with_stream(stream, |s| {
            driver::pool_alloc_async(self.raw_pool(), size, s)
        })?;
        let mut st = self.state.lock();
        if let Err(e) = st.check_live() {
            // Retired meanwhile: the block goes straight back.
            let _ = with_stream(stream, |s| driver::free_async(addr, s));
            return Err(e);
        }
        st.live.insert(addr, size, stream);
        st.stats.add_in_use(size, size);
        Ok(Some(addr))
    }

    /// Runs `op` once `[addr, addr+len)` is inside one live allocation whose stream has
    /// finished its work (so a synchronous copy sees what the stream wrote).
    fn in_range<T>(&self, addr: u64, len: u64, op: impl FnOnce() -> Result<T>) -> Result<T> {
        let st = self.state.lock();
        st.check_live()?;
        let stream = st.live.containing(addr, len)?;
        self.ctx.make_current()?;
        with_stream(stream, driver::stream_synchronize)?;
        op()
    }
}

impl CudaPoolAllocator {
    /// Frees every live block and trims the pool to nothing.
    fn retire_state(&self, st: &mut PoolState) {
        st.retired = true;
        if self.ctx.make_current().is_err() {
            return;
        }
        for (addr, _, stream) in st.live.drain() {
            let _ = with_stream(stream, |s| driver::free_async(addr, s));
        }
        st.stats = AllocatorStats::default();
        // Every stream's frees must land before the memory goes back.
        let _ = driver::ctx_synchronize();
        let _ = driver::pool_trim_to(self.raw_pool(), 0);
    }
}

impl Drop for CudaPoolAllocator {
    fn drop(&mut self) {
        Allocator::retire(self);
        if self.ctx.make_current().is_ok() {
            let _ = driver::pool_destroy(self.raw_pool());
        }
    }
}

impl Allocator for CudaPoolAllocator {
    fn alloc(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, 0)
    }

    fn free(&self, addr: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        st.check_live()?;
        // DESIGN decision 8: a foreign free is an error, not a logged warning.
        let (size, stream) = st.live.get(addr)?;
        self.ctx.make_current()?;
        with_stream(stream, |s| driver::free_async(addr, s))?;
        st.live.remove(addr)?;
        st.stats.remove_in_use(size, size);
        Ok(())
    }

    /// ORT's pool serves a reserve as an allocation.
    fn reserve(&self, size: u64) -> Result<Option<u64>> {
        self.allocate(size, 0)
    }

    fn is_stream_aware(&self) -> bool {
        true
    }

    fn alloc_on_stream(&self, size: u64, stream: &Stream) -> Result<Option<u64>> {
        self.allocate(size, stream.native())
    }

    fn info(&self) -> MemoryInfo {
        MemoryInfo::new(MemoryKind::Cuda, self.ctx.ordinal)
    }

    fn stats(&self) -> AllocatorStats {
        let st = self.state.lock();
        let mut s = st.stats;
        if !st.retired && self.ctx.make_current().is_ok() {
            s.total_allocated = driver::pool_reserved_current(self.raw_pool()).unwrap_or(0);
        }
        s
    }

    fn can_shrink(&self) -> bool {
        true
    }

    fn shrink(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.check_live()?;
        self.ctx.make_current()?;
        driver::pool_trim_to(self.raw_pool(), self.bytes_to_keep_on_shrink)?;
        st.stats.num_arena_shrinkages += 1;
        Ok(())
    }

    fn memory_log(&self) -> MemoryLog {
        let stats = self.stats();
        let st = self.state.lock();
        st.live.log(stats)
    }

    fn allocated_size(&self, addr: u64) -> Result<u64> {
        let st = self.state.lock();
        st.check_live()?;
        Ok(st.live.get(addr)?.0)
    }

    fn requested_size(&self, addr: u64) -> Result<u64> {
        self.allocated_size(addr)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.in_range(addr, data.len() as u64, || driver::copy_htod(addr, data))
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        self.in_range(addr, len, || driver::copy_dtoh(out, addr))
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<()> {
        self.in_range(addr, len, || driver::memset(addr, byte, len))
    }

    fn retire(&self) {
        let mut st = self.state.lock();
        if !st.retired {
            self.retire_state(&mut st);
        }
    }
}
