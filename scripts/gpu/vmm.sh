#!/usr/bin/env bash
# Issue 14 on the GPU machine: the CUDA virtual-memory form through the arena (pages mapped on
# demand and read back, data kept while the pages between are unmapped, wrong calls refused,
# out of memory then still working, shrink and release back to the driver's baseline, a warm
# arena mapping nothing) and what a page costs the driver to map and unmap. Needs .device/
# from scripts/gpu/build-device.sh (run where cargo is) and a CUDA driver; no cargo, node or
# network. From the repository root:
#   bash scripts/gpu/vmm.sh
# Pass: the last line is "vmm: PASS" (exit 0); anything else names what failed. The memory
# and speed comparison with the other allocators is scripts/gpu/memory-bars.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

echo
echo "== virtual-memory GPU tests (crates/cuda-sys-bridge/tests/gpu_vmm.rs, the #[ignore]d ones included)"
# One thread: the tests measure the device's free memory.
[ -x .device/gpu-vmm-tests ] || { echo "no .device/gpu-vmm-tests: run scripts/gpu/build-device.sh"; exit 1; }
.device/gpu-vmm-tests --ignored --test-threads=1 --nocapture || status=1

echo
echo "== what each driver call costs per 2 MiB page (scripts/gpu/vmm_cost.cpp; informational)"
CUDA=${CUDA_HOME:-/usr/local/cuda}
if g++ -O2 -std=c++17 -I"$CUDA/include" scripts/gpu/vmm_cost.cpp -L"$CUDA/lib64" -L"$CUDA/lib64/stubs" \
  -lcuda -o /tmp/vmm_cost; then
  /tmp/vmm_cost 16 5
else
  echo "vmm_cost did not build (no CUDA headers?): skipped"
fi

echo
if [ "$status" -eq 0 ]; then echo "vmm: PASS"; else echo "vmm: FAIL"; fi
exit "$status"
