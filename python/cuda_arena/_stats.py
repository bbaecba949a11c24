"""An allocator's counters as a dict: ONNX Runtime's ``GetStats`` keys, and the names of
``torch.cuda.memory_stats()`` for the counters that mean the same."""

from __future__ import annotations

from typing import Dict, Tuple

from ._library import DeviceStats, Stats

#: ONNX Runtime's ``GetStats`` keys, in its order, and the ``cuda_arena_stats`` field of each.
ORT_KEYS: Tuple[Tuple[str, str], ...] = (
    ("Limit", "limit"),
    ("InUse", "in_use"),
    ("RequestedInUse", "requested_in_use"),
    ("TotalAllocated", "total_allocated"),
    ("ReservedBytes", "reserved_bytes"),
    ("MaxInUse", "max_in_use"),
    ("NumAllocs", "num_allocs"),
    ("NumReserves", "num_reserves"),
    ("NumArenaExtensions", "num_arena_extensions"),
    ("NumArenaShrinkages", "num_arena_shrinkages"),
    ("MaxAllocSize", "max_alloc_size"),
)

#: ``torch.cuda.memory_stats()`` names and the field that is the same count. torch's
#: allocator keeps more (per pool, peaks of every counter, ``num_alloc_retries``...); those
#: the arena does not count are left out rather than made up.
TORCH_KEYS: Tuple[Tuple[str, str], ...] = (
    # Bytes of the blocks handed out (the arena's chunks: 256-byte multiples).
    ("allocated_bytes.all.current", "in_use"),
    ("allocated_bytes.all.peak", "max_in_use"),
    # Bytes the program asked for, live.
    ("requested_bytes.all.current", "requested_in_use"),
    # Bytes held from the driver (regions, or the memory pool's reserved memory).
    ("reserved_bytes.all.current", "total_allocated"),
    # Allocations ever made.
    ("allocation.all.allocated", "num_allocs"),
    # Regions held from the driver now (torch's segments).
    ("segment.all.current", "num_arena_extensions"),
)


#: ``torch.cuda.memory_stats()`` names for what reached the device's driver
#: (``cuda_arena_device_stats``): a mapping of pages is one driver allocation, an unmapping one
#: free, and torch's synchronizations of every stream are the waits for the device.
TORCH_DEVICE_KEYS: Tuple[Tuple[str, str], ...] = (
    ("num_device_alloc", "raw_allocs"),
    ("num_device_free", "raw_frees"),
    ("num_sync_all_streams", "device_waits"),
)


def stats_dict(s: Stats, d: DeviceStats) -> Dict[str, int]:
    """Every ORT key, then every torch name, each with its value."""
    out = {key: int(getattr(s, field)) for key, field in ORT_KEYS}
    out.update((key, int(getattr(s, field))) for key, field in TORCH_KEYS)
    out.update((key, int(getattr(d, field))) for key, field in TORCH_DEVICE_KEYS)
    return out
