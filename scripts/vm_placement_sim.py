#!/usr/bin/env python3
"""How many pages must a virtual-memory arena move to hold within a headroom of the peak?

A model of the virtual-memory mode (docs/virtual-memory.md), for trying placement and
eviction rules the arena does not have. The address space is a line of pages; a request takes
whole pages at an address where they are free. Its unmapped pages are mapped; when mapped
pages would pass (1 + headroom) x the peak of pages in use so far, wholly free mapped pages
elsewhere are unmapped first. Those are the pages that move. The first pass sets the peak
(as the GPU bars measure); the warm passes show what it costs to stay within it. Each page is
a mapping of its own, so any wholly free page can be unmapped (the arena's mappings of up to
64 MiB unmap only whole, which can only move more); sizes round up to pages, so the model fits
traces of large requests (growing), not those of small ones.

    python3 scripts/vm_placement_sim.py TRACE.trc [--headroom 0.05,0.10] [--passes 3]

TRACE is a GPUTRC01 file of ../shared/bench (gen_traces.py). Prints, for each placement and
eviction rule: held / peak in use in the first pass, the pages moved in each warm pass, and
the least driver time those moves cost per op at --move-us per page (default 5.7, the cheapest
measured on an H100: one allocation for a run of 16 pages, create 0.89, map 0.09, set access
2.24 and unmap 2.50 us a page; run A in docs/benchmarks.md, scripts/gpu/vmm_cost.cpp). Needs numpy.
"""
import argparse
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("vm_placement_sim.py needs numpy (python3 -m pip install numpy)")

PAGE = 2 << 20


def read_trc(path):
    """The ops of a GPUTRC01 trace: (is_alloc, id, pages)."""
    b = open(path, "rb").read()
    if len(b) < 64 or b[:8] != b"GPUTRC01":
        sys.exit(f"{path}: not a GPUTRC01 trace")
    n = struct.unpack_from("<Q", b, 16)[0]
    rec = np.dtype([("id", "<u4"), ("kind", "u1"), ("stream", "u1"), ("pad", "<u2"), ("size", "<u8")])
    if len(b) < 64 + n * rec.itemsize:
        sys.exit(f"{path}: short trace")
    a = np.frombuffer(b, dtype=rec, count=n, offset=64)
    pages = (a["size"].astype(np.int64) + PAGE - 1) // PAGE
    return [(k == 0, int(i), int(p)) for k, i, p in zip(a["kind"], a["id"], pages)]


def window_best(mapped, g, n):
    """(most mapped pages a request of n pages covers in free span g, its lowest offset)."""
    c = np.concatenate(([0], np.cumsum(mapped[g[0]:g[1]], dtype=np.int64)))
    w = c[n:] - c[:-n]
    j = int(np.argmax(w))
    return int(w[j]), j


# Placements: (free spans, mapped, pages) -> first page.
def best_fit(free, mapped, n):
    """The smallest free span that fits, at its bottom (BFC, blind to pages)."""
    return min((g for g in free if g[1] - g[0] >= n), key=lambda g: (g[1] - g[0], g[0]))[0]


def fewest_new(free, mapped, n):
    """The arena's rule: the bottom or top of a span, whichever needs fewest new pages."""
    best = None
    for g in free:
        if g[1] - g[0] < n:
            continue
        for s in (g[0], g[1] - n):
            key = (n - int(mapped[s:s + n].sum()), g[1] - g[0], s)
            if best is None or key < best:
                best = key
    return best[2]


def fewest_new_anywhere(free, mapped, n):
    """Any offset in any span, whichever needs fewest new pages."""
    best = None
    for g in free:
        if g[1] - g[0] < n:
            continue
        m, j = window_best(mapped, g, n)
        key = (n - m, g[1] - g[0], g[0] + j)
        if best is None or key < best:
            best = key
    return best[2]


def sparse(free, mapped, n):
    """As fewest_new_anywhere, but a request that covers no mapped page goes a gap of its
    own size above the span's bottom, so the one that replaces it can grow in place."""
    best = None
    for g in free:
        span = g[1] - g[0]
        if span < n:
            continue
        m, j = window_best(mapped, g, n)
        if m == 0 and g[0] > 0:
            j = min(n, (span - n) // 2)
        key = (n - m, span, g[0] + j)
        if best is None or key < best:
            best = key
    return best[2]


# Evictions: the order in which free spans give up their mapped pages, and from which end.
def highest(free, mapped):
    """The arena's rule: highest addresses first."""
    return sorted(free, key=lambda g: -g[0]), True


def lowest(free, mapped):
    return sorted(free, key=lambda g: g[0]), False


def smallest_holes(free, mapped):
    """Spans with the fewest mapped pages first (those serve the fewest requests)."""
    return sorted(free, key=lambda g: (int(mapped[g[0]:g[1]].sum()), -g[0])), True


PLACEMENTS = {"best-fit": best_fit, "fewest-new": fewest_new,
              "fewest-new-anywhere": fewest_new_anywhere, "sparse": sparse}
EVICTIONS = {"highest": highest, "lowest": lowest, "smallest-holes": smallest_holes}


def simulate(ops, place, evict, headroom, passes, pages=1 << 16):
    """[(held / peak in use in the pass, pages moved in the pass)] per pass."""
    mapped = np.zeros(pages, dtype=np.int8)
    free = [[0, pages]]  # free spans [lo, hi), ascending, coalesced
    live, in_use, peak, n_mapped = {}, 0, 0, 0
    out = []
    for _ in range(passes):
        moved, held, pass_peak = 0, 0, 0
        for is_alloc, i, n in ops:
            if not is_alloc:
                s, n = live.pop(i)
                in_use -= n
                k = next(k for k, g in enumerate(free) if g[0] > s) if free and free[-1][0] > s else len(free)
                free.insert(k, [s, s + n])
                if k + 1 < len(free) and free[k][1] == free[k + 1][0]:
                    free[k][1] = free.pop(k + 1)[1]
                if k > 0 and free[k - 1][1] == free[k][0]:
                    free[k - 1][1] = free.pop(k)[1]
                continue
            s = place(free, mapped, n)
            k = next(k for k, g in enumerate(free) if g[0] <= s and s + n <= g[1])
            g = free[k]
            free[k:k + 1] = [p for p in ([g[0], s], [s + n, g[1]]) if p[1] > p[0]]
            need = n - int(mapped[s:s + n].sum())
            in_use += n
            peak, pass_peak = max(peak, in_use), max(pass_peak, in_use)
            over = n_mapped + need - int(peak * (1 + headroom))
            if over > 0:
                order, from_top = evict(free, mapped)
                for g in order:
                    if over <= 0:
                        break
                    m = np.nonzero(mapped[g[0]:g[1]])[0] + g[0]
                    take = (m[::-1] if from_top else m)[:over]
                    mapped[take] = 0
                    n_mapped -= len(take)
                    moved += len(take)
                    over -= len(take)
            mapped[s:s + n] = 1
            n_mapped += need
            held = max(held, n_mapped)
            live[i] = (s, n)
        out.append((held / max(pass_peak, 1), moved))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--headroom", default="0.05,0.10")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--move-us", type=float, default=5.7)
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--evictions", default=",".join(EVICTIONS))
    a = ap.parse_args()
    ops = read_trc(a.trace)
    allocs = sum(1 for o in ops if o[0])
    print(f"{a.trace}: {len(ops)} ops, {allocs} allocations, {sum(o[2] for o in ops if o[0])} pages a pass")
    # How rarely pages in use come near their peak. Were pages interchangeable (no address
    # contiguity), no headroom of at least 0 would ever force a move: the moves are the cost
    # of finding contiguous pages.
    sizes, level, levels = {}, 0, []
    for is_alloc, i, n in ops:
        level += n if is_alloc else -sizes.pop(i)
        if is_alloc:
            sizes[i] = n
        levels.append(level)
    top = max(levels) or 1
    print("pages in use above 80 % / 90 % of their peak ({}) after {:.2f} % / {:.2f} % of the ops".format(
        top, 100 * sum(v > 0.8 * top for v in levels) / len(levels),
        100 * sum(v > 0.9 * top for v in levels) / len(levels)))
    print("| headroom | placement | eviction | held/peak (pass 0) | pages moved per warm pass | driver ns/op, at least |")
    print("|---:|---|---|---:|---|---:|")
    for h in (float(x) for x in a.headroom.split(",")):
        for pn in a.placements.split(","):
            for en in a.evictions.split(","):
                r = simulate(ops, PLACEMENTS[pn], EVICTIONS[en], h, a.passes)
                warm = [m for _, m in r[1:]] or [0]
                ns = min(warm) * a.move_us * 1000 / len(ops)
                print(f"| {h:.2f} | {pn} | {en} | {r[0][0]:.4f} | {' / '.join(map(str, warm))} | {ns:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
