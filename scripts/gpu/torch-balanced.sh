#!/usr/bin/env bash
# PyTorch's time bar in an order-balanced protocol: per workload native, cuda-arena's default,
# the default again, native again (scripts/gpu/models.py; every run checked bitwise against the
# first native run), so that a machine that drifts between processes moves both alike. Prints
# each run's line and, per workload, the default's summed median times over native's.
# There (the GPU machine, with .device/libcuda_arena.so carried as models.py expects):
#   bash scripts/gpu/torch-balanced.sh [WORKLOAD...]
# (default: the four of proof.sh). OUT (default /tmp/torch-balanced) keeps the JSON files.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/torch-balanced}
mkdir -p "$OUT"
W=("$@")
[ ${#W[@]} -gt 0 ] || W=(gpt2-train resnet50-train encoder-serve decoder-generate)
for w in "${W[@]}"; do
  ref=$OUT/$w.native1.json
  python3 scripts/gpu/models.py "$w" native --json "$ref" --check 2>&1 >/dev/null | tail -1
  for run in arena1 arena2 native2; do
    python3 scripts/gpu/models.py "$w" "${run%?}" --check "$ref" --json "$OUT/$w.$run.json" 2>&1 >/dev/null | tail -1
  done
  python3 - "$OUT" "$w" <<'PY'
import json, sys
out, w = sys.argv[1], sys.argv[2]
def med(run):
    return json.load(open(f"{out}/{w}.{run}.json"))["time"]["median_s"]
try:
    a = med("arena1") + med("arena2")
    n = med("native1") + med("native2")
    print(f"{w}: default / native {a / n:.3f} (summed medians, order native default default native)")
except (OSError, KeyError, TypeError, ValueError) as e:
    print(f"{w}: no ratio ({e!r})")
PY
done
