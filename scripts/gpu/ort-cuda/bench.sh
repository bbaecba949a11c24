#!/usr/bin/env bash
# The serving benchmark: onnxruntime-node's CUDA provider serving BERT-base (dynamic batch and
# sequence) on ONNX Runtime's own allocator and on each cuda-arena mode, one process per
# (scenario, allocator), the allocators alternating within each round and their order rotated
# from round to round. Writes OUT/results.jsonl (a line per process) and OUT/table.md (medians
# over rounds, table.cjs). Run by remote.sh on the GPU machine (`remote.sh bench OUT`), or by
# dry-run.sh with ORT_CUDA_DRY=1 (the MLP test model on the CPU provider, small counts).
#   bash bench.sh OUT
# env (set by remote.sh / dry-run.sh): NODE, ORT_CUDA_APP, BENCH_MODEL (bert.onnx, or the MLP in
#   the dry run); ROUNDS=2; BUDGET_S=480 (no process starts after this many seconds; the table
#   is made from what ran); ONLY_SCENARIOS="one k4" (a subset, by name);
#   ONLY_ALLOCATORS="own|default" (those whose label has one of the words: more rounds of the
#   two the throughput bar compares); POOL=0 leaves the memory pool out; EXTRA="label|arena|k=v,k=v;..." adds configs (diagnostics),
#   a fourth field an environment for that process (label|arena||HELD_SAMPLE=0).
set -uo pipefail
OUT=${1:?usage: bench.sh OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
NODE=${NODE:-node}
ROUNDS=${ROUNDS:-2}
BUDGET_S=${BUDGET_S:-480}
MODEL=${BENCH_MODEL:?BENCH_MODEL must name the model}
mkdir -p "$OUT"
: >"$OUT/results.jsonl"

# name|sessions|requests per session|max batch|max sequence|label
if [ "${ORT_CUDA_DRY:-0}" = 1 ]; then
  KIND=mlp
  SCENARIOS=("one|1|12|64|8|one session, 12 requests of 1-64 rows" "k2|2|6|32|8|2 sessions at once, 6 requests each of 1-32 rows")
  ALLOCATORS=("ort|ort|" "cuda-arena default|arena|" "cuda-arena region arena|arena|arena.use_virtual_memory=0")
else
  KIND=bert
  SCENARIOS=(
    "one|1|300|32|512|one session, 300 requests of 1-32 x 8-512"
    "k1|1|60|16|256|K = 1, 60 requests of 1-16 x 8-256"
    "k4|4|60|16|256|K = 4 at once, 60 requests each"
    "k8|8|60|16|256|K = 8 at once, 60 requests each"
  )
  ALLOCATORS=("ONNX Runtime's own|ort|" "cuda-arena default|arena|" "cuda-arena region arena|arena|arena.use_virtual_memory=0")
  [ "${POOL:-1}" = 1 ] && ALLOCATORS+=("cuda-arena memory pool|arena|arena.use_cuda_mempool=1")
  # EXTRA="label|arena|k=v,k=v;label|arena|..." adds configs (diagnostics).
  IFS=';' read -r -a extra <<<"${EXTRA:-}"
  for e in "${extra[@]}"; do [ -n "$e" ] && ALLOCATORS+=("$e"); done
fi

start=$(date +%s)
n=${#ALLOCATORS[@]}
for round in $(seq 1 "$ROUNDS"); do
  for sc in "${SCENARIOS[@]}"; do
    IFS='|' read -r name sessions requests maxb maxs label <<<"$sc"
    if [ -n "${ONLY_SCENARIOS:-}" ] && ! grep -qw "$name" <<<"$ONLY_SCENARIOS"; then continue; fi
    for i in $(seq 0 $((n - 1))); do
      IFS='|' read -r alloc mode conf penv <<<"${ALLOCATORS[$(((i + round - 1) % n))]}"
      if [ -n "${ONLY_ALLOCATORS:-}" ] && ! grep -qwE "$ONLY_ALLOCATORS" <<<"$alloc"; then continue; fi
      if [ $(($(date +%s) - start)) -ge "$BUDGET_S" ]; then
        echo "[bench] budget of ${BUDGET_S}s spent: no more processes"
        break 3
      fi
      line=$(env UV_THREADPOOL_SIZE=$((sessions > 4 ? sessions : 4)) ${penv:-} timeout 240 "$NODE" "$HERE/serve.cjs" "$mode" "$conf" "$sessions" "$requests" "$maxb" "$maxs" "$MODEL" "$KIND" 2>&1 | tee -a "$OUT/serve.log" | grep -E '^(RESULT|FAILED)' | tail -n 1)
      result=null
      [[ $line == RESULT* ]] && result=${line#RESULT }
      printf '{"round":%d,"scenario":"%s","allocator":"%s","result":%s}\n' "$round" "$label" "$alloc" "$result" >>"$OUT/results.jsonl"
      echo "[bench] round $round, $name, $alloc: ${line:0:300}"
    done
  done
done
"$NODE" "$HERE/table.cjs" "$OUT/results.jsonl" | tee "$OUT/table.md"
rc=${PIPESTATUS[0]}
echo "[bench] $(wc -l <"$OUT/results.jsonl") processes in $(($(date +%s) - start)) s; table exit $rc"
exit "$rc"
