#!/usr/bin/env bash
# Builds the stand-in CUDA runtime (header and libcudart.so) into DIR (default
# /tmp/stub-cuda) and prints it: CUDA_HOME=$(bash scripts/gpu/stub-cudart/stub.sh)
# BACKEND=virtual bash scripts/gpu/pair-bars.sh then times two builds' C ABI paths on this
# machine, on the `virtual` backend (no GPU, no CUDA toolkit; ratios only, as on the GPU).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-/tmp/stub-cuda}
mkdir -p "$DIR/include" "$DIR/lib64"
cp "$HERE/cuda_runtime_api.h" "$DIR/include/"
g++ -std=c++17 -O2 -shared -fPIC -I"$HERE" -o "$DIR/lib64/libcudart.so" "$HERE/stub.cpp"
echo "$DIR"
