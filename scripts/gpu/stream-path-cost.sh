#!/usr/bin/env bash
# What the stream path costs, apart from the arena: replay_pair (one process, passes
# alternating) times each build with `cuda_arena_alloc_on_stream` against the same build with
# `cuda_arena_alloc` (the plugin's `plugin.stream=0`), then today's build against the new one
# both without streams. One line per process.
# Here (no GPU): as pair-bars.sh (.device/libcuda_arena.so, .device/libcuda_arena.base.so,
# .device/bench). There: bash scripts/gpu/stream-path-cost.sh
# Env: TRACES (default "small mixed inference"), PROCESSES (3), ROUNDS (4).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-/tmp/stream-path-cost}
mkdir -p "$B/traces"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BENCH=.device/bench
NEW=$PWD/.device/libcuda_arena.so
OLD=$PWD/.device/libcuda_arena.base.so
TRACES=${TRACES:-"small mixed inference"}
PROCESSES=${PROCESSES:-3}
ROUNDS=${ROUNDS:-4}
python3 "$BENCH/gen_traces.py" --out "$B/traces" >/dev/null || { echo "FATAL: gen_traces"; exit 1; }
g++ -O2 -std=c++17 -I"$CUDA/include" -I"$BENCH" scripts/gpu/replay_pair.cpp -L"$CUDA/lib64" -lcudart -ldl \
  -Wl,-rpath,"$CUDA/lib64" -o "$B/replay_pair" || { echo "FATAL: replay_pair"; exit 1; }
g++ -std=c++17 -O2 -shared -fPIC -o "$B/plugin.so" "$BENCH/cuda_arena_plugin.cpp" -ldl ||
  { echo "FATAL: plugin"; exit 1; }
# pair LABEL A_ARG B_ARG: one process, prints the two medians and B / A.
pair() {
  "$B/replay_pair" --trace "$B/traces/$t.trc" --plugin "$B/plugin.so" --arg-a "$2" --arg-b "$3" \
    --rounds "$ROUNDS" 2>/dev/null | python3 -c "
import json, sys
r = json.loads(sys.stdin.readline())
print(sys.argv[1], round(r['median_a'], 1), round(r['median_b'], 1), round(r['median_b'] / r['median_a'], 3))
" "$t $1" || echo "$t $1 FAILED"
}
echo "trace what A_ns B_ns B/A"
for t in $TRACES; do
  for _ in $(seq 1 "$PROCESSES"); do
    for L in NEW OLD; do
      lib=${!L}
      # A copy, so that the second side loads its own instance of the library.
      cp "$lib" "$B/copy-$L.so"
      pair "$L:stream/nostream" "$lib@cuda@Cuda@" "$B/copy-$L.so@cuda@Cuda@plugin.stream=0"
    done
    pair "nostream:today/new" "$OLD@cuda@Cuda@plugin.stream=0" "$NEW@cuda@Cuda@plugin.stream=0"
  done
done
