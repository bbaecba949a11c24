#!/usr/bin/env bash
# Builds what scripts/gpu/foreign-streams.sh runs on the GPU machine (which has no cargo) into
# .device/ (ignored by git): the GPU test binary of cuda-sys-bridge (tests/gpu.rs, its GPU
# tests #[ignore]d so CI skips them) and libcuda_arena.so. Run here, from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .device
# "Executable tests/gpu.rs (target/release/deps/gpu-<hash>)": the newest build of that target.
exe=$(cargo test -p cuda-sys-bridge --release --no-run 2>&1 |
  sed -n 's/.*Executable tests\/gpu.rs (\(.*\))/\1/p' | tail -n 1)
[ -n "$exe" ] && [ -x "$exe" ] || { echo "no GPU test binary found" >&2; exit 1; }
cp "$exe" .device/gpu-tests
cargo build -p cuda-arena-c --release
cp "${CARGO_TARGET_DIR:-target}/release/libcuda_arena.so" .device/libcuda_arena.so
ls -l .device/gpu-tests .device/libcuda_arena.so
