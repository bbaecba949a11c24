#!/usr/bin/env python3
"""Issue 14's bars from one scripts/gpu/memory-bars.sh run (replay.cpp JSON lines).

usage: python3 memory_bars.py results.jsonl > bars.md

Per trace, for the virtual-memory mode (label "cuda-arena[...]"):
  1. held/req (the driver-measured peak of the first pass ÷ peak live requested) <= the best of
     PyTorch native, PyTorch expandable_segments and cudaMallocAsync (release threshold max);
  2. ns/op (median of the timed passes) <= today's cuda-arena's ("cuda-arena-today").
Where a label ran in several processes, its ns/op is the median process's and its held/req the
largest (memory is deterministic enough that the worst is the honest figure).
Prints a table, one line per bar, and a last line "memory-bars: PASS" or "memory-bars: FAIL".
"""
import json
import statistics
import sys

OTHERS = ("torch-default", "torch-expandable", "cudaMallocAsync-max")
TODAY = "cuda-arena-today"


def held_over_req(r):
    held = r.get("peak_driver_delta") or r.get("allocator_held_peak_first_pass")
    req = r.get("peak_live_requested")
    return held / req if held and req else None


def main(path):
    runs = {}
    order = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            key = (r["trace"], r["label"])
            if r["trace"] not in order:
                order.append(r["trace"])
            runs.setdefault(key, []).append(r)
    vm_labels = sorted({k[1] for k in runs if k[1].startswith("cuda-arena[")})
    ok = True
    lines = []
    print("| trace | best other (held/req) | new mode held/req | today's ns/op | new mode ns/op | processes |")
    print("|---|---|---:|---:|---:|---|")
    for t in order:
        best = None
        for o in OTHERS:
            for r in runs.get((t, o), []):
                h = held_over_req(r)
                if h and (best is None or h < best[1]):
                    best = (o, h)
        today = [r["ns_per_op_median"] for r in runs.get((t, TODAY), []) if not r.get("truncated")]
        for v in vm_labels:
            rs = runs.get((t, v), [])
            if not rs:
                continue
            helds = [h for h in (held_over_req(r) for r in rs) if h]
            held = max(helds) if helds else None
            ns = [r["ns_per_op_median"] for r in rs]
            vm_ns = statistics.median(ns) if ns else None
            today_ns = statistics.median(today) if today else None
            procs = "/".join(f"{x:.0f}" for x in ns) + " vs " + "/".join(f"{x:.0f}" for x in today)
            print(f"| {t} | {best[0] if best else '-'} {best[1]:.3f} | {held:.3f} | "
                  f"{today_ns:.0f} | {vm_ns:.0f} | {procs} |" if best and held and today_ns and vm_ns
                  else f"| {t} | - | - | - | - | incomplete |")
            if best and held:
                good = held <= best[1]
                ok &= good
                lines.append(f"{'ok  ' if good else 'FAIL'} {t} {v}: held/req {held:.3f}, best other "
                             f"{best[1]:.3f} ({best[0]})")
            else:
                ok = False
                lines.append(f"FAIL {t} {v}: held/req not measured against the others")
            if today_ns and vm_ns:
                good = vm_ns <= today_ns
                ok &= good
                lines.append(f"{'ok  ' if good else 'FAIL'} {t} {v}: {vm_ns:.0f} ns/op, today's arena "
                             f"{today_ns:.0f} ({vm_ns / today_ns:.3f}x)")
            else:
                ok = False
                lines.append(f"FAIL {t} {v}: ns/op not measured against today's arena")
    print()
    for line in lines:
        print(line)
    print()
    print("memory-bars: PASS" if ok else "memory-bars: FAIL")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(1)
    main(sys.argv[1])
