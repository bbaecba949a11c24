"""Errors of cuda-arena in Python: one exception class, :class:`CudaArenaError`, with a stable
``code``.

The codes are those of the Rust core, the TypeScript API and the C ABI (``ERR_ARENA_*``,
``ERR_NO_CUDA``, ``ERR_CUDA``); ``c_code`` is the C ABI's number for them
(``CUDA_ARENA_ERR_*`` in ``cuda_arena.h``). A few codes come from the Python package itself
and have no C number. The message may change between versions; the code does not, so test
``err.code``, never the text.
"""

from __future__ import annotations

from typing import Dict, Optional

#: The C ABI's return codes (``CUDA_ARENA_ERR_*``) and the code each stands for.
C_CODES: Dict[int, str] = {
    1: "ERR_ARENA_OUT_OF_MEMORY",
    2: "ERR_ARENA_INVALID_CONFIG",
    3: "ERR_ARENA_INVALID_ARGUMENT",
    4: "ERR_ARENA_UNKNOWN_POINTER",
    5: "ERR_ARENA_RELEASED",
    6: "ERR_NO_CUDA",
    7: "ERR_CUDA",
    8: "ERR_ARENA_PANIC",
}

#: The device or ``arena.max_mem`` cannot hold the request.
ERR_ARENA_OUT_OF_MEMORY = "ERR_ARENA_OUT_OF_MEMORY"
#: A config key or value is rejected (``config=`` or ``CUDA_ARENA_CONF``); the message names
#: the key.
ERR_ARENA_INVALID_CONFIG = "ERR_ARENA_INVALID_CONFIG"
#: A malformed argument: a wrong type, a device index out of range, a recording already on.
ERR_ARENA_INVALID_ARGUMENT = "ERR_ARENA_INVALID_ARGUMENT"
#: An address the allocator does not hold.
ERR_ARENA_UNKNOWN_POINTER = "ERR_ARENA_UNKNOWN_POINTER"
#: Use after release.
ERR_ARENA_RELEASED = "ERR_ARENA_RELEASED"
#: No usable CUDA driver or device (or a torch built without CUDA).
ERR_NO_CUDA = "ERR_NO_CUDA"
#: A CUDA driver error; the message has the ``CUresult`` name.
ERR_CUDA = "ERR_CUDA"
#: An internal bug was caught at the C boundary; the allocator is unchanged.
ERR_ARENA_PANIC = "ERR_ARENA_PANIC"
#: The package's ``libcuda_arena.so`` is missing, cannot be loaded, or is of another version.
ERR_NO_NATIVE_BINDING = "ERR_NO_NATIVE_BINDING"
#: ``torch`` cannot be imported.
ERR_TORCH_NOT_FOUND = "ERR_TORCH_NOT_FOUND"
#: PyTorch's CUDA caching allocator was initialised before :func:`cuda_arena.torch.install`
#: (a CUDA tensor, ``torch.cuda.init()``, ``torch.cuda.mem_get_info()``...), so it can no
#: longer be replaced in this process.
ERR_TORCH_ALLOCATOR_INITIALIZED = "ERR_TORCH_ALLOCATOR_INITIALIZED"

#: Every code a :class:`CudaArenaError` may carry.
ERROR_CODES = (
    ERR_ARENA_OUT_OF_MEMORY,
    ERR_ARENA_INVALID_CONFIG,
    ERR_ARENA_INVALID_ARGUMENT,
    ERR_ARENA_UNKNOWN_POINTER,
    ERR_ARENA_RELEASED,
    ERR_NO_CUDA,
    ERR_CUDA,
    ERR_ARENA_PANIC,
    ERR_NO_NATIVE_BINDING,
    ERR_TORCH_NOT_FOUND,
    ERR_TORCH_ALLOCATOR_INITIALIZED,
)


class CudaArenaError(Exception):
    """A failure of cuda-arena: ``code`` says which (one of :data:`ERROR_CODES`), the message
    says why, naming the argument, key or value at fault."""

    code: str
    """The stable code, e.g. ``"ERR_ARENA_INVALID_CONFIG"``."""
    c_code: Optional[int]
    """The C ABI's number for ``code`` (``CUDA_ARENA_ERR_*``), or None for the codes of the
    Python package itself."""
    message: str
    """Why, in one line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.c_code = next((n for n, c in C_CODES.items() if c == code), None)


def from_c_code(c_code: int, message: str) -> CudaArenaError:
    """The error a C ABI return code (non-zero) and its message stand for."""
    code = C_CODES.get(c_code, ERR_ARENA_PANIC)
    # The library's messages start with their code already.
    if message.startswith(code + ": "):
        message = message[len(code) + 2 :]
    return CudaArenaError(code, message or f"the library returned code {c_code}")


def invalid_argument(name: str, why: str, value: object) -> CudaArenaError:
    """``ERR_ARENA_INVALID_ARGUMENT`` naming the argument and the value given."""
    return CudaArenaError(ERR_ARENA_INVALID_ARGUMENT, f"{name} {why}, got {_describe(value)}")


def _describe(value: object) -> str:
    """A value as an error message shows it: its repr (shortened) and, for non-str, its type."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return text if isinstance(value, str) else f"{text} ({type(value).__name__})"
