"""Recording a device's PyTorch traffic as a trace (docs/recording.md).

The recording belongs to the shared allocator, not to a handle: a C handle made with
``cuda_arena_create(backend, "Cuda", device, ...)`` joins the allocator that PyTorch's entry
points use for that device (the same process-wide factory), and
``cuda_arena_start_recording`` on it records every user's traffic, torch's included. The
handle is kept while the recording is on and destroyed when it stops.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from typing import Dict, NamedTuple, Union

from ._library import OK, error, load
from .errors import (
    ERR_ARENA_INVALID_ARGUMENT,
    CudaArenaError,
    from_c_code,
    invalid_argument,
)

#: A file path: a str, bytes or an ``os.PathLike``.
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


class _Recording(NamedTuple):
    handle: int
    path: str


_lock = threading.Lock()
_recordings: Dict[int, _Recording] = {}


def _path_bytes(path: object) -> bytes:
    try:
        raw = os.fsencode(path)  # type: ignore[arg-type]
    except TypeError:
        raise invalid_argument("path", "must be a str, bytes or os.PathLike", path) from None
    except UnicodeEncodeError:
        # A lone surrogate outside os.fsdecode's escapes ('\ud800') names no file.
        raise invalid_argument("path", "has no file-system encoding (a lone surrogate)", path) from None
    if raw == b"" or b"\0" in raw:
        raise invalid_argument("path", "must be a non-empty path without NUL characters", path)
    return raw


def start(path: PathArg, device: int, backend: str) -> None:
    """Starts recording device ``device``'s allocator on ``backend`` to a new file at ``path``
    (replaced if it exists)."""
    raw = _path_bytes(path)
    lib = load()
    with _lock:
        if device in _recordings:
            raise CudaArenaError(
                ERR_ARENA_INVALID_ARGUMENT,
                f"device {device} is being recorded already, to {_recordings[device].path}",
            )
        err = ctypes.create_string_buffer(1024)
        handle = lib.cuda_arena_create(
            backend.encode(), b"Cuda", device, None, None, 0, err, len(err)
        )
        if not handle:
            code = int(lib.cuda_arena_last_error_code())
            raise from_c_code(code, err.value.decode("utf-8", "replace"))
        rc = lib.cuda_arena_start_recording(handle, raw)
        if rc != OK:
            failure = error(rc)
            lib.cuda_arena_destroy(handle)
            raise failure
        _recordings[device] = _Recording(handle, os.fsdecode(raw))


def stop(device: int) -> str:
    """Stops device ``device``'s recording once everything recorded is in the file; returns
    its path. ``ERR_ARENA_INVALID_ARGUMENT`` when none is on, or when it had stopped early (a
    write error: the file holds the whole lines written before)."""
    lib = load()
    with _lock:
        recording = _recordings.pop(device, None)
        if recording is None:
            raise CudaArenaError(
                ERR_ARENA_INVALID_ARGUMENT, f"device {device} is not being recorded"
            )
        rc = lib.cuda_arena_stop_recording(recording.handle)
        failure = error(rc) if rc != OK else None
        lib.cuda_arena_destroy(recording.handle)
    if failure is not None:
        raise failure
    return recording.path


def recording(device: int) -> bool:
    """Whether device ``device`` is being recorded."""
    with _lock:
        return device in _recordings


@atexit.register
def _stop_all() -> None:
    """At exit, every recording still on is stopped, so its file holds everything (the
    library's writer thread is not joined at exit otherwise)."""
    for device in list(_recordings):
        try:
            stop(device)
        except CudaArenaError:
            pass
