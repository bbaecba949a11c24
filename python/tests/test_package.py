"""The installed package: what the wheel holds, its version, its error codes, and that it
imports and loads without torch, Rust or Node."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import sys
import unittest

from support import ChildCase, expect_error, run_case

import cuda_arena
from cuda_arena.errors import C_CODES, ERROR_CODES, CudaArenaError

def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


ELF_MACHINE = {"x86_64": 62, "aarch64": 183}


class InstalledPackage(unittest.TestCase):
    def test_the_package_is_the_installed_wheel_not_the_source_tree(self) -> None:
        self.assertIn("site-packages", cuda_arena.__file__)

    def test_the_library_is_a_shared_object_for_this_machine(self) -> None:
        path = cuda_arena.library_path()
        self.assertTrue(os.path.isabs(path) and path.endswith("/cuda_arena/lib/libcuda_arena.so"))
        with open(path, "rb") as f:
            head = f.read(20)
        self.assertEqual(head[:4], b"\x7fELF")
        self.assertEqual(int.from_bytes(head[16:18], "little"), 3, "ET_DYN")
        self.assertEqual(int.from_bytes(head[18:20], "little"), ELF_MACHINE[platform.machine()])

    def test_the_header_ships_beside_it_at_the_package_version(self) -> None:
        header = read(os.path.join(cuda_arena.include_path(), "cuda_arena.h"))
        self.assertIn(f'#define CUDA_ARENA_VERSION "{cuda_arena.__version__}"', header)

    def test_the_loaded_library_is_of_the_package_version(self) -> None:
        lib = ctypes.CDLL(cuda_arena.library_path())
        lib.cuda_arena_version.restype = ctypes.c_char_p
        self.assertEqual(lib.cuda_arena_version().decode(), cuda_arena.__version__)

    def test_it_is_typed(self) -> None:
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(cuda_arena.__file__), "py.typed")))

    def test_the_c_codes_are_the_headers(self) -> None:
        header = read(os.path.join(cuda_arena.include_path(), "cuda_arena.h"))
        defined = {
            int(n): name
            for name, n in re.findall(r"#define CUDA_ARENA_ERR_(\w+) (\d+)", header)
        }
        self.assertEqual(set(defined), set(C_CODES))
        for n, code in C_CODES.items():
            self.assertTrue(code.endswith(defined[n]), f"{n}: {code} vs CUDA_ARENA_ERR_{defined[n]}")
            self.assertIn(code, ERROR_CODES)

    def test_an_error_has_its_code_its_c_code_and_a_message(self) -> None:
        e = CudaArenaError("ERR_ARENA_INVALID_CONFIG", "arena.max_mem: bad")
        self.assertEqual((e.code, e.c_code, e.message), ("ERR_ARENA_INVALID_CONFIG", 2, "arena.max_mem: bad"))
        self.assertEqual(str(e), "ERR_ARENA_INVALID_CONFIG: arena.max_mem: bad")
        self.assertIsNone(CudaArenaError("ERR_TORCH_NOT_FOUND", "x").c_code)


def case_imports_without_torch() -> None:
    import cuda_arena.torch as ct

    assert "torch" not in sys.modules, "importing cuda_arena.torch imported torch"
    stats = ct.memory_stats(0)
    assert stats["InUse"] == 0, stats
    assert "torch" not in sys.modules, "memory_stats imported torch"
    expect_error("ERR_TORCH_NOT_FOUND", ct.install, "torch")


def case_without_a_driver_the_cuda_backend_is_err_no_cuda() -> None:
    import cuda_arena.torch as ct

    expect_error("ERR_NO_CUDA", ct.memory_stats)
    expect_error("ERR_NO_CUDA", ct.install)


def driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


class WithoutTorch(ChildCase):
    file = __file__

    def test_it_imports_and_reads_stats_without_torch_and_install_says_torch_is_missing(self) -> None:
        self.child("case_imports_without_torch", fake_torch=False)

    @unittest.skipIf(driver_present(), "a CUDA driver is present")
    def test_without_a_cuda_driver_stats_and_install_fail_with_err_no_cuda(self) -> None:
        self.child("case_without_a_driver_the_cuda_backend_is_err_no_cuda", backend=None)


if __name__ == "__main__":
    run_case(globals())
