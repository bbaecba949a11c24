#!/usr/bin/env bash
# PyTorch's workloads (scripts/gpu/models.py) timed native, ALLOC, ALLOC, native (ABBA), so a
# machine that drifts during the call moves both alike: the time bar's figure is the mean of the
# two ALLOC runs' medians over the mean of the two native runs'. The first native run is each
# workload's reference (losses and outputs bitwise). On the GPU machine, from the repository
# root, with .device/libcuda_arena.so (scripts/gpu/build-device.sh):
#   OUT=/tmp/abba bash scripts/gpu/torch-abba.sh "encoder-serve decoder-generate resnet50-train gpt2-train" arena
# One summary line per run, then one line per workload: "WORKLOAD ALLOC/native R".
set -u
W=${1:?usage: torch-abba.sh "WORKLOADS" [ALLOC]}
A=${2:-arena}
OUT=${OUT:-/tmp/torch-abba}
mkdir -p "$OUT"
for w in $W; do
  i=0
  for x in native "$A" "$A" native; do
    i=$((i + 1))
    if [ $i = 1 ]; then chk=(--check); else chk=(--check "$OUT/$w.r1.json"); fi
    timeout 300 python3 scripts/gpu/models.py "$w" "$x" "${chk[@]}" --json "$OUT/$w.r$i.json" 2>&1 >/dev/null | tail -1
  done
  python3 - "$OUT" "$w" "$A" <<'PY'
import json, sys
out, w, a = sys.argv[1:]
try:
    runs = [json.load(open(f"{out}/{w}.r{i}.json")) for i in (1, 2, 3, 4)]
    med = [r["time"]["median_s"] for r in runs]
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit(f"{w}: a run left no time ({e})")
print(f"{w} {a}/native {(med[1] + med[2]) / (med[0] + med[3]):.3f}")
PY
done
