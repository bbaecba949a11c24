#!/usr/bin/env bash
# Issue 15 on the GPU machine: thread scaling, 1/2/4/8/16 host threads each on its own CUDA
# stream, one shared allocator, each thread replaying its own copy of the `small` trace and of
# `mixed` with sizes ÷ 16 (scripts/gpu/bench/replay_mt.cpp), through: cuda-arena as built from
# this tree ("new"), today's cuda-arena ("today", libcuda_arena.base.so), PyTorch's caching
# allocator and cudaMallocAsync (release threshold max); then the new library allocating
# without streams ("new-nostream", a diagnostic). Runs are interleaved (for each trace and N,
# every allocator in turn) so each N is measured under the same conditions.
#
# Needs .device/ from scripts/gpu/build-threads.sh (run where cargo is), the CUDA toolkit, g++,
# python3 and (for the PyTorch row) torch; no cargo, node or network. From the repository root:
#   bash scripts/gpu/threads.sh OUTDIR
# Bounded by BUDGET_S (default 450) seconds in all: a run that would start later is skipped,
# and each run is cut at RUN_TIMEOUT_S (default 45; today's library at 8 and 16 threads may
# take longer per pass than that, which then shows as "timed out").
# Diagnostics: EXTRA="label=path.so ..." also runs other builds of the library beside "new";
# OTHERS=0 skips PyTorch and cudaMallocAsync; NOSTREAM=0 skips the new-nostream runs;
# ONE_REPEATS (default 5) is how many processes measure the new and today's library at one thread;
# ONE_PAIRS (default 3) how many processes of scripts/gpu/replay_pair.cpp time the two libraries
# at one thread in one process, their passes alternating (the figure the one-thread bar takes:
# separate processes land at one of two speeds, docs/benchmarks.md);
# ARENA_CONF="arena.k=v,..." configures every cuda-arena run (e.g. arena.use_virtual_memory=1).
# Results: OUTDIR/mt.jsonl (one JSON object per run), OUTDIR/mt.log, OUTDIR/device_facts.txt,
# OUTDIR/mt_tables.md (scripts/gpu/bench/mt_summarize.py) and OUTDIR/bars.md, whose last line
# is "threads: PASS" or "threads: FAIL" (scripts/gpu/threads_bars.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: threads.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$PWD/scripts/gpu/bench
B=${BUILD:-/tmp/threads-build}
mkdir -p "$B"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BUDGET_S=${BUDGET_S:-450}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-45}
THREADS=${THREADS:-"1 2 4 8 16"}
SMALL_OPS=${SMALL_OPS:-131072}
MIXED_DIV=${MIXED_DIV:-16}
MIXED_OPS=${MIXED_OPS:-131072}
MT_BUDGET=${MT_BUDGET:-1.5}
MT_REPS=${MT_REPS:-5}
# cuda-arena's backend in the plugin runs (a dry run without a GPU can use virtual).
ARENA_BACKEND=${ARENA_BACKEND:-cuda}
EXTRA=${EXTRA:-}
OTHERS=${OTHERS:-1}
NOSTREAM=${NOSTREAM:-1}
ONE_REPEATS=${ONE_REPEATS:-5}
ONE_PAIRS=${ONE_PAIRS:-3}
ARENA_CONF=${ARENA_CONF:-}
NEW=$PWD/.device/libcuda_arena.so
BASE=$PWD/.device/libcuda_arena.base.so
RES=$OUT/mt.jsonl
LOG=$OUT/mt.log
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
say() { echo "[$(el)s] $*" | tee -a "$LOG"; }
for f in "$NEW" "$BASE"; do
  [ -e "$f" ] || { say "FATAL: $f missing (run scripts/gpu/build-threads.sh where cargo is)"; exit 1; }
done
: > "$RES"

{
  echo "## date"; date -u
  echo "## nvidia-smi"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  echo "## cpu"; lscpu | sed -n '1,20p'; echo "nproc: $(nproc)"
  echo "## libraries"; ls -l "$NEW" "$BASE"; cat .device/libcuda_arena.rev .device/libcuda_arena.base.rev 2>/dev/null
} > "$OUT/device_facts.txt" 2>&1

# ---- build and traces, in parallel ----------------------------------------------------------
say "traces, replay_mt, plugins"
( python3 "$HERE/gen_traces.py" --out "$B/traces" --only small mixed >/dev/null &&
  cd "$B/traces" && grep -E ' (small|mixed)\.trc$' "$HERE/traces.sha256" | sha256sum -c ) > "$OUT/traces.log" 2>&1 &
P_TR=$!
g++ -O2 -std=c++17 -pthread -I"$CUDA/include" "$HERE/replay_mt.cpp" -L"$CUDA/lib64" -lcudart -ldl \
  -Wl,-rpath,"$CUDA/lib64" -o "$B/replay_mt" >> "$LOG" 2>&1 &
P_MT=$!
g++ -std=c++17 -O2 -shared -fPIC -I"$HERE" -o "$B/cuda_arena_plugin.so" "$HERE/cuda_arena_plugin.cpp" -ldl >> "$LOG" 2>&1 &
P_PL=$!
g++ -O2 -std=c++17 -I"$CUDA/include" -I"$HERE" scripts/gpu/replay_pair.cpp -L"$CUDA/lib64" -lcudart -ldl \
  -Wl,-rpath,"$CUDA/lib64" -o "$B/replay_pair" >> "$LOG" 2>&1 &
P_PR=$!
TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null)
TORCH_ABI=$(python3 -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
P_TO=
if [ -n "$TORCH_DIR" ]; then
  g++ -O2 -std=c++17 -fPIC -shared -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI="${TORCH_ABI:-1}" \
    -I"$HERE" -I"$TORCH_DIR/include" -I"$CUDA/include" "$HERE/torch_plugin.cpp" \
    -L"$TORCH_DIR/lib" -lc10_cuda -lc10 -Wl,-rpath,"$TORCH_DIR/lib" -o "$B/libtorch_plugin.so" >> "$LOG" 2>&1 &
  P_TO=$!
fi
wait $P_TR && say "traces ok (sha256 match)" || say "WARNING: trace generation or sha256 check failed"
cat "$OUT/traces.log" >> "$LOG"
wait $P_MT; wait $P_PL; wait $P_PR
[ -x "$B/replay_mt" ] && [ -e "$B/cuda_arena_plugin.so" ] || { say "FATAL: replay_mt or the plugin did not build"; exit 1; }
TORCH_OK=0
[ -n "$P_TO" ] && wait "$P_TO" && [ -e "$B/libtorch_plugin.so" ] && TORCH_OK=1
say "built; torch plugin: $TORCH_OK"

TR_small="--trace $B/traces/small.trc --max-ops $SMALL_OPS"
TR_mixed="--trace $B/traces/mixed.trc --size-div $MIXED_DIV --max-ops $MIXED_OPS"
P="$B/cuda_arena_plugin.so"

# PyTorch's wheels may carry their own libcudart; fall back to it if the plain run fails.
TORCH_ENV=()
if [ $TORCH_OK = 1 ]; then
  if ! "$B/replay_mt" $TR_small --threads 2 --reps 1 --budget-s 1 --backend plugin \
      --plugin "$B/libtorch_plugin.so" --label smoke >> "$LOG" 2>&1; then
    CRT=$(find "$(dirname "$TORCH_DIR")"/nvidia -name 'libcudart.so.1*' 2>/dev/null | head -1)
    TORCH_ENV=(env "LD_LIBRARY_PATH=$(dirname "${CRT:-/nonexistent/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    "${TORCH_ENV[@]}" "$B/replay_mt" $TR_small --threads 2 --reps 1 --budget-s 1 --backend plugin \
      --plugin "$B/libtorch_plugin.so" --label smoke >> "$LOG" 2>&1 || { say "torch unusable"; TORCH_OK=0; }
  fi
fi

# ---- the matrix: trace x N x allocator, one process per run --------------------------------
REP=1
one() {  # label, replay_mt args...  (the run is labelled "r$REP label")
  local label=$1; shift
  local left=$(( BUDGET_S - $(el) ))
  if [ "$left" -lt 8 ]; then say "skip (budget) $label $*"; return; fi
  local lim=$(( left < RUN_TIMEOUT_S ? left : RUN_TIMEOUT_S ))
  local env=()
  [ "$label" = torch ] && env=("${TORCH_ENV[@]}")
  "${env[@]}" timeout "$lim" "$B/replay_mt" "$@" --reps "$MT_REPS" --budget-s "$MT_BUDGET" \
    --label "r$REP $label" --json "$RES" >> "$LOG" 2>&1
  local rc=$?
  if [ $rc -eq 124 ]; then say "  timed out after ${lim}s: $label"; elif [ $rc -ne 0 ]; then say "  FAILED rc=$rc: $label"; fi
}
for t in small mixed; do
  tr="TR_$t"
  for n in $THREADS; do
    say "$t N=$n"
    # One thread: the new and today's libraries in ONE_REPEATS processes each, in ABBA order
    # (a process's time can be 20% off another's; the bars take the median process).
    if [ "$n" = 1 ]; then
      for REP in $(seq 2 "$ONE_REPEATS"); do
        if [ $((REP % 2)) = 0 ]; then order="today new"; else order="new today"; fi
        for lib in $order; do
          if [ $lib = new ]; then L=$NEW; else L=$BASE; fi
          one $lib ${!tr} --threads 1 --backend plugin --plugin "$P" --plugin-arg "$L@$ARENA_BACKEND@Cuda@$ARENA_CONF"
        done
      done
      REP=1
    fi
    one new ${!tr} --threads "$n" --backend plugin --plugin "$P" --plugin-arg "$NEW@$ARENA_BACKEND@Cuda@$ARENA_CONF"
    one today ${!tr} --threads "$n" --backend plugin --plugin "$P" --plugin-arg "$BASE@$ARENA_BACKEND@Cuda@$ARENA_CONF"
    for x in $EXTRA; do
      one "${x%%=*}" ${!tr} --threads "$n" --backend plugin --plugin "$P" --plugin-arg "$PWD/${x#*=}@$ARENA_BACKEND@Cuda@$ARENA_CONF"
    done
    if [ "$OTHERS" = 1 ]; then
      [ $TORCH_OK = 1 ] && one torch ${!tr} --threads "$n" --backend plugin --plugin "$B/libtorch_plugin.so"
      one cudaMallocAsync ${!tr} --threads "$n" --backend cudaMallocAsync --release-threshold max
    fi
  done
done
# One thread, both libraries in one process (A B B A ... passes, the two swapping places every
# other process).
PAIRS=$OUT/one_pairs.jsonl
: > "$PAIRS"
if [ -x "$B/replay_pair" ]; then
  for t in small mixed; do
    tr="TR_$t"
    for p in $(seq 1 "$ONE_PAIRS"); do
      left=$(( BUDGET_S - $(el) ))
      if [ "$left" -lt 8 ]; then say "skip (budget) one-thread pair $t"; continue; fi
      a=("$BASE" today) b=("$NEW" new)
      [ $((p % 2)) = 0 ] && { a=("$NEW" new); b=("$BASE" today); }
      timeout $(( left < RUN_TIMEOUT_S ? left : RUN_TIMEOUT_S )) "$B/replay_pair" ${!tr} --plugin "$P" \
        --arg-a "${a[0]}@$ARENA_BACKEND@Cuda@$ARENA_CONF" --label-a "${a[1]}" \
        --arg-b "${b[0]}@$ARENA_BACKEND@Cuda@$ARENA_CONF" --label-b "${b[1]}" \
        --rounds 8 --json "$PAIRS" >> "$LOG" 2>&1 || say "  FAILED: one-thread pair $t"
    done
  done
else
  say "replay_pair did not build: no one-thread pairs"
fi
[ "$NOSTREAM" = 1 ] && for t in small mixed; do
  tr="TR_$t"
  for n in $THREADS; do
    one new-nostream ${!tr} --threads "$n" --backend plugin --plugin "$P" \
      --plugin-arg "$NEW@$ARENA_BACKEND@Cuda@plugin.stream=0${ARENA_CONF:+,$ARENA_CONF}"
  done
done

say "summary"
python3 "$HERE/mt_summarize.py" "$RES" > "$OUT/mt_tables.md" 2>> "$LOG"
python3 scripts/gpu/threads_bars.py "$RES" "$PAIRS" > "$OUT/bars.md" 2>> "$LOG"
cat "$OUT/mt_tables.md" "$OUT/bars.md"
say "done"
tail -n 1 "$OUT/bars.md" | grep -q "threads: PASS"
