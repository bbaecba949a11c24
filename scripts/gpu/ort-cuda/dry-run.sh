#!/usr/bin/env bash
# The GPU scripts without a GPU, so they do not rot: pack.sh (no provider, the machine's own
# Node), remote.sh unpack, then remote.sh run and pair with ORT_CUDA_DRY=1: tests.cjs, bench.sh
# and pair.cjs on the `host` backend and ONNX Runtime's CPU provider, through the packed packages.
# CI runs it (__test__/ort-cuda-dry-run.spec.ts). Needs npm ci && npm run build.
#   bash scripts/gpu/ort-cuda/dry-run.sh [KEEP_DIR]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=${1:-$(mktemp -d)}
[ -n "${1:-}" ] || trap 'rm -rf "$T"' EXIT
DEST=$T/pieces WORK=$T/work PROVIDER=none NODE_XZ=0 XZ_LEVEL=-0 bash "$HERE/pack.sh"
export ORT_CUDA_DRY=1 ORT_CUDA_ROOT=$T/remote
bash "$HERE/remote.sh" unpack "$T/pieces/call1"
ROUNDS=1 bash "$HERE/remote.sh" run "$T/out"
PAIR_SCENARIOS="one k1 k4" PAIR_PROCESSES=1 bash "$HERE/remote.sh" pair "$T/out"
# multi.cjs needs two GPUs: here it is only parsed.
node --check "$HERE/multi.cjs"
