//! [`ViewCalls`]: how often ONNX Runtime called each function of an [`crate::OrtAllocatorView`],
//! so a host can see what a provider asks of its allocator (the CUDA provider, for instance,
//! never calls `Reserve` and allocates a run's tensors with `AllocOnStream`).
//!
//! Counted with relaxed atomics in the view: no lock, and a snapshot taken while ORT calls is
//! each counter's value at some moment, not one instant for all of them.

use std::sync::atomic::{AtomicU64, Ordering};

/// How often ORT called each function of a view, since the view was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewCalls {
    /// `Alloc` calls.
    pub alloc: u64,
    /// `Reserve` calls.
    pub reserve: u64,
    /// `AllocOnStream` calls, with or without a stream.
    pub alloc_on_stream: u64,
    /// Of the `AllocOnStream` calls, those with a NULL stream or a stream without a native
    /// handle (allocated as `Alloc` is).
    pub alloc_on_stream_without_stream: u64,
    /// `Free` calls with a non-NULL address.
    pub free: u64,
    /// Of the `Free` calls, those whose address the allocator did not hold (logged, ignored).
    pub free_ignored: u64,
    /// `Alloc`, `Reserve` and `AllocOnStream` calls that returned NULL for a non-zero size.
    pub failed: u64,
    /// `GetStats` calls.
    pub get_stats: u64,
    /// `Shrink` calls.
    pub shrink: u64,
    /// Streams this view's `AllocOnStream` calls made known to the allocator: a native handle
    /// the allocator did not know yet (or knew as another stream, since destroyed).
    pub new_streams: u64,
}

/// Which counter a call bumps.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    Alloc,
    Reserve,
    AllocOnStream,
    AllocOnStreamWithoutStream,
    Free,
    FreeIgnored,
    Failed,
    GetStats,
    Shrink,
    NewStream,
}

/// The view's counters.
#[derive(Debug, Default)]
pub(crate) struct CallCounters([AtomicU64; 10]);

impl CallCounters {
    pub(crate) fn bump(&self, call: Call) {
        self.0[call as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ViewCalls {
        let get = |c: Call| self.0[c as usize].load(Ordering::Relaxed);
        ViewCalls {
            alloc: get(Call::Alloc),
            reserve: get(Call::Reserve),
            alloc_on_stream: get(Call::AllocOnStream),
            alloc_on_stream_without_stream: get(Call::AllocOnStreamWithoutStream),
            free: get(Call::Free),
            free_ignored: get(Call::FreeIgnored),
            failed: get(Call::Failed),
            get_stats: get(Call::GetStats),
            shrink: get(Call::Shrink),
            new_streams: get(Call::NewStream),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_bumps_its_own_counter_only() {
        let all = [
            Call::Alloc,
            Call::Reserve,
            Call::AllocOnStream,
            Call::AllocOnStreamWithoutStream,
            Call::Free,
            Call::FreeIgnored,
            Call::Failed,
            Call::GetStats,
            Call::Shrink,
            Call::NewStream,
        ];
        for (i, call) in all.iter().enumerate() {
            let c = CallCounters::default();
            for _ in 0..=i {
                c.bump(*call);
            }
            let s = c.snapshot();
            let values = [
                s.alloc,
                s.reserve,
                s.alloc_on_stream,
                s.alloc_on_stream_without_stream,
                s.free,
                s.free_ignored,
                s.failed,
                s.get_stats,
                s.shrink,
                s.new_streams,
            ];
            let expected: Vec<u64> = (0..all.len())
                .map(|j| if j == i { i as u64 + 1 } else { 0 })
                .collect();
            assert_eq!(values.to_vec(), expected, "{call:?}");
        }
    }
}
