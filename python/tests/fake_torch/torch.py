"""A stand-in for torch, for the tests: the part of its CUDA allocator API that
``cuda_arena.torch`` uses, doing what torch does with it.

``torch.cuda.memory.CUDAPluggableAllocator(path, alloc_name, free_name)`` opens the library by
path and takes the two functions' addresses by name, as torch's does; the allocator's setters
take addresses. The methods ``malloc``, ``free``, ``init``, ``empty_cache``,
``set_memory_fraction`` and ``record_stream`` call those addresses with torch's C signatures,
as torch's ``CUDAPluggableAllocator`` (C++) calls them. ``FAKE`` holds the state a test sets
or checks: whether torch was built with CUDA, whether CUDA is initialised, the current
allocator.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Dict, Optional

__version__ = "0.0.0+fake"

FAKE = SimpleNamespace(cuda_built=True, initialized=False, current=None, current_device=0)

_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
_INIT = ctypes.CFUNCTYPE(None, ctypes.c_int)
_RESET = ctypes.CFUNCTYPE(None)
_FRACTION = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)
_RECORD_STREAM = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class _CUDAAllocator:
    """torch._C._cuda_CUDAAllocator of a pluggable allocator: the function addresses."""

    def __init__(self, alloc_fn: int, free_fn: int) -> None:
        self.fns: Dict[str, int] = {"alloc": alloc_fn, "free": free_fn}

    def set_init_fn(self, fn: int) -> None:
        self.fns["init"] = fn

    def set_reset_fn(self, fn: int) -> None:
        self.fns["reset"] = fn

    def set_memory_fraction_fn(self, fn: int) -> None:
        self.fns["memory_fraction"] = fn

    def set_record_stream_fn(self, fn: int) -> None:
        self.fns["record_stream"] = fn

    # What torch's C++ side calls through the addresses.
    def malloc(self, size: int, device: int, stream: Optional[int]) -> Optional[int]:
        return _ALLOC(self.fns["alloc"])(size, device, stream)

    def free(self, ptr: Optional[int], size: int, device: int, stream: Optional[int]) -> None:
        _FREE(self.fns["free"])(ptr, size, device, stream)

    def init(self, device_count: int) -> None:
        _INIT(self.fns["init"])(device_count)

    def empty_cache(self) -> None:
        _RESET(self.fns["reset"])()

    def set_memory_fraction(self, fraction: float, device: int) -> None:
        _FRACTION(self.fns["memory_fraction"])(fraction, device)

    def record_stream(self, ptr: int, stream: Optional[int]) -> None:
        _RECORD_STREAM(self.fns["record_stream"])(ptr, stream)


class CUDAPluggableAllocator:
    """torch.cuda.memory.CUDAPluggableAllocator, as torch writes it."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str) -> None:
        self.path = path_to_so_file
        allocator = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(allocator, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(allocator, free_fn_name), ctypes.c_void_p).value
        assert alloc_fn is not None and free_fn is not None
        self._allocator = _CUDAAllocator(alloc_fn, free_fn)

    def allocator(self) -> _CUDAAllocator:
        return self._allocator


def change_current_allocator(allocator: CUDAPluggableAllocator) -> None:
    if FAKE.initialized:
        raise RuntimeError("Can't swap an already initialized allocator")
    FAKE.current = allocator


def _init() -> None:
    """torch's lazy CUDA init: the allocator's init_fn is called with the device count."""
    if not FAKE.initialized:
        FAKE.initialized = True
        if FAKE.current is not None:
            FAKE.current.allocator().init(1)


class device:
    """torch.device("cuda", 0), "cuda:1", "cpu"."""

    def __init__(self, kind: str, index: Optional[int] = None) -> None:
        if ":" in kind:
            kind, number = kind.split(":")
            index = int(number)
        self.type, self.index = kind, index


memory = SimpleNamespace(
    CUDAPluggableAllocator=CUDAPluggableAllocator,
    change_current_allocator=change_current_allocator,
)
cuda = SimpleNamespace(
    memory=memory,
    init=_init,
    is_initialized=lambda: FAKE.initialized,
    current_device=lambda: FAKE.current_device,
)
backends = SimpleNamespace(cuda=SimpleNamespace(is_built=lambda: FAKE.cuda_built))
