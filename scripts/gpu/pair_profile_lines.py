#!/usr/bin/env python3
"""Maps pair-profile.sh's samples to source, here (where the libraries' line tables are).

    python3 scripts/gpu/pair_profile_lines.py OUT/samples.txt.xz [--new LIB] [--base LIB]
        [--lines N] [--only SUBSTRING]

Prints, for today's library and the new one: samples per source file (the innermost frame
outside the standard library, so inlined code counts where it was written), the two side by
side with their difference; the samples that land just after a locked instruction (an atomic
read-modify-write, where a cpu-clock sample of its cost falls); and the N hottest lines of
each. `--only` keeps the samples of symbols whose mangled name contains SUBSTRING (e.g.
`4free`, `allocate`). Needs binutils (nm, objdump, addr2line).
"""
import argparse
import bisect
import collections
import lzma
import re
import subprocess

SAMPLE = re.compile(r"\s*(\d+) (\S+)\+0x([0-9a-f]+) \((\S+)\)")
INSN = re.compile(r"\s*([0-9a-f]+):\s+(.*)")


def symbols(lib):
    out = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            table[parts[2]] = int(parts[0], 16)
    return table


def instructions(lib):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib],
                         capture_output=True, text=True, check=True).stdout
    addrs, texts = [], []
    for line in out.splitlines():
        m = INSN.match(line)
        if m:
            addrs.append(int(m[1], 16))
            texts.append(m[2])
    return addrs, texts


def frames(lib, addrs):
    """Inlined frames (innermost first) of each address."""
    out = subprocess.run(["addr2line", "-a", "-i", "-e", lib] + [hex(a) for a in addrs],
                         capture_output=True, text=True, check=True).stdout
    groups = []
    for line in out.splitlines():
        if line.startswith("0x"):
            groups.append([])
        elif groups:
            groups[-1].append(re.sub(r"^.*?/(crates|bindings|library)/", r"\1/", line))
    return groups


def innermost_own(fs):
    return next((f for f in fs if not f.startswith("library/")), fs[0] if fs else "?")


def profile(lib, samples, only):
    table = symbols(lib)
    items = [(table[s] + off, n) for s, off, n in samples
             if s in table and (only is None or only in s)]
    addrs, texts = instructions(lib)
    by_file, by_line, locked = collections.Counter(), collections.Counter(), collections.Counter()
    for (a, n), fs in zip(items, frames(lib, [a for a, _ in items])):
        line = innermost_own(fs)
        by_line[line] += n
        # By file name, so a file that moved between the two builds still pairs up.
        by_file[line.split(":")[0].rsplit("/", 1)[-1]] += n
        i = bisect.bisect_left(addrs, a)
        if 0 < i < len(addrs) and addrs[i] == a:
            prev = texts[i - 1]
            if prev.startswith("lock") or (prev.startswith("xchg") and "%ax,%ax" not in prev):
                locked[(line, prev.split()[0] + " " + prev.split()[1])] += n
    return sum(n for _, n in items), by_file, by_line, locked


def main():
    p = argparse.ArgumentParser()
    p.add_argument("samples")
    p.add_argument("--new", default=".device/libcuda_arena.lines.so")
    p.add_argument("--base", default=".device/libcuda_arena.base.lines.so")
    p.add_argument("--lines", type=int, default=25)
    p.add_argument("--only")
    a = p.parse_args()
    rows = {"today": [], "new": []}
    for line in lzma.open(a.samples, "rt"):
        m = SAMPLE.match(line)
        if m:
            side = "today" if "base" in m[4] else "new"
            rows[side].append((m[2], int(m[3], 16), int(m[1])))
    got = {"today": profile(a.base, rows["today"], a.only), "new": profile(a.new, rows["new"], a.only)}
    (tt, tf, _, tl), (nt, nf, _, nl) = got["today"], got["new"]
    print(f"samples: today {tt}, new {nt} (new / today {nt / max(tt, 1):.3f})")
    print(f"{'today':>7} {'new':>7} {'diff':>7}  file (of the innermost frame outside std)")
    for f in sorted(set(tf) | set(nf), key=lambda f: -(nf[f] - tf[f])):
        print(f"{tf[f]:7d} {nf[f]:7d} {nf[f] - tf[f]:+7d}  {f}")
    for side, (total, _, by_line, locked) in got.items():
        print(f"\n== {side}: after locked instructions {sum(locked.values())} of {total}")
        for (line, insn), n in locked.most_common():
            print(f"{n:7d}  {insn:<24} {line}")
        print(f"-- {side}: hottest lines")
        for line, n in by_line.most_common(a.lines):
            print(f"{n:7d} {100 * n / max(total, 1):5.1f}%  {line}")


if __name__ == "__main__":
    main()
