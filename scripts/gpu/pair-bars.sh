#!/usr/bin/env bash
# The speed half of issue 14's bar measured in pairs: today's arena and the new mode in one
# process per replay (scripts/gpu/replay_pair.cpp), their passes alternating, so that what
# moves one process's time moves both alike. memory-bars.sh measures held/req (and times each
# allocator in processes of its own); this only compares the two times.
#
# Here (no GPU): bash scripts/gpu/build-device.sh; cp OLD/libcuda_arena.so
#   .device/libcuda_arena.base.so; rm -rf .device/bench && cp -r ../shared/bench .device/bench
# There, from the repository root, carrying .device:
#   bash scripts/gpu/pair-bars.sh
# Env: OUT (default ./pair-out), VM_CONF (default arena.use_virtual_memory=1), TRACES (default
# all eight), PROCESSES (9 per trace; the two allocators swap places A/B every other one),
# ROUNDS (4 timed passes each per process), BACKEND (cuda; virtual runs it all on a machine
# without a GPU: CUDA_HOME=$(bash scripts/gpu/stub-cudart/stub.sh) BACKEND=virtual, against
# the stand-in libcudart there; the ratios of the C ABI path, not the GPU's times).
# Out: OUT/pairs.jsonl (a line per process) and OUT/pairs.md, a row per trace: the median
# over processes of (new mode ÷ today's) and its range; last line "pair-bars: PASS" when
# every trace's median ratio is at most 1, else FAIL.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/pair-out}
mkdir -p "$OUT"
B=${BUILD:-/tmp/pair-build}
mkdir -p "$B/traces"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BENCH=.device/bench
LIB=$PWD/.device/libcuda_arena.so
BASE=$PWD/.device/libcuda_arena.base.so
VM_CONF=${VM_CONF:-arena.use_virtual_memory=1}
TRACES=${TRACES:-"inference mixed small growing gpt2-train resnet50-train encoder-serve decoder-generate"}
PROCESSES=${PROCESSES:-9}
ROUNDS=${ROUNDS:-4}
RES=$OUT/pairs.jsonl
: >"$RES"
[ -e "$BASE" ] || { echo "no $BASE (today's build)"; exit 1; }

python3 "$BENCH/gen_traces.py" --out "$B/traces" >/dev/null || { echo "FATAL: gen_traces"; exit 1; }
for w in gpt2-train resnet50-train encoder-serve decoder-generate; do
  python3 scripts/gpu/snapshot_to_trc.py "benches/traces/torch/$w.pickle.xz" "$B/traces/$w.trc" >/dev/null
done
g++ -O2 -std=c++17 -I"$CUDA/include" -I"$BENCH" scripts/gpu/replay_pair.cpp -L"$CUDA/lib64" -lcudart -ldl \
  -Wl,-rpath,"$CUDA/lib64" -o "$B/replay_pair" || { echo "FATAL: replay_pair did not build"; exit 1; }
g++ -std=c++17 -O2 -shared -fPIC -o "$B/cuda_arena_plugin.so" "$BENCH/cuda_arena_plugin.cpp" -ldl ||
  { echo "FATAL: cuda_arena_plugin did not build"; exit 1; }

BACKEND=${BACKEND:-cuda}
today="$BASE@$BACKEND@Cuda@"
new="$LIB@$BACKEND@Cuda@$VM_CONF"
for t in $TRACES; do
  for p in $(seq 1 "$PROCESSES"); do
    if [ $((p % 2)) = 1 ]; then
      a=("$today" today) b=("$new" new)
    else
      a=("$new" new) b=("$today" today)
    fi
    timeout 300 "$B/replay_pair" --trace "$B/traces/$t.trc" --plugin "$B/cuda_arena_plugin.so" \
      --arg-a "${a[0]}" --label-a "${a[1]}" --arg-b "${b[0]}" --label-b "${b[1]}" \
      --rounds "$ROUNDS" --json "$RES" >/dev/null || echo "FAILED rc=$? ($t, process $p)"
  done
done

python3 - "$RES" "$PROCESSES" $TRACES >"$OUT/pairs.md" <<'PY'
import json, statistics as st, sys
rows = {t: [] for t in sys.argv[3:]}
for line in open(sys.argv[1]):
    r = json.loads(line)
    m = {r["label_a"]: r["median_a"], r["label_b"]: r["median_b"]}
    rows.setdefault(r["trace"], []).append((m["new"] / m["today"], m["today"], m["new"],
                                            r["failures_a"] + r["failures_b"]))
print("| trace | new ÷ today, median of processes (range) | today's ns/op | new ns/op | processes |")
print("|---|---:|---:|---:|---:|")
ok = True
lines = []
for t, v in rows.items():
    if not v:
        # A trace whose every process failed is a failure, not a row left out.
        ok = False
        lines.append(f"FAIL {t}: no process finished")
        continue
    ratio = st.median(x[0] for x in v)
    good = ratio <= 1 and not any(x[3] for x in v)
    ok &= good and len(v) == int(sys.argv[2])
    print(f"| {t} | {ratio:.3f} ({min(x[0] for x in v):.3f}–{max(x[0] for x in v):.3f}) | "
          f"{st.median(x[1] for x in v):.0f} | {st.median(x[2] for x in v):.0f} | {len(v)} |")
    lines.append(f"{'ok  ' if good else 'FAIL'} {t}: new ÷ today {ratio:.3f} over {len(v)} processes"
                 + (" (failed allocations)" if any(x[3] for x in v) else ""))
print()
print("\n".join(lines))
print(f"pair-bars: {'PASS' if ok and rows else 'FAIL'}")
PY
cat "$OUT/pairs.md"
