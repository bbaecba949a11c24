#!/usr/bin/env python3
"""Builds the Python package's wheels (issue 28) from the staged npm platform packages.

    python3 scripts/build_wheel.py [--platform linux-x64-gnu|linux-arm64-gnu ...] [--out DIR]

For each platform (default: both), the wheel
``DIR/cuda_arena-<version>-py3-none-manylinux_2_17_<machine>.whl`` (DIR defaults to
dist/python/) holds python/cuda_arena/, the platform package's ``lib/libcuda_arena.so``
(staged by ``npm run build`` / ``npm run build:linux-arm64-gnu``, linked against glibc 2.17 and
checked so by scripts/stage-platform.mjs) and the C header. Standard library only: the wheel
is a zip written here with its METADATA, WHEEL and RECORD, byte for byte the same for the
same inputs. Installing it needs pip alone, no Rust and no Node.

The version is package.json's; python/cuda_arena/_version.py must carry it
(scripts/sync-version.mjs writes it there).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import sys
import zipfile
from typing import Dict, List, NoReturn, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "python", "cuda_arena")

#: npm platform package → (the wheel's machine, the ELF e_machine of its library).
PLATFORMS: Dict[str, Tuple[str, int]] = {
    "linux-x64-gnu": ("x86_64", 62),
    "linux-arm64-gnu": ("aarch64", 183),
}

#: Every file of the wheel gets this date (the zip format's epoch starts in 1980).
DATE = (1980, 1, 1, 0, 0, 0)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def fail(message: str) -> NoReturn:
    print(f"build_wheel: {message}", file=sys.stderr)
    sys.exit(1)


def pep440(version: str) -> str:
    """package.json's semver as a Python version: 1.2.3, 1.2.3-rc.1 → 1.2.3rc1 (alpha → a,
    beta → b)."""
    m = re.fullmatch(r"(\d+\.\d+\.\d+)(?:-(alpha|beta|rc)\.?(\d+))?", version)
    if not m:
        fail(f"package.json version {version!r} has no Python equivalent (X.Y.Z or X.Y.Z-alpha|beta|rc.N)")
    base, pre, n = m.groups()
    return base + ({"alpha": "a", "beta": "b", "rc": "rc"}[pre] + n if pre else "")


def source_version() -> str:
    text = read(os.path.join(SOURCE, "_version.py")).decode()
    m = re.search(r'^__version__ = "([^"]*)"$', text, re.M)
    if not m:
        fail("python/cuda_arena/_version.py has no __version__ line")
    return m.group(1)


def check_elf(path: str, machine: int) -> None:
    with open(path, "rb") as f:
        head = f.read(20)
    is_elf = head[:4] == b"\x7fELF"
    kind = int.from_bytes(head[16:18], "little")
    found = int.from_bytes(head[18:20], "little")
    if not is_elf or kind != 3 or found != machine:
        fail(f"{path} is not an ELF shared object for machine {machine} (type {kind}, machine {found})")


def metadata(version: str) -> str:
    readme = read(os.path.join(ROOT, "python", "README.md")).decode()
    pkg = json.loads(read(os.path.join(ROOT, "package.json")))
    url = re.sub(r"^git\+|\.git$", "", pkg["repository"]["url"])
    return (
        "Metadata-Version: 2.1\n"
        "Name: cuda-arena\n"
        f"Version: {version}\n"
        "Summary: PyTorch's CUDA allocator from cuda-arena: ONNX Runtime's BFC arena and a CUDA "
        "memory-pool allocator, with stats and trace recording.\n"
        f"Home-page: {url}\n"
        f"License: {pkg['license']}\n"
        "Requires-Python: >=3.8\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Typing :: Typed\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )


def wheel_file(tag: str) -> str:
    return (
        "Wheel-Version: 1.0\n"
        "Generator: cuda-arena scripts/build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )


def package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, file here) for python/cuda_arena/, sorted; no caches."""
    out = []
    for name in sorted(os.listdir(SOURCE)):
        path = os.path.join(SOURCE, name)
        if os.path.isfile(path) and (name.endswith(".py") or name == "py.typed"):
            out.append((f"cuda_arena/{name}", path))
    return out


def build(platform: str, version: str, out_dir: str) -> str:
    machine, elf = PLATFORMS[platform]
    lib = os.path.join(ROOT, "npm", platform, "lib", "libcuda_arena.so")
    if not os.path.isfile(lib):
        how = "npm run build" if platform == "linux-x64-gnu" else f"npm run build:{platform}"
        fail(f"{lib} is missing: stage it first ({how})")
    check_elf(lib, elf)
    tag = f"py3-none-manylinux_2_17_{machine}"
    py_version = pep440(version)
    dist_info = f"cuda_arena-{py_version}.dist-info"
    files: List[Tuple[str, bytes, int]] = []
    for arcname, path in package_files():
        files.append((arcname, read(path), 0o644))
    files.append(("cuda_arena/lib/libcuda_arena.so", read(lib), 0o755))
    header = os.path.join(ROOT, "bindings", "c", "include", "cuda_arena.h")
    files.append(("cuda_arena/include/cuda_arena.h", read(header), 0o644))
    for name in ("LICENSE-MIT", "LICENSE-APACHE"):
        files.append((f"{dist_info}/{name}", read(os.path.join(ROOT, name)), 0o644))
    files.append((f"{dist_info}/METADATA", metadata(py_version).encode(), 0o644))
    files.append((f"{dist_info}/WHEEL", wheel_file(tag).encode(), 0o644))
    files.append((f"{dist_info}/top_level.txt", b"cuda_arena\n", 0o644))
    record = []
    for arcname, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arcname},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, f"cuda_arena-{py_version}-{tag}.whl")
    partial = target + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data, mode in files:
            info = zipfile.ZipInfo(arcname, DATE)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(partial, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description="Builds cuda-arena's Python wheels.")
    parser.add_argument("--platform", action="append", choices=sorted(PLATFORMS))
    parser.add_argument("--out", default=os.path.join(ROOT, "dist", "python"))
    args = parser.parse_args()
    version = json.loads(read(os.path.join(ROOT, "package.json")))["version"]
    if source_version() != version:
        fail(
            f"python/cuda_arena/_version.py is {source_version()}, package.json {version}: "
            "run node scripts/sync-version.mjs"
        )
    for platform in args.platform or sorted(PLATFORMS):
        path = build(platform, version, args.out)
        print(f"built {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
