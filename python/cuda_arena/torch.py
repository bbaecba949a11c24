"""PyTorch on cuda-arena: ``cuda_arena.torch.install()`` makes cuda-arena PyTorch's CUDA
allocator (``torch.cuda.memory.CUDAPluggableAllocator`` over the package's
``libcuda_arena.so``), and the functions here answer what PyTorch's own cannot for a pluggable
allocator: its stats, and a recording of its traffic that ``cuda-arena replay --html`` draws.

torch is imported only inside these functions, so ``import cuda_arena.torch`` works without
it. docs/pytorch.md has the whole story.
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Dict, Optional, Tuple, cast

from . import _recording, _setup
from ._config import Config, conf_string
from ._devices import Device, device_index
from ._library import OK, DeviceStats, Stats, address, error, library_path, load
from ._recording import PathArg
from ._stats import stats_dict
from .errors import (
    ERR_ARENA_INVALID_ARGUMENT,
    ERR_NO_CUDA,
    ERR_TORCH_ALLOCATOR_INITIALIZED,
    ERR_TORCH_NOT_FOUND,
    CudaArenaError,
)

if TYPE_CHECKING:
    from types import ModuleType

    from torch.cuda.memory import CUDAPluggableAllocator

__all__ = [
    "install",
    "is_installed",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "start_recording",
    "stop_recording",
]

#: The entry points ``CUDAPluggableAllocator`` loads by name.
ALLOC_FN = "cuda_arena_torch_alloc"
FREE_FN = "cuda_arena_torch_free"
#: The allocator's setters and the entry point each is given (by address): ``init_fn``,
#: ``torch.cuda.empty_cache()``, ``torch.cuda.set_per_process_memory_fraction()`` and
#: ``Tensor.record_stream()``.
SETTERS: Tuple[Tuple[str, str], ...] = (
    ("set_init_fn", "cuda_arena_torch_init"),
    ("set_reset_fn", "cuda_arena_torch_empty_cache"),
    ("set_memory_fraction_fn", "cuda_arena_torch_set_memory_fraction"),
    ("set_record_stream_fn", "cuda_arena_torch_record_stream"),
)

_lock = threading.Lock()
# The allocator install() made, and the config it was made with.
_installed: Optional[Tuple["CUDAPluggableAllocator", str]] = None


def _import_torch() -> "ModuleType":
    try:
        import torch
    except ImportError as e:
        raise CudaArenaError(ERR_TORCH_NOT_FOUND, f"cannot import torch: {e}") from e
    return cast("ModuleType", torch)


def install(config: Optional[Config] = None, *, device: Device = None) -> "CUDAPluggableAllocator":
    """Makes cuda-arena PyTorch's CUDA allocator, for every device, for the life of the
    process. Call it before anything initialises CUDA in torch (the first CUDA tensor,
    ``torch.cuda.init()``, ``torch.cuda.mem_get_info()``).

    ``config``: ``arena.*`` keys and values (docs/config.md), as a mapping
    (``{"arena.extend_strategy": 1}``; the ``arena.`` prefix may be left out) or as the
    ``CUDA_ARENA_CONF`` string; it replaces ``CUDA_ARENA_CONF`` in this process. None: the
    variable's config, or the defaults when it is unset.

    ``device``: a device to set up now, so that a config its arena refuses raises here rather
    than failing every allocation on it later; None (the default) sets devices up at their
    first allocation, without touching the GPU here.

    Returns the ``CUDAPluggableAllocator``. A second call returns the same one (its config,
    when given, must be the same). Raises :class:`~cuda_arena.CudaArenaError`, leaving torch's
    allocator as it was: ``ERR_TORCH_ALLOCATOR_INITIALIZED`` when torch's CUDA allocator is in
    use already; ``ERR_ARENA_INVALID_CONFIG`` naming the key of a bad config (which stays for
    the process: fix it and restart); ``ERR_TORCH_NOT_FOUND``; ``ERR_NO_CUDA`` for a torch
    built without CUDA, or no CUDA driver.
    """
    global _installed
    conf = None if config is None else conf_string(config)
    with _lock:
        if _installed is not None:
            allocator, installed_conf = _installed
            if conf is not None and conf != installed_conf:
                raise CudaArenaError(
                    ERR_ARENA_INVALID_ARGUMENT,
                    f"cuda-arena is installed already, with config {installed_conf!r}; "
                    f"config {conf!r} cannot replace it in this process",
                )
            return allocator
        torch = _import_torch()
        if not torch.backends.cuda.is_built():
            raise CudaArenaError(ERR_NO_CUDA, f"torch {torch.__version__} was built without CUDA")
        if torch.cuda.is_initialized():
            raise _already_initialized()
        setup = _setup.read(conf)
        if device is not None:
            _stats(device_index(device))
        allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), ALLOC_FN, FREE_FN)
        handle = allocator.allocator()
        for setter, entry_point in SETTERS:
            getattr(handle, setter)(address(entry_point))
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            # torch: "Can't swap an already initialized allocator".
            if "initialized" in str(e):
                raise _already_initialized() from e
            raise
        _installed = (allocator, setup.conf)
        return allocator


def _already_initialized() -> CudaArenaError:
    return CudaArenaError(
        ERR_TORCH_ALLOCATOR_INITIALIZED,
        "torch's CUDA caching allocator is initialised already, so it cannot be replaced in "
        "this process: call cuda_arena.torch.install() before the first CUDA tensor, "
        "torch.cuda.init() or torch.cuda.mem_get_info()",
    )


def is_installed() -> bool:
    """Whether :func:`install` made cuda-arena torch's allocator in this process."""
    with _lock:
        return _installed is not None


def _stats(device: int) -> Stats:
    """Device ``device``'s counters, its allocator set up if it was not."""
    out = Stats()
    rc = load().cuda_arena_torch_stats(device, ctypes.byref(out))
    if rc != OK:
        raise error(rc)
    return out


def memory_stats(device: Device = None) -> Dict[str, int]:
    """The counters of ``device``'s allocator (None: the current device), what
    ``torch.cuda.memory_stats()`` cannot give for a pluggable allocator.

    Keys: ONNX Runtime's (``Limit``, ``InUse``, ``RequestedInUse``, ``TotalAllocated``,
    ``ReservedBytes``, ``MaxInUse``, ``NumAllocs``, ``NumReserves``, ``NumArenaExtensions``,
    ``NumArenaShrinkages``, ``MaxAllocSize``; docs/stats-and-errors.md), and torch's names
    for the counters that mean the same: ``allocated_bytes.all.current`` (``InUse``: the
    blocks handed out), ``allocated_bytes.all.peak`` (``MaxInUse``),
    ``requested_bytes.all.current`` (``RequestedInUse``), ``reserved_bytes.all.current``
    (``TotalAllocated``: held from the driver), ``allocation.all.allocated`` (``NumAllocs``)
    and ``segment.all.current`` (``NumArenaExtensions``: regions held); and what reached the
    device's driver: ``num_device_alloc`` and ``num_device_free`` (driver allocations and
    frees: a mapping of pages is one, an unmapping one), ``num_sync_all_streams`` (the times
    the allocator waited for the device's queued work, each a stall while the GPU is busy).

    Raises :class:`~cuda_arena.CudaArenaError`: ``ERR_ARENA_INVALID_ARGUMENT`` for a device
    that is not a CUDA device index below 64, the config's error when it is bad,
    ``ERR_NO_CUDA`` without a driver or device.
    """
    _setup.read()
    index = device_index(device)
    stats = _stats(index)
    out = DeviceStats()
    rc = load().cuda_arena_torch_device_stats(index, ctypes.byref(out))
    if rc != OK:
        raise error(rc)
    return stats_dict(stats, out)


def memory_allocated(device: Device = None) -> int:
    """Bytes of the blocks handed out on ``device``: ``allocated_bytes.all.current``."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Device = None) -> int:
    """The peak of :func:`memory_allocated` since the allocator was made."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Device = None) -> int:
    """Bytes ``device``'s allocator holds from the driver: ``reserved_bytes.all.current``."""
    return memory_stats(device)["reserved_bytes.all.current"]


def start_recording(path: PathArg, device: Device = None) -> None:
    """Records ``device``'s allocator traffic (None: the current device) to a new trace file
    at ``path`` (replaced if it exists), until :func:`stop_recording`: every allocation and
    free torch makes there, with its stream, in the order the allocator saw them
    (docs/recording.md). ``npx cuda-arena replay PATH --html page.html`` draws it;
    ``--compare KEY=VALUE`` replays it under other configs; :func:`cuda_arena.replay`
    replays it from Python.

    Allocations live when it starts are not in the trace (their frees are left out), so
    start it before the work to record. ``ERR_ARENA_INVALID_ARGUMENT`` when the device is
    recorded already or the path cannot be created.
    """
    setup = _setup.read()
    index = device_index(device)
    # The device's allocator exists before the handle joins it, so it is made with the
    # PyTorch config (a handle made first would make it with the defaults).
    _stats(index)
    _recording.start(path, index, setup.backend)


def stop_recording(device: Device = None) -> str:
    """Stops ``device``'s recording once everything recorded is in the file, and returns the
    file's path. ``ERR_ARENA_INVALID_ARGUMENT`` when none is on, or when it stopped early (a
    write error such as a full disk: the file holds the whole lines written before it).
    Recordings still on at exit are stopped then."""
    return _recording.stop(device_index(device))
