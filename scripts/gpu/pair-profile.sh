#!/usr/bin/env bash
# Where one replay_pair process spends its time, per library and per instruction: `perf record`
# (cpu-clock: the GPU machine is a KVM guest without hardware counters) over today's build and
# the new one in one process, their passes alternating, as pair-bars.sh times them.
# scripts/gpu/pair_profile_lines.py then maps the samples to source lines here.
#
# Here (no GPU): both libraries built with line tables, so the samples map to lines:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build -p cuda-arena-c --release
#   cp target/release/libcuda_arena.so .device/libcuda_arena.lines.so
#   (today's the same way in a worktree of b0e0844, to .device/libcuda_arena.base.lines.so)
#   mkdir -p .device/perf/lib && cp /usr/bin/perf .device/perf/ && ldd /usr/bin/perf | awk '{print $3}' \
#     | grep / | grep -v -E 'libc.so|libm.so|libstdc|libgcc_s|libz.so' | xargs -I{} cp -L {} .device/perf/lib/
#   (cd .device && tar cf - perf | xz -T2 > perf.tar.xz && rm -rf perf)
#   rm -rf .device/bench && cp -r ../shared/bench .device/bench
# There, carrying those four: OUT=$OUT bash scripts/gpu/pair-profile.sh
# Then here: python3 scripts/gpu/pair_profile_lines.py OUT/samples.txt.xz
# Env: TRACE (mixed), ROUNDS (40 timed passes each), NEW / BASE (the two libraries), BACKEND
# (cuda; virtual with CUDA_HOME=$(bash scripts/gpu/stub-cudart/stub.sh) runs it without a GPU).
# Out: OUT/pairs.jsonl (the process's ns/op), OUT/symbols.txt (the hottest symbols),
# OUT/samples.txt.xz (samples per symbol+offset, both libraries).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/pair-profile-out}
mkdir -p "$OUT"
B=${BUILD:-/tmp/pair-profile}
mkdir -p "$B/traces"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BENCH=.device/bench
NEW=${NEW:-$PWD/.device/libcuda_arena.lines.so}
BASE=${BASE:-$PWD/.device/libcuda_arena.base.lines.so}
TRACE=${TRACE:-mixed}
BACKEND=${BACKEND:-cuda}
ROUNDS=${ROUNDS:-40}
for f in "$NEW" "$BASE" .device/perf.tar.xz; do
  [ -e "$f" ] || { echo "FATAL: no $f (see the header)"; exit 1; }
done
[ -x "$B/perf/perf" ] || tar xJf .device/perf.tar.xz -C "$B" || { echo "FATAL: perf"; exit 1; }
PERF=$B/perf/perf
export LD_LIBRARY_PATH=$B/perf/lib
python3 "$BENCH/gen_traces.py" --out "$B/traces" >/dev/null || { echo "FATAL: gen_traces"; exit 1; }
case $TRACE in
  gpt2-train | resnet50-train | encoder-serve | decoder-generate)
    python3 scripts/gpu/snapshot_to_trc.py "benches/traces/torch/$TRACE.pickle.xz" "$B/traces/$TRACE.trc" >/dev/null ;;
esac
g++ -O2 -std=c++17 -I"$CUDA/include" -I"$BENCH" scripts/gpu/replay_pair.cpp -L"$CUDA/lib64" -lcudart -ldl \
  -Wl,-rpath,"$CUDA/lib64" -o "$B/replay_pair" || { echo "FATAL: replay_pair"; exit 1; }
g++ -std=c++17 -O2 -shared -fPIC -o "$B/plugin.so" "$BENCH/cuda_arena_plugin.cpp" -ldl ||
  { echo "FATAL: plugin"; exit 1; }
"$PERF" record -e cpu-clock -F 25000 -o "$B/rec.data" -- "$B/replay_pair" --trace "$B/traces/$TRACE.trc" \
  --plugin "$B/plugin.so" --arg-a "$BASE@$BACKEND@Cuda@" --label-a today --arg-b "$NEW@$BACKEND@Cuda@" \
  --label-b new --rounds "$ROUNDS" --json "$OUT/pairs.jsonl" >/dev/null 2>"$OUT/perf-record.log" ||
  { echo "FATAL: perf record (see perf-record.log)"; exit 1; }
"$PERF" report -i "$B/rec.data" --stdio --sort dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' |
  head -60 | cut -c1-160 >"$OUT/symbols.txt"
# Samples per mangled symbol and offset in the two libraries ("COUNT SYMBOL+0xOFF (DSO)").
"$PERF" script -i "$B/rec.data" -F ip,sym,symoff,dso --no-demangle 2>/dev/null | grep libcuda_arena |
  sed 's/^ *[0-9a-f]* //' | sort | uniq -c | sort -rn | xz >"$OUT/samples.txt.xz"
rm -f "$B/rec.data"
python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f\"{r['trace']}: today {r['median_a']} ns/op, new {r['median_b']} ns/op, new / today {r['b_over_a']}\")
" "$OUT/pairs.jsonl"
head -12 "$OUT/symbols.txt"
