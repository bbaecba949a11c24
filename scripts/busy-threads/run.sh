#!/usr/bin/env bash
# Memory held by busy threads (docs/benchmarks.md, "Fourteenth session"): busy_threads.c at
# 1, 4 and 16 threads through the C ABI on the `virtual` backend, with the host streams'
# simulated events (CUDA_ARENA_SIM_STREAM_EVENTS, default immediate), on streams and without,
# at the default churn headroom and at 0. Needs a C compiler and the built library:
#   cargo build -p cuda-arena-c --release && bash scripts/busy-threads/run.sh [LIBDIR]
# Use a machine with at least 16 cores for the 16-thread rows.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIB=${1:-$PWD/target/release}
[ -e "$LIB/libcuda_arena.so" ] || { echo "no $LIB/libcuda_arena.so"; exit 1; }
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
EVENTS=${EVENTS:-immediate}
for t in ${THREADS:-1 4 16}; do
  cc -O2 -DT="$t" -DROUNDS=400 -pthread -o "$B/busy$t" scripts/busy-threads/busy_threads.c \
    -Ibindings/c/include -L"$LIB" -lcuda_arena -Wl,-rpath,"$LIB"
  for v in "stream" "nostream" "stream arena.vm_churn_headroom_percent=0" \
           "nostream arena.vm_churn_headroom_percent=0" "stream arena.use_virtual_memory=0"; do
    # shellcheck disable=SC2086
    echo "T=$t $v: $(CUDA_ARENA_SIM_STREAM_EVENTS=$EVENTS "$B/busy$t" virtual $v | tail -1)"
  done
done
