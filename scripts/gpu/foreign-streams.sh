#!/usr/bin/env bash
# Issue 13 on the GPU machine: streams the host owns, with every allocator kind, and PyTorch
# on cuda-arena. Needs .device/ from scripts/gpu/build-device.sh (run where cargo is), a CUDA
# driver and Python with torch; no cargo, node or network. From the repository root:
#   bash scripts/gpu/foreign-streams.sh
# Pass: the last line is "foreign-streams: PASS" (exit 0); anything else names what failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
step() { echo; echo "== $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

step "GPU tests (crates/cuda-sys-bridge/tests/gpu.rs, the #[ignore]d ones included)"
# One thread: the tests measure the device's free memory and hold streams at gates.
.device/gpu-tests --ignored --test-threads=1 --nocapture || status=1

step "PyTorch on cuda-arena: the arena (defaults)"
python3 scripts/gpu/torch_smoke.py .device/libcuda_arena.so || status=1

step "PyTorch on cuda-arena: the memory pool (CUDA_ARENA_CONF=arena.use_cuda_mempool=1)"
CUDA_ARENA_CONF=arena.use_cuda_mempool=1 \
  python3 scripts/gpu/torch_smoke.py .device/libcuda_arena.so || status=1

step "PyTorch on cuda-arena: a bad CUDA_ARENA_CONF is reported once, naming the key"
out=$(CUDA_ARENA_CONF=arena.max_mem=8GB python3 - .device/libcuda_arena.so 2>&1 <<'PY'
import ctypes, sys, torch
lib = sys.argv[1]
p = torch.cuda.memory.CUDAPluggableAllocator(lib, "cuda_arena_torch_alloc", "cuda_arena_torch_free")
torch.cuda.memory.change_current_allocator(p)
c = ctypes.CDLL(lib)
c.cuda_arena_torch_alloc.restype = ctypes.c_void_p
c.cuda_arena_torch_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
torch.cuda.init()
fails = sum(c.cuda_arena_torch_alloc(4096, 0, None) is None for _ in range(3))
print(f"{fails} of 3 allocations failed, last error code {c.cuda_arena_last_error_code()}")
PY
)
echo "$out"
if [ "$(grep -c 'CUDA_ARENA_CONF is invalid at arena.max_mem' <<<"$out")" = 1 ] &&
   grep -q '3 of 3 allocations failed, last error code 1' <<<"$out"; then
  echo "ok    reported once; every allocation failed as out of memory"
else
  echo "FAIL  bad CUDA_ARENA_CONF"
  status=1
fi

echo
if [ "$status" -eq 0 ]; then echo "foreign-streams: PASS"; else echo "foreign-streams: FAIL"; fi
exit "$status"
