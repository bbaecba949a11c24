#!/usr/bin/env bash
# PyTorch's workloads (scripts/gpu/models.py), native first as each workload's reference, then
# each allocator given, checked against it (losses and outputs bitwise) with driver peaks and
# median step or request times. On the GPU machine, from the repository root, with
# .device/libcuda_arena.so (scripts/gpu/build-device.sh):
#   bash scripts/gpu/torch4.sh "gpt2-train resnet50-train encoder-serve decoder-generate" arena
# One line per run: "WORKLOAD ALLOC: ok driver peak N MiB ... median T ms/step check passed".
set -u
W=${1:?usage: torch4.sh "WORKLOADS" ALLOC...}
shift
for w in $W; do
  python3 scripts/gpu/models.py "$w" native --json "/tmp/$w.n.json" --check 2>&1 >/dev/null | tail -1
  for A in "$@"; do
    python3 scripts/gpu/models.py "$w" "$A" --check "/tmp/$w.n.json" --json "/tmp/$w.a.json" 2>&1 >/dev/null | tail -1
  done
done
