#!/usr/bin/env bash
# Issue 14's bars on the GPU machine, in one run: the four synthetic traces of ../shared/bench
# (inference, mixed, small, growing) and the four real-model traces (benches/traces/torch/,
# PyTorch snapshots converted by snapshot_to_trc.py), each replayed by ../shared/bench's
# replay.cpp through PyTorch's caching allocator (native and expandable_segments:True),
# cudaMallocAsync (release threshold max), today's cuda-arena and the virtual-memory mode.
# Memory: the driver-measured peak (cudaMemGetInfo delta) of the first pass ÷ peak live
# requested; time: median ns/op of the timed passes (stream path: cuda_arena_alloc_on_stream).
#
# Prepare here (cargo and the shared folder are here, not there):
#   bash scripts/gpu/build-device.sh                        # .device/libcuda_arena.so (new)
#   cp OLD/libcuda_arena.so .device/libcuda_arena.base.so   # "today's" build, optional
#   rm -rf .device/bench && cp -r ../shared/bench .device/bench
# Run there, from the repository root, carrying .device:
#   bash scripts/gpu/memory-bars.sh
# Env: OUT (default ./bars-out), VM_CONF (the new mode's config, default
# arena.use_virtual_memory=1), TRACES (default all eight), REPS (3), BUDGET_S (10 per run),
# ALLOCATORS (default "torch-default torch-expandable cudaMallocAsync-max arena-base arena vm"),
# SPEED_REPEATS (3: today's arena and the new mode, whose times the bar compares, each run in
# that many processes, alternating; one process's time can be 20 % off another's).
# PIN (unset): CPUs to pin every replay process to (taskset -c PIN), e.g. 3, against the
# scheduler's placement, which on a shared machine moves one process's time by up to 2x.
# WRAP (unset): a command every replay process runs under (split on spaces), e.g.
# "setarch x86_64 -R" or a THP wrapper, to find what moves one process's time.
# The bars: OUT/bars.md (scripts/gpu/memory_bars.py), last line "memory-bars: PASS" or FAIL.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/bars-out}
mkdir -p "$OUT"
B=${BUILD:-/tmp/bars-build}
mkdir -p "$B/traces"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BENCH=.device/bench
LIB=$PWD/.device/libcuda_arena.so
BASE=$PWD/.device/libcuda_arena.base.so
VM_CONF=${VM_CONF:-arena.use_virtual_memory=1}
REPS=${REPS:-3}
BUDGET_S=${BUDGET_S:-10}
TRACES=${TRACES:-"inference mixed small growing gpt2-train resnet50-train encoder-serve decoder-generate"}
ALLOCATORS=${ALLOCATORS:-"torch-default torch-expandable cudaMallocAsync-max arena-base arena vm"}
SPEED_REPEATS=${SPEED_REPEATS:-3}
RES=$OUT/results.jsonl
LOG=$OUT/run.log
: >"$RES"
T0=$SECONDS
say() { echo "[$((SECONDS - T0))s] $*" | tee -a "$LOG"; }

say "traces"
python3 "$BENCH/gen_traces.py" --out "$B/traces" >>"$LOG" 2>&1 || { say "FATAL: gen_traces"; exit 1; }
for w in gpt2-train resnet50-train encoder-serve decoder-generate; do
  python3 scripts/gpu/snapshot_to_trc.py "benches/traces/torch/$w.pickle.xz" "$B/traces/$w.trc" | tee -a "$LOG"
done

say "build"
g++ -O2 -std=c++17 -I"$CUDA/include" "$BENCH/replay.cpp" -L"$CUDA/lib64" -lcudart -ldl \
  -Wl,-rpath,"$CUDA/lib64" -o "$B/replay" >>"$LOG" 2>&1 || { say "FATAL: replay did not build"; exit 1; }
g++ -std=c++17 -O2 -shared -fPIC -o "$B/cuda_arena_plugin.so" "$BENCH/cuda_arena_plugin.cpp" -ldl \
  >>"$LOG" 2>&1 || { say "FATAL: cuda_arena_plugin did not build"; exit 1; }
TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null)
TORCH_ABI=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
g++ -O2 -std=c++17 -fPIC -shared -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI="${TORCH_ABI:-1}" \
  -I"$BENCH" -I"$TORCH_DIR/include" -I"$CUDA/include" "$BENCH/torch_plugin.cpp" \
  -L"$TORCH_DIR/lib" -lc10_cuda -lc10 -Wl,-rpath,"$TORCH_DIR/lib" -o "$B/libtorch_plugin.so" \
  >>"$LOG" 2>&1 || say "torch plugin did not build: its rows are skipped"
# torch's libc10_cuda may need torch's own cudart first on the library path.
TORCH_LDP=$(dirname "$(find "$(dirname "$TORCH_DIR")"/nvidia -name 'libcudart.so.1*' 2>/dev/null | head -1)" 2>/dev/null)

replay() {  # label trace args...
  local label=$1 t=$2; shift 2
  say "run $label $t"
  local pin=()
  [ -n "${PIN:-}" ] && pin=(taskset -c "$PIN")
  local wrap=()
  [ -n "${WRAP:-}" ] && read -r -a wrap <<<"$WRAP"
  timeout $((BUDGET_S * 4 + 60)) "${pin[@]}" "${wrap[@]}" "$B/replay" --trace "$B/traces/$t.trc" --reps "$REPS" \
    --budget-s "$BUDGET_S" --label "$label" --json "$RES" "$@" >>"$LOG" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || say "  FAILED rc=$rc ($label $t)"
}
one() {  # allocator trace
  local a=$1 t=$2
    case $a in
      torch-default)
        [ -e "$B/libtorch_plugin.so" ] && LD_LIBRARY_PATH="$TORCH_LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
          replay "$a" "$t" --backend plugin --plugin "$B/libtorch_plugin.so" ;;
      torch-expandable)
        [ -e "$B/libtorch_plugin.so" ] && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
          LD_LIBRARY_PATH="$TORCH_LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
          replay "$a" "$t" --backend plugin --plugin "$B/libtorch_plugin.so" ;;
      cudaMallocAsync-max) replay "$a" "$t" --backend cudaMallocAsync --release-threshold max ;;
      arena-base)
        [ -e "$BASE" ] && replay cuda-arena-today "$t" --backend plugin --plugin "$B/cuda_arena_plugin.so" \
          --plugin-arg "$BASE@cuda@Cuda@" ;;
      arena) replay cuda-arena "$t" --backend plugin --plugin "$B/cuda_arena_plugin.so" --plugin-arg "$LIB@cuda@Cuda@" ;;
      vm) replay "cuda-arena[$VM_CONF]" "$t" --backend plugin --plugin "$B/cuda_arena_plugin.so" \
          --plugin-arg "$LIB@cuda@Cuda@$VM_CONF" ;;
      *) say "unknown allocator $a" ;;
    esac
}
for t in $TRACES; do
  paired=()
  for a in $ALLOCATORS; do
    case $a in
      arena-base|vm) paired+=("$a") ;;
      *) one "$a" "$t" ;;
    esac
  done
  # Today's arena and the new mode in alternating order (ABBA), SPEED_REPEATS processes each.
  for r in $(seq 1 "$SPEED_REPEATS"); do
    if [ $((r % 2)) = 1 ]; then order=("${paired[@]}"); else order=(); for ((i=${#paired[@]}-1; i>=0; i--)); do order+=("${paired[$i]}"); done; fi
    for a in "${order[@]}"; do one "$a" "$t"; done
  done
done
say "summary"
python3 "$BENCH/summarize.py" "$RES" >"$OUT/tables.md" 2>>"$LOG"
cat "$OUT/tables.md"
python3 scripts/gpu/memory_bars.py "$RES" >"$OUT/bars.md" 2>>"$LOG"
cat "$OUT/bars.md"
say "done"
