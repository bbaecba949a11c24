"""Configs from Python: a mapping of ``arena.*`` keys to values, or the ``CUDA_ARENA_CONF``
string itself, turned into what the C ABI reads.

Only the shape is checked here (types, the characters that would break the string); the keys
and values are checked by the library, as strictly as everywhere else in cuda-arena
(docs/config.md), and its error names the key.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple, Union

from .errors import ERR_ARENA_INVALID_CONFIG, CudaArenaError, _describe

#: A config value: a whole number or the string the library parses.
ConfigValue = Union[int, str]
#: ``{"arena.extend_strategy": 1, "arena.max_mem": 8 << 30}`` (the ``arena.`` prefix may be
#: left out) or ``"arena.extend_strategy=1,arena.max_mem=8589934592"``.
Config = Union[Mapping[str, ConfigValue], str]

PREFIX = "arena."


def _invalid(message: str) -> CudaArenaError:
    return CudaArenaError(ERR_ARENA_INVALID_CONFIG, message)


def _utf8(text: str, what: str) -> str:
    # The library takes UTF-8; a lone surrogate ('\ud800', or a byte os.fsdecode escaped) has
    # no UTF-8 form, and str.encode would raise UnicodeEncodeError instead of a coded error.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(f"{what} is not valid UTF-8 (it holds a lone surrogate), got {text!r}") from None
    return text


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise _invalid(f"a config key must be a str, got {_describe(key)}")
    _utf8(key, f"config key {key!r}")
    for bad in ("=", ",", "\0"):
        if bad in key:
            raise _invalid(f"config key {key!r} contains {bad!r}")
    if key == "" or key == PREFIX:
        raise _invalid(f"config key {key!r} is empty")
    return key if key.startswith(PREFIX) else PREFIX + key


def _value(key: str, value: object) -> str:
    # bool is an int in Python; True would read as 1 byte for a size key.
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _invalid(f"{key} must be an int or a str, got {_describe(value)}")
    text = _utf8(str(value), f"the value of {key}")
    for bad in (",", "\0"):
        if bad in text:
            raise _invalid(f"the value of {key} contains {bad!r}, got {text!r}")
    return text


def pairs(config: Optional[Config]) -> List[Tuple[str, str]]:
    """The ``(key, value)`` pairs of ``config``, keys with their ``arena.`` prefix."""
    if config is None:
        return []
    if isinstance(config, str):
        if config == "":
            return []
        out = []
        for entry in config.split(","):
            key, eq, value = entry.partition("=")
            if not eq:
                raise _invalid(f"config entry {entry!r} of {config!r} is not key=value")
            k = _key(key)
            out.append((k, _value(k, value)))
        return out
    if not isinstance(config, Mapping):
        raise _invalid(f"config must be a mapping or a str, got {_describe(config)}")
    out = []
    for k, v in config.items():
        key = _key(k)
        out.append((key, _value(key, v)))
    return out


def conf_string(config: Optional[Config]) -> str:
    """``config`` as ``CUDA_ARENA_CONF`` holds it: a str is taken as it is (the library checks
    it as it checks the variable), a mapping is joined as ``key=value`` entries."""
    if config is None:
        return ""
    if isinstance(config, str):
        if "\0" in config:
            raise _invalid(f"config contains a NUL character, got {config!r}")
        return _utf8(config, "config")
    return ",".join(f"{k}={v}" for k, v in pairs(config))
