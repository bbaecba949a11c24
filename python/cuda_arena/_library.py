"""The package's ``libcuda_arena.so``: where it is, loading it once, and the C signatures used.

The wheel carries the library of the npm platform package of its machine (glibc 2.17, built
by ``scripts/build-target.mjs``) at ``cuda_arena/lib/libcuda_arena.so`` and its header at
``cuda_arena/include/cuda_arena.h``. PyTorch's ``CUDAPluggableAllocator`` opens the same file
by path, so torch and this module share one loaded library, one process-wide state.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Optional, Tuple

from ._version import __version__
from .errors import ERR_NO_NATIVE_BINDING, CudaArenaError, from_c_code

_HERE = os.path.dirname(os.path.abspath(__file__))

#: The C ABI's ``CUDA_ARENA_OK``.
OK = 0


def library_path() -> str:
    """The absolute path of the package's ``libcuda_arena.so``: what to give
    ``torch.cuda.memory.CUDAPluggableAllocator``, ``ctypes.CDLL`` or a linker.

    Raises :class:`~cuda_arena.CudaArenaError` ``ERR_NO_NATIVE_BINDING`` when the package was
    installed without it (a source checkout; only the wheels carry the library).
    """
    path = os.path.join(_HERE, "lib", "libcuda_arena.so")
    if not os.path.isfile(path):
        raise CudaArenaError(
            ERR_NO_NATIVE_BINDING,
            f"{path} is missing: install a cuda-arena wheel (Linux x86_64 or aarch64, glibc "
            "2.17 or newer), not the source tree",
        )
    return path


def include_path() -> str:
    """The directory holding ``cuda_arena.h``, the C header of :func:`library_path`."""
    return os.path.join(_HERE, "include")


class Stats(ctypes.Structure):
    """``cuda_arena_stats``, as ``cuda_arena.h`` declares it: ONNX Runtime's ``GetStats``
    counters; ``limit`` is -1 when unlimited."""

    _fields_ = [("limit", ctypes.c_int64)] + [
        (name, ctypes.c_uint64)
        for name in (
            "in_use",
            "total_allocated",
            "max_in_use",
            "num_allocs",
            "num_reserves",
            "num_arena_extensions",
            "num_arena_shrinkages",
            "max_alloc_size",
            "requested_in_use",
            "reserved_bytes",
        )
    ]


class DeviceStats(ctypes.Structure):
    """``cuda_arena_device_stats``: what reached a device's driver (``deviceStats`` in
    TypeScript)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("raw_allocs", "raw_frees", "raw_failures", "raw_bytes_outstanding", "device_waits",
                     "stream_waits")
    ]


_c_char_pp = ctypes.POINTER(ctypes.c_char_p)

# name: (restype, argtypes), the header's declarations of the functions this package calls.
_SIGNATURES = {
    "cuda_arena_version": (ctypes.c_char_p, []),
    "cuda_arena_last_error_code": (ctypes.c_int, []),
    "cuda_arena_last_error": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "cuda_arena_create": (
        ctypes.c_void_p,
        [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            _c_char_pp,
            _c_char_pp,
            ctypes.c_size_t,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ],
    ),
    "cuda_arena_destroy": (None, [ctypes.c_void_p]),
    "cuda_arena_start_recording": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "cuda_arena_stop_recording": (ctypes.c_int, [ctypes.c_void_p]),
    "cuda_arena_replay_file": (
        ctypes.c_void_p,
        [ctypes.c_char_p, ctypes.c_char_p, _c_char_pp, _c_char_pp, ctypes.c_size_t],
    ),
    "cuda_arena_string_free": (None, [ctypes.c_void_p]),
    "cuda_arena_torch_init": (None, [ctypes.c_int]),
    "cuda_arena_torch_stats": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(Stats)]),
    "cuda_arena_torch_device_stats": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(DeviceStats)]),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def load() -> ctypes.CDLL:
    """The library, loaded once, with the signatures of the functions this package calls.

    Raises ``ERR_NO_NATIVE_BINDING`` when it is missing, cannot be loaded (another machine's
    wheel) or is of another version than the package.
    """
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
        except (OSError, AttributeError) as e:
            raise CudaArenaError(ERR_NO_NATIVE_BINDING, f"cannot load {path}: {e}") from e
        found = (lib.cuda_arena_version() or b"").decode("utf-8", "replace")
        if found != __version__:
            raise CudaArenaError(
                ERR_NO_NATIVE_BINDING,
                f"{path} is version {found}, the package {__version__}: reinstall cuda-arena",
            )
        _lib = lib
        return lib


def address(name: str) -> int:
    """The address of the library's function ``name``, as PyTorch's setters take it."""
    value = ctypes.cast(getattr(load(), name), ctypes.c_void_p).value
    assert value is not None, name
    return value


def last_error() -> Tuple[int, str]:
    """This thread's last failure in the library: its C code (``OK`` if none) and message."""
    lib = load()
    code = int(lib.cuda_arena_last_error_code())
    buf = ctypes.create_string_buffer(4096)
    lib.cuda_arena_last_error(buf, len(buf))
    return code, buf.value.decode("utf-8", "replace")


def error(code: int) -> CudaArenaError:
    """The error of a call that returned ``code``, with this thread's last message."""
    last_code, message = last_error()
    return from_c_code(code, message if last_code == code else "")
