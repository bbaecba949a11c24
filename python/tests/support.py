"""What the tests share: running one case in a child process.

The library reads its PyTorch setup (``CUDA_ARENA_CONF``, ``CUDA_ARENA_TORCH_BACKEND``) once
per process, so every case that configures it runs in a process of its own:
``python test_x.py case_name``, with the environment the test gives, on the ``host`` backend
unless it says otherwise, and with the stand-in torch (``fake_torch/``) importable unless it
says otherwise. The child prints ``case passed`` when every check held.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from typing import Callable, Dict, Mapping, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_TORCH = os.path.join(HERE, "fake_torch")
PASSED = "case passed"
MIB = 1 << 20


def child_env(env: Mapping[str, str], backend: Optional[str], fake_torch: bool) -> Dict[str, str]:
    out = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CUDA_ARENA_CONF", "CUDA_ARENA_TORCH_BACKEND", "PYTHONPATH")
    }
    if backend is not None:
        out["CUDA_ARENA_TORCH_BACKEND"] = backend
    if fake_torch:
        out["PYTHONPATH"] = FAKE_TORCH
    out.update(env)
    return out


class ChildCase(unittest.TestCase):
    """A test case whose tests run cases of its own file in child processes."""

    #: The file whose ``case_*`` functions the children run (set by each subclass).
    file: str = ""

    def child(
        self,
        case: str,
        env: Optional[Mapping[str, str]] = None,
        backend: Optional[str] = "host",
        fake_torch: bool = True,
        args: tuple = (),
    ) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [sys.executable, self.file, case, *args],
            env=child_env(env or {}, backend, fake_torch),
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertTrue(
            r.returncode == 0 and PASSED in r.stdout,
            f"{case} exited {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}",
        )
        return r


def run_case(namespace: Dict[str, object]) -> None:
    """In a child: runs the case ``sys.argv[1]`` of the calling file and says it passed."""
    case = namespace[sys.argv[1]]
    assert callable(case), sys.argv[1]
    fn: Callable[..., None] = case
    fn(*sys.argv[2:])
    print(PASSED)


def expect_error(code: str, fn: Callable[[], object], *contains: str) -> str:
    """Runs ``fn``, which must raise CudaArenaError with ``code`` (and messages containing
    each of ``contains``); returns the message."""
    from cuda_arena import CudaArenaError

    try:
        fn()
    except CudaArenaError as e:
        assert e.code == code, f"expected {code}, got {e.code}: {e}"
        for text in contains:
            assert text in str(e), f"{text!r} not in {str(e)!r}"
        return str(e)
    raise AssertionError(f"expected {code}, nothing was raised")
