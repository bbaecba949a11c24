#!/usr/bin/env bash
# Issue 13, deliverable 4: the GPU proof on real models, on the GPU machine (torch with CUDA,
# transformers, torchvision; no network, node or cargo). Needs .device/libcuda_arena.so from
# scripts/gpu/build-device.sh (run where cargo is; carry .device). From the repository root:
#
#   bash scripts/gpu/proof.sh all            phase 1, then the built-in candidate configs
#   bash scripts/gpu/proof.sh 1              phase 1 only
#   bash scripts/gpu/proof.sh 2 CONF [CONF]  native again, and arena:CONF (the first is
#                                            labelled arena-best, the next arena-2, ...)
#
# Phase 1, for each workload of scripts/gpu/models.py (gpt2-train, resnet50-train,
# encoder-serve, decoder-generate), one process per run, in this order (most needed first, so
# that a run cut by the time budget is one of the last): native (clean, timed), arena (the
# default config), expandable (native with expandable_segments:True), native-snapshot (native
# again, recording torch's allocation history: the snapshot cuda-arena replay reads, and a
# second native run, so the JSON says whether native itself is reproducible). Phase "all"
# adds the candidates below, each an arena:CONF run of every workload. Every run but the
# first native one is checked against it (models.py --check: identical losses or request
# checksums, memory back after empty_cache); native checks memory only.
#
# Output, in $OUT (default ./proof-out), at most 8 files as the device tool brings back:
#   proof.tar.xz                  runs/WORKLOAD.LABEL.json (models.py's JSON), logs/*.log,
#                                 env.txt (nvidia-smi, versions, the library's sha256);
#                                 proof.tar.gz where the machine has no xz
#   snapshot.WORKLOAD.pickle.xz   torch's snapshot of the native-snapshot run (xz; trimmed to
#                                 the fields cuda-arena replay reads if it would pass 15 MiB)
#   summary.txt                   the table printed at the end
#   proof.log                     everything printed
# Here: tar xf proof.tar.xz; node scripts/gpu/summarize.mjs runs/*.json (the README table);
# node scripts/gpu/pick-config.mjs snapshot.*.pickle.xz (replays; the best config for phase 2).
#
# Time: PROOF_BUDGET_S (default 440) seconds for the runs: a run starts only if the longest
# run of its workload so far (25 s before the first) still fits; what is skipped is listed.
# PROOF_WORKLOADS (default all four) and PROOF_CANDIDATES (space-separated NAME=CONF) override
# the lists; PROOF_SNAPSHOT=0 skips the native-snapshot runs (a table of native, expandable,
# the arena and the candidates from one run: PROOF_CANDIDATES="best=CONF"); PROOF_RUN_TIMEOUT_S (default 120) bounds each process; PROOF_MODELS_ARGS is added
# to every models.py command (e.g. "--dry-run --steps 1" to try this script without a GPU).
# PROOF_WHEEL_SITE=DIR (issue 28): phase 1 adds a "wheel" run of every workload, the arena
# installed by the cuda_arena package of the wheel installed in DIR (`pip install --target DIR
# dist/python/*.whl`; models.py --via-wheel: its JSON says whether cuda_arena.torch.memory_stats
# equals the C stats), decoder-generate's recording its traffic (cuda_arena.torch.start_recording)
# into $OUT/recording.decoder-generate.jsonl.xz, for `cuda-arena replay` here.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:-}
case "$phase" in
  all | 1) shift ;;
  2) shift; [ $# -ge 1 ] || { echo "usage: proof.sh 2 CONF [CONF...]" >&2; exit 2; } ;;
  *) echo "usage: proof.sh all | 1 | 2 CONF [CONF...]" >&2; exit 2 ;;
esac
OUT=${OUT:-$PWD/proof-out}
budget=${PROOF_BUDGET_S:-440}
run_timeout=${PROOF_RUN_TIMEOUT_S:-120}
snapshot_limit=${PROOF_SNAPSHOT_LIMIT:-$((15 << 20))}  # the device tool brings back 16 MiB a file
read -r -a workloads <<<"${PROOF_WORKLOADS:-gpt2-train resnet50-train encoder-serve decoder-generate}"
# The candidates of phase "all" (docs/pytorch.md, "Real models on an H100"): chunks split when
# 2 MiB would be left over rather than 128 MiB (less padding per block), the same with regions
# the size of the request, and the CUDA memory pool.
read -r -a candidates <<<"${PROOF_CANDIDATES:-dead2m=arena.max_dead_bytes_per_chunk=2097152 same-dead2m=arena.extend_strategy=1,arena.max_dead_bytes_per_chunk=2097152 pool=arena.use_cuda_mempool=1}"
lib=.device/libcuda_arena.so
work=$(mktemp -d)
mkdir -p "$OUT" "$work/runs" "$work/logs" "$work/snapshots"
exec > >(tee "$OUT/proof.log") 2>&1
export PYTHONUNBUFFERED=1
start=$SECONDS

[ -f "$lib" ] || { echo "no $lib: run scripts/gpu/build-device.sh where cargo is, carry .device"; exit 1; }
{
  echo "phase: $phase $*"
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm --format=csv || true
  python3 -c 'import importlib.metadata as m, sys; print("python", sys.version.split()[0], *(f"{p} {m.version(p)}" for p in ("torch", "transformers", "torchvision", "numpy")))'
  sha256sum "$lib"
  git rev-parse HEAD 2>/dev/null || echo "commit: unknown (no .git)"
} | tee "$work/env.txt"

declare -A longest warn_only
skipped=()
failed=0

# run LABEL WORKLOAD ALLOCATOR [models.py options...]
run() {
  local label=$1 w=$2 allocator=$3
  shift 3
  local guess=${longest[$w]:-25} now=$((SECONDS - start))
  if [ $((now + guess)) -gt "$budget" ]; then
    skipped+=("$w.$label")
    echo "skip  $w $label: ${now}s used, about ${guess}s needed, budget ${budget}s"
    return
  fi
  local json="$work/runs/$w.$label.json" log="$work/logs/$w.$label.log" t0=$SECONDS rc
  timeout "$run_timeout" python3 scripts/gpu/models.py "$w" "$allocator" --label "$label" \
    --json "$json" ${warn_only[$w]:-} ${PROOF_MODELS_ARGS:-} "$@" >"$log" 2>&1
  rc=$?
  local took=$((SECONDS - t0))
  [ "$took" -gt "${longest[$w]:-0}" ] && longest[$w]=$took
  if [ "$rc" -eq 3 ] && [ -z "${warn_only[$w]:-}" ]; then
    # An op without a deterministic implementation: every run of this workload goes on with
    # warn_only=True (the JSON lists what warned), this one again first.
    echo "note  $w $label: $(sed -n 's/.*"nondeterministic_op": "\([^"]*\).*/\1/p' "$json" | head -c 200)"
    echo "note  $w: rerunning with --warn-only, as every later run of it"
    warn_only[$w]=--warn-only
    mv "$json" "$work/runs/$w.$label.strict-failed.json"
    mv "$log" "$work/logs/$w.$label.strict-failed.log"
    run "$label" "$w" "$allocator" "$@"
    return
  fi
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  printf '%-5s %3ss  %s\n' "$([ "$rc" -eq 0 ] && echo ok || echo "rc=$rc")" "$took" \
    "$(tail -n 1 "$log")"
}

ref() { echo "$work/runs/$1.native.json"; }

if [ "$phase" = 2 ]; then
  for w in "${workloads[@]}"; do run native "$w" native --check; done
  i=0
  for conf in "$@"; do
    i=$((i + 1))
    label=$([ $i -eq 1 ] && echo arena-best || echo "arena-$i")
    for w in "${workloads[@]}"; do run "$label" "$w" "arena:$conf" --check "$(ref "$w")"; done
  done
else
  for w in "${workloads[@]}"; do run native "$w" native --check; done
  for w in "${workloads[@]}"; do run arena "$w" arena --check "$(ref "$w")"; done
  if [ -n "${PROOF_WHEEL_SITE:-}" ]; then
    mkdir -p "$work/recordings"
    for w in "${workloads[@]}"; do
      rec=()
      [ "$w" = decoder-generate ] && rec=(--record "$work/recordings/$w.jsonl")
      PYTHONPATH="$PROOF_WHEEL_SITE" run wheel "$w" arena --via-wheel "${rec[@]}" --check "$(ref "$w")"
    done
  fi
  for w in "${workloads[@]}"; do run expandable "$w" expandable --check "$(ref "$w")"; done
  if [ "${PROOF_SNAPSHOT:-1}" = 1 ]; then
    for w in "${workloads[@]}"; do
      run native-snapshot "$w" native --snapshot "$work/snapshots/$w.pickle" --check "$(ref "$w")"
    done
  fi
  if [ "$phase" = all ]; then
    for c in "${candidates[@]}"; do
      for w in "${workloads[@]}"; do
        run "arena-${c%%=*}" "$w" "arena:${c#*=}" --check "$(ref "$w")"
      done
    done
  fi
fi
echo "runs took $((SECONDS - start))s; ${#skipped[@]} skipped by the budget: ${skipped[*]:-none}"

# --- the snapshots: xz, trimmed to what the replay reads if still too big to come back -----
# xz -1: about 13 times smaller than the pickle, at 50 MB/s a thread; Python's lzma if no xz.
compress() {
  if command -v xz >/dev/null; then xz -T0 -1 -c "$1" >"$2"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), lzma.open(sys.argv[2], "wb", preset=1))' "$1" "$2"
  fi
}
for p in "$work"/snapshots/*.pickle; do
  [ -f "$p" ] || continue
  w=$(basename "$p" .pickle)
  compress "$p" "$OUT/snapshot.$w.pickle.xz"
  if [ "$(stat -c %s "$OUT/snapshot.$w.pickle.xz")" -gt "$snapshot_limit" ]; then
    echo "snapshot $w: over $snapshot_limit bytes compressed; keeping device_traces' action/addr/size/stream"
    python3 - "$p" <<'PY'
import pickle, sys
path = sys.argv[1]
with open(path, "rb") as f:
    s = pickle.load(f)
keep = ("action", "addr", "size", "stream")
s = {"device_traces": [[{k: e[k] for k in keep if k in e} for e in t] for t in s["device_traces"]],
     "segments": [], "trimmed": "fields cuda-arena replay does not read were dropped"}
with open(path, "wb") as f:
    pickle.dump(s, f, protocol=4)
PY
    compress "$p" "$OUT/snapshot.$w.pickle.xz"
  fi
  echo "snapshot $w: $(stat -c %s "$p") bytes, $(stat -c %s "$OUT/snapshot.$w.pickle.xz") compressed"
done

for r in "$work"/recordings/*.jsonl; do
  [ -f "$r" ] || continue
  compress "$r" "$OUT/recording.$(basename "$r").xz"
  echo "recording $(basename "$r"): $(stat -c %s "$r") bytes, $(stat -c %s "$OUT/recording.$(basename "$r").xz") compressed"
done

# --- the summary (summarize.mjs makes the README's table from the same JSON) --------------
python3 - "$work/runs" <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, sys
MIB = 1 << 20
runs = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    if p.endswith(".strict-failed.json"):
        continue
    with open(p) as f:
        r = json.load(f)
    runs.setdefault(r["workload"], {})[r["label"]] = r
print(f"{'workload':<17} {'run':<18} {'ok':<3} {'same as native':<15} {'driver peak':>12} "
      f"{'alloc held':>11} {'median':>10} {'x native':>8}")
known = ["gpt2-train", "resnet50-train", "encoder-serve", "decoder-generate"]
for w, by in sorted(runs.items(), key=lambda kv: (known.index(kv[0]) if kv[0] in known else 9, kv[0])):
    native = by.get("native")
    nt = native and native.get("time", {}).get("median_s")
    order = lambda l: ({"native": 0, "expandable": 1, "arena": 2}.get(l, 9 if l == "native-snapshot" else 3), l)
    for label, r in sorted(by.items(), key=lambda kv: order(kv[0])):
        m, t, c = r.get("memory", {}), r.get("time", {}), r.get("check", {})
        same = "-" if label == "native" else (
            "n/a" if "outputs" not in c else
            "bitwise" if c["outputs"]["identical"] else f"NO ({c['outputs']['mismatches']})")
        drv = f"{m['driver_peak_bytes'] / MIB:.0f} MiB" if "driver_peak_bytes" in m else "-"
        held = f"{m['allocator']['peak_held_bytes'] / MIB:.0f} MiB" if "allocator" in m else "-"
        med = f"{t['median_s'] * 1000:.2f} ms" if t.get("count") else "-"
        ratio = f"{t['median_s'] / nt:.3f}" if t.get("count") and nt else "-"
        ok = "yes" if r.get("ok") and c.get("passed", True) else "NO"
        print(f"{w:<17} {label:<18} {ok:<3} {same:<15} {drv:>12} {held:>11} {med:>10} {ratio:>8}")
        if r.get("error"):
            print("    error:", r["error"].strip().split("\n")[-1][:200])
        for f in c.get("failures", []):
            print("    check:", f[:200])
        if "wheel" in r:
            wh = r["wheel"]
            print(f"    wheel {wh['package']}: memory_stats equal to the C stats: {wh['stats_equal']}"
                  + (f"; recording MaxInUse {wh['recording']['max_in_use']}" if "recording" in wh else ""))
PY

if command -v xz >/dev/null; then tar -C "$work" -cJf "$OUT/proof.tar.xz" runs logs env.txt
else tar -C "$work" -czf "$OUT/proof.tar.gz" runs logs env.txt
fi
rm -rf "$work"
echo "proof $phase: $((SECONDS - start))s in all, $failed run(s) failed or failed a check"
ls -l "$OUT"
[ "$failed" -eq 0 ]
