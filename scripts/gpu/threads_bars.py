#!/usr/bin/env python3
"""The thread bars (issue 15's, with issue 25's scaling) from one scripts/gpu/threads.sh run
(replay_mt JSON lines).

usage: python3 threads_bars.py mt.jsonl [one_pairs.jsonl] > bars.md

Per trace (small, mixed ÷ 16), for the library built from this tree ("new"); a run repeated in
several processes counts as its median process:
  1. aggregate throughput at the most threads measured (16) >= 8x one thread's (issue 25;
     issue 15 asked 4x);
  2. one thread's ns/op <= 1.05x today's library's in the same run: with one_pairs.jsonl
     (replay_pair lines, both libraries in one process), the median over processes of each
     process's new ÷ today; without it, the median processes' ns/op;
  3. held/req at 16 threads <= 1.2x held/req at one thread, where held is the driver-measured
     peak of the first pass and req = N x the trace's peak live requested bytes per thread.
Prints a table of every allocator's scaling and held/req, then one line per bar and a last
line "threads: PASS" or "threads: FAIL".
"""
import json
import sys

# Aggregate at 16 threads over one thread's (issue 25's bar).
SCALING = 8


def json_lines(path):
    """The JSON objects of a JSON-lines file (other lines, such as logs, passed over)."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                yield json.loads(line)


def load(path):
    """One row per (trace, allocator, threads): where a run was repeated in several processes
    (labels "r1 new", "r2 new", ...), the run of the median throughput, with every repeat's
    ns/op kept in "repeats_ns" (one process can be 20% off another on the same machine)."""
    runs = {}
    for r in json_lines(path):
        label = r.get("label", "")
        if label == "smoke":
            continue
        name = label.split(" ", 1)[1] if label.startswith("r") and " " in label else label
        runs.setdefault((r["trace"], name, r["threads"]), []).append(r)
    rows = {}
    for k, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["agg_mops_median"])
        row = dict(rs[(len(rs) - 1) // 2])
        row["repeats_ns"] = [r["ns_per_op_per_thread"] for r in runs[k]]
        rows[k] = row
    return rows


def load_pairs(path):
    """Per trace, each replay_pair process's (new ÷ today) of its median passes."""
    out = {}
    if not path:
        return out
    for r in json_lines(path):
        med = {r["label_a"]: r["median_a"], r["label_b"]: r["median_b"]}
        if "new" in med and "today" in med and med["today"] > 0:
            out.setdefault(r["trace"], []).append(med["new"] / med["today"])
    return out


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def held_over_req(r):
    # The driver's count where there is one (0 on a machine without a GPU: the allocator's).
    held = r.get("peak_driver_delta_first_pass") or r.get("allocator_held_peak_all_passes")
    req = r["threads"] * r["peak_live_requested_per_thread"]
    return held / req if held and req else None


def main(path, pairs_path=None):
    rows = load(path)
    pairs = load_pairs(pairs_path)
    traces = [t for t in ("small", "mixed") if any(k[0] == t for k in rows)]
    names = []
    for k in rows:
        if k[1] not in names:
            names.append(k[1])
    ns = sorted({k[2] for k in rows})
    top = ns[-1] if ns else 16
    ok = True
    lines = []
    for t in traces:
        print(f"### {t}: aggregate Mops/s (speedup vs 1 thread) and held/req\n")
        print("| allocator | " + " | ".join(f"N={n}" for n in ns) + " | 1-thread ns/op | held/req N=1 | "
              f"held/req N={top} |")
        print("|---|" + "---:|" * (len(ns) + 3))
        for name in names:
            one = rows.get((t, name, 1))
            cells = []
            for n in ns:
                r = rows.get((t, name, n))
                if r is None:
                    cells.append("-")
                else:
                    sp = f" ({r['agg_mops_median'] / one['agg_mops_median']:.2f}x)" if one else ""
                    cells.append(f"{r['agg_mops_median']:.3f}{sp}")
            h1 = held_over_req(one) if one else None
            hn = held_over_req(rows[(t, name, top)]) if (t, name, top) in rows else None
            ns1 = f"{one['ns_per_op_per_thread']:.1f}" if one else "-"
            fmt = lambda v: f"{v:.3f}" if v else "-"
            print(f"| {name} | " + " | ".join(cells) + f" | {ns1} | {fmt(h1)} | {fmt(hn)} |")
        print()
        new1, newn = rows.get((t, "new", 1)), rows.get((t, "new", top))
        today1 = rows.get((t, "today", 1))
        if new1 and newn:
            s = newn["agg_mops_median"] / new1["agg_mops_median"]
            good = s >= SCALING
            ok &= good
            lines.append(f"{'ok  ' if good else 'FAIL'} {t}: aggregate at {top} threads is {s:.2f}x one thread's (bar {SCALING:g}x)")
        else:
            ok = False
            lines.append(f"FAIL {t}: no run of the new library at 1 and {top} threads")
        if pairs.get(t):
            q = median(pairs[t])
            good = q <= 1.05
            ok &= good
            sep = ""
            if new1 and today1:
                sep = (f"; in separate processes {new1['ns_per_op_per_thread']:.1f} against "
                       f"{today1['ns_per_op_per_thread']:.1f} ns/op")
            lines.append(f"{'ok  ' if good else 'FAIL'} {t}: one thread {q:.3f}x today's in one process "
                         f"(median of {len(pairs[t])}: " + "/".join(f"{x:.3f}" for x in pairs[t])
                         + f"; bar 1.05x){sep}")
        elif new1 and today1:
            q = new1["ns_per_op_per_thread"] / today1["ns_per_op_per_thread"]
            good = q <= 1.05
            ok &= good
            reps = ""
            if len(new1["repeats_ns"]) > 1 or len(today1["repeats_ns"]) > 1:
                show = lambda v: "/".join(f"{x:.0f}" for x in v)
                reps = (f"; medians of {len(new1['repeats_ns'])} and {len(today1['repeats_ns'])} processes: "
                        f"{show(new1['repeats_ns'])} vs {show(today1['repeats_ns'])}")
            lines.append(f"{'ok  ' if good else 'FAIL'} {t}: one thread {new1['ns_per_op_per_thread']:.1f} ns/op, "
                         f"today's {today1['ns_per_op_per_thread']:.1f} ({q:.3f}x, bar 1.05x){reps}")
        else:
            ok = False
            lines.append(f"FAIL {t}: no single-thread run of both libraries")
        h1 = held_over_req(new1) if new1 else None
        hn = held_over_req(newn) if newn else None
        if h1 and hn:
            q = hn / h1
            good = q <= 1.2
            ok &= good
            lines.append(f"{'ok  ' if good else 'FAIL'} {t}: held/req {hn:.3f} at {top} threads, {h1:.3f} at one "
                         f"({q:.3f}x, bar 1.2x)")
        else:
            ok = False
            lines.append(f"FAIL {t}: held/req not measured")
    print("### bars\n")
    for line in lines:
        print(line)
    print()
    print("threads: PASS" if ok else "threads: FAIL")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        sys.exit(1)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None)
