#!/usr/bin/env bash
# Builds what scripts/gpu/foreign-streams.sh and scripts/gpu/vmm.sh run on the GPU machine
# (which has no cargo) into .device/ (ignored by git): the GPU test binaries of cuda-sys-bridge
# (tests/gpu.rs and tests/gpu_vmm.rs, their GPU tests #[ignore]d so CI skips them) and
# libcuda_arena.so. Run here, from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .device
# "Executable tests/gpu.rs (target/release/deps/gpu-<hash>)": the newest build of that target.
built=$(cargo test -p cuda-sys-bridge --release --no-run 2>&1)
test_binary() {  # tests/NAME.rs → its newest executable
  sed -n "s/.*Executable tests\/$1.rs (\(.*\))/\1/p" <<<"$built" | tail -n 1
}
exe=$(test_binary gpu)
[ -n "$exe" ] && [ -x "$exe" ] || { echo "no GPU test binary found" >&2; exit 1; }
cp "$exe" .device/gpu-tests
exe=$(test_binary gpu_vmm)
[ -n "$exe" ] && [ -x "$exe" ] || { echo "no virtual-memory GPU test binary found" >&2; exit 1; }
cp "$exe" .device/gpu-vmm-tests
cargo build -p cuda-arena-c --release
cp "${CARGO_TARGET_DIR:-target}/release/libcuda_arena.so" .device/libcuda_arena.so
ls -l .device/gpu-tests .device/gpu-vmm-tests .device/libcuda_arena.so
