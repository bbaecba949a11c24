#!/usr/bin/env python3
"""Converts a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`, plain or .xz) into the
GPUTRC01 binary trace of ../shared/bench (gen_traces.py documents the format), so the GPU
harness can replay real-model traffic through every allocator it measures. The rules are
`cuda-arena replay`'s for snapshots (crates/arena-core/src/trace/torch_snapshot.rs): `alloc` and
`free_requested` of one device are the trace; a free of a block allocated before recording
started is skipped; blocks alive at the end are freed at the end, in address order.

    python3 scripts/gpu/snapshot_to_trc.py SNAPSHOT.pickle[.xz] OUT.trc [--device N]

Prints one line: ops, ids, peak live requested bytes, skipped frees, freed at the end.
"""
import argparse
import lzma
import pickle
import struct

MAGIC = b"GPUTRC01"
HDR = struct.Struct("<8sIIQQQQQQ")
REC = struct.Struct("<IBBHQ")


def convert(src: str, dst: str, device: int) -> str:
    opener = lzma.open if src.endswith(".xz") else open
    with opener(src, "rb") as f:
        snapshot = pickle.load(f)
    events = snapshot["device_traces"][device]
    streams: dict = {}
    live: dict = {}  # addr -> (id, size, stream index)
    ops = []
    next_id = 0
    skipped = 0
    cur = peak = peak_op = total = 0
    for e in events:
        action = e.get("action")
        if action == "alloc":
            s = streams.setdefault(e.get("stream", 0), len(streams))
            if s > 255:
                raise SystemExit("more than 256 streams: GPUTRC01 has one byte for a stream")
            size = int(e["size"])
            live[e["addr"]] = (next_id, size, s)
            ops.append((next_id, 0, s, size))
            next_id += 1
            total += size
            cur += size
            if cur > peak:
                peak, peak_op = cur, len(ops) - 1
        elif action == "free_requested":
            block = live.pop(e["addr"], None)
            if block is None:
                skipped += 1
                continue
            ops.append((block[0], 1, block[2], block[1]))
            cur -= block[1]
    at_end = len(live)
    for addr in sorted(live):
        i, size, s = live[addr]
        ops.append((i, 1, s, size))
    with open(dst, "wb") as out:
        out.write(HDR.pack(MAGIC, 1, max(1, len(streams)), len(ops), next_id, peak, peak_op, total, 0))
        for i, kind, s, size in ops:
            out.write(REC.pack(i, kind, s, 0, size))
    return (f"{dst}: {len(ops)} ops, {next_id} ids, peak live requested {peak} B, "
            f"{skipped} unknown frees skipped, {at_end} freed at the end")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshot")
    p.add_argument("out")
    p.add_argument("--device", type=int, default=0)
    a = p.parse_args()
    print(convert(a.snapshot, a.out, a.device))
