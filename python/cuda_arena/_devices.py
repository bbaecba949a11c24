"""Device arguments: what PyTorch users pass for a device, turned into the CUDA device index
the C ABI takes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional, Union

from .errors import invalid_argument

if TYPE_CHECKING:
    import torch

#: The library serves devices 0 to 63 (``cuda_arena_torch_*``'s bound).
MAX_DEVICES = 64

#: An index, ``"cuda"`` / ``"cuda:N"``, a ``torch.device`` of type cuda, or None (the current
#: device).
Device = Union[int, str, "torch.device", None]


def _current() -> int:
    """torch's current CUDA device where torch has initialised CUDA; else 0. Never imports
    torch or initialises CUDA itself."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return int(cuda.current_device())
    return 0


def _index(value: object, name: str, given: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_argument(name, "must be a CUDA device index (an int)", given)
    if not 0 <= value < MAX_DEVICES:
        raise invalid_argument(name, f"must be a device index from 0 to {MAX_DEVICES - 1}", given)
    return value


def device_index(device: Device, name: str = "device") -> int:
    """The index of ``device``; ``ERR_ARENA_INVALID_ARGUMENT`` naming ``name`` for anything
    that is not a CUDA device below :data:`MAX_DEVICES`."""
    if device is None:
        return _current()
    if isinstance(device, str):
        kind, colon, number = device.partition(":")
        if kind != "cuda":
            raise invalid_argument(name, "must be a CUDA device ('cuda' or 'cuda:N')", device)
        if not colon:
            return _current()
        if not number.isdigit() or not number.isascii():
            raise invalid_argument(name, "must be 'cuda:N' with N a device index", device)
        return _index(int(number), name, device)
    device_type: Optional[object] = getattr(device, "type", None)
    if device_type is not None and not isinstance(device, int):
        # A torch.device: its type and index.
        if device_type != "cuda":
            raise invalid_argument(name, "must be a CUDA device", device)
        index = getattr(device, "index", None)
        return _current() if index is None else _index(index, name, device)
    return _index(device, name, device)
