"""The library's PyTorch setup in this process: ``CUDA_ARENA_CONF`` and
``CUDA_ARENA_TORCH_BACKEND``, which the library reads once, at the first call of a
``cuda_arena_torch_*`` entry point, and keeps for the life of the process.

:func:`read` makes that first call at a time of the package's choosing (before torch calls
anything), with the config :func:`cuda_arena.torch.install` was given, and turns a bad setup
into an exception instead of the library's stderr line and failed allocations.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import NamedTuple, Optional

from ._library import Stats, error, load
from .errors import ERR_ARENA_INVALID_ARGUMENT, ERR_ARENA_INVALID_CONFIG, CudaArenaError

#: The variable holding the ``arena.*`` config of the PyTorch entry points.
ENV_CONF = "CUDA_ARENA_CONF"
#: ``host`` or ``virtual`` replace the GPU with a simulated device, for tests.
ENV_BACKEND = "CUDA_ARENA_TORCH_BACKEND"

# The C ABI's CUDA_ARENA_ERR_INVALID_ARGUMENT.
_C_INVALID_ARGUMENT = 3


class Setup(NamedTuple):
    """What the library read."""

    conf: str
    """``CUDA_ARENA_CONF`` as it was read ("" when unset)."""
    backend: str
    """``cuda``, or the simulated backend ``CUDA_ARENA_TORCH_BACKEND`` named."""
    failure: Optional[CudaArenaError]
    """Why the library cannot serve PyTorch with it, or None."""


_lock = threading.Lock()
_setup: Optional[Setup] = None


def read(conf: Optional[str] = None) -> Setup:
    """The setup, read by the library now if it was not yet; ``conf`` (when not None) is set
    as ``CUDA_ARENA_CONF`` first.

    Raises the library's error for a bad setup (``ERR_ARENA_INVALID_CONFIG`` naming the key,
    ``ERR_NO_CUDA``, ...), every time it is asked, since the process keeps it; and
    ``ERR_ARENA_INVALID_ARGUMENT`` when ``conf`` differs from what was read already.
    """
    global _setup
    with _lock:
        if _setup is None:
            lib = load()
            if conf is not None:
                os.environ[ENV_CONF] = conf
            read_conf = os.environ.get(ENV_CONF, "")
            backend = os.environ.get(ENV_BACKEND, "cuda")
            lib.cuda_arena_torch_init(0)
            # Device -1 is refused, after the setup is checked and before any device is made:
            # so the code is the setup's failure, or INVALID_ARGUMENT when the setup is good.
            rc = lib.cuda_arena_torch_stats(-1, ctypes.byref(Stats()))
            failure = None if rc == _C_INVALID_ARGUMENT else _named(error(rc), conf, read_conf)
            _setup = Setup(read_conf, backend, failure)
        elif conf is not None and conf != _setup.conf:
            raise CudaArenaError(
                ERR_ARENA_INVALID_ARGUMENT,
                f"cuda-arena's PyTorch config was read already, as {ENV_CONF}={_setup.conf!r}, "
                f"and lasts for the process; config {conf!r} cannot replace it "
                "(call install() before anything else of cuda_arena.torch)",
            )
        setup = _setup
    if setup.failure is not None:
        # A fresh exception each time: raising one object twice chains its tracebacks.
        raise CudaArenaError(setup.failure.code, setup.failure.message)
    return setup


def _named(e: CudaArenaError, conf: Optional[str], read_conf: str) -> CudaArenaError:
    """``e`` saying where the bad config came from: the argument or the variable."""
    if e.code != ERR_ARENA_INVALID_CONFIG or ENV_BACKEND in e.message:
        return e
    source = "config" if conf is not None else ENV_CONF
    return CudaArenaError(e.code, f"{source} {read_conf!r} is invalid: {e.message}")
