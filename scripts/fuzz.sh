#!/usr/bin/env bash
# Full fuzzing of the cargo-fuzz targets in fuzz/ (docs/fuzzing.md says what they check).
# Runs each target for SECONDS on one core, starting from the committed corpus, then merges
# what the run found into fuzz/corpus/<target>/ keeping only inputs that add coverage
# (libFuzzer's -merge=1; the hand-written seed-* files and the finding-* reproducers of
# past findings always stay).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 600 seconds each, every target
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). A crash stops
# that target's run; its input is in fuzz/artifacts/<target>/, and
# `cargo +nightly fuzz tmin -O -a <target> <input>` (in fuzz/) minimizes it.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config_parser arena_ops trace_parser)
fi
# -O -a: optimized, with debug assertions and overflow checks (an overflow is a finding).
# AddressSanitizer only where unsafe code runs (arena_ops writes host memory): the parsers
# have none, and run several times faster without it.
declare -A sanitizer=([config_parser]=none [arena_ops]=address [trace_parser]=none)
# Inputs longer than this add time, not coverage: arena_ops decodes at most 1,024 ops;
# a trace line is too long past 4,096 bytes.
declare -A max_len=([config_parser]=4096 [arena_ops]=2048 [trace_parser]=8192)

status=0
for t in "${targets[@]}"; do
  flags=(-O -a -s "${sanitizer[$t]:-address}")
  work=work/$t
  mkdir -p "$work"
  dict=()
  if [ -f "dict/$t.dict" ]; then dict=("-dict=dict/$t.dict"); fi
  echo "== $t: ${seconds}s"
  # One process, one thread (libFuzzer's default; -jobs would move the log to fuzz-N.log).
  # New inputs go to work/ (ignored by git); the committed corpus is read as seeds.
  if ! nice cargo +nightly fuzz run "${flags[@]}" "$t" "$work" "corpus/$t" -- \
    -max_total_time="$seconds" -max_len="${max_len[$t]:-4096}" \
    -print_final_stats=1 "${dict[@]}" 2>&1 | tee "work/$t.log"; then
    echo "== $t: the fuzzer stopped on a finding; see fuzz/artifacts/$t/ and work/$t.log"
    status=1
  fi
  # The number of inputs run is libFuzzer's stat::number_of_executed_units.
  grep -E '^stat::number_of_executed_units' "work/$t.log" || true

  # Merge into a fresh copy of the seeds and findings: an input stays only if it adds an edge of
  # coverage (-use_counters=0: hit counts would keep thousands of inputs). The full corpus
  # stays in work/ for the next run.
  merged=$(mktemp -d)
  find corpus/"$t" -maxdepth 1 -type f \( -name 'seed-*' -o -name 'finding-*' \) \
    -exec cp {} "$merged"/ \;
  old=$(mktemp -d)
  find corpus/"$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'finding-*' -exec cp {} "$old"/ \;
  cargo +nightly fuzz run "${flags[@]}" "$t" "$merged" "$old" "$work" -- -merge=1 -use_counters=0 \
    -max_len="${max_len[$t]:-4096}" >"work/$t.merge.log" 2>&1
  find corpus/"$t" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'finding-*' -delete
  find "$merged" -maxdepth 1 -type f ! -name 'seed-*' ! -name 'finding-*' -exec cp {} corpus/"$t"/ \;
  rm -rf "$merged" "$old"
  echo "== $t: corpus now $(find corpus/"$t" -type f | wc -l) files, $(cat corpus/"$t"/* | wc -c) bytes"
done
exit "$status"
