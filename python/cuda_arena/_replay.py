"""Replaying a trace file from Python, as ``cuda-arena replay --json`` does, through the C
ABI's ``cuda_arena_replay_file``: no Node needed."""

from __future__ import annotations

import ctypes
import json
from typing import Dict, List, Optional, Union

from ._config import Config, pairs
from ._library import last_error, load
from ._recording import PathArg, _path_bytes
from .errors import ERR_ARENA_PANIC, CudaArenaError, from_c_code, invalid_argument

#: A JSON value of the report.
Json = Union[None, bool, int, float, str, List["Json"], Dict[str, "Json"]]


def replay(path: PathArg, config: Optional[Config] = None, backend: str = "virtual") -> Dict[str, Json]:
    """Replays the trace at ``path`` (JSON lines, e.g. from
    :func:`cuda_arena.torch.start_recording`, or a PyTorch memory snapshot) through a fresh
    allocator of ``config`` on ``backend`` (``"virtual"``, or ``"cuda"`` on a GPU).

    Returns the report of ``cuda-arena replay --json`` for that one config: ``{"trace",
    "backend", "linesSkippedCount", "runs": [{"allocator", "warnings", "ops",
    "peakRequested", "peakHeld", "failedAllocs", "liveAtEnd", "elapsedNs", "stats"}]}``.
    Raises :class:`~cuda_arena.CudaArenaError` for an unreadable or malformed file, a bad key
    or an unknown backend.
    """
    raw = _path_bytes(path)
    if not isinstance(backend, str) or "\0" in backend or not backend.isascii():
        # The library names the backends it knows; every one is ASCII.
        raise invalid_argument("backend", "must be 'virtual' or 'cuda'", backend)
    kv = pairs(config)
    keys = (ctypes.c_char_p * max(len(kv), 1))(*[k.encode() for k, _ in kv])
    values = (ctypes.c_char_p * max(len(kv), 1))(*[v.encode() for _, v in kv])
    lib = load()
    report = lib.cuda_arena_replay_file(raw, backend.encode(), keys, values, len(kv))
    if not report:
        raise from_c_code(*last_error())
    try:
        text = ctypes.string_at(report).decode("utf-8")
    finally:
        lib.cuda_arena_string_free(report)
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise CudaArenaError(ERR_ARENA_PANIC, f"the replay report is not JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise CudaArenaError(ERR_ARENA_PANIC, "the replay report is not a JSON object")
    return parsed
