"""Writes a PyTorch-shaped memory snapshot whose bulk is `None`s in `segments` (a field the
replay never reads), for measuring the snapshot reader's memory (issue 26, item 1):

    python3 scripts/padded_snapshot.py OUT.pickle MEGABYTES [EVENTS]

`device_traces` holds EVENTS (default 1000) alloc/free_requested pairs on one device; the
file is padded to MEGABYTES with Nones, written by CPython's pickler as PyTorch's
`_dump_snapshot` does."""
import pickle
import sys


def main() -> None:
    out, megabytes = sys.argv[1], float(sys.argv[2])
    events = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    trace = []
    for i in range(events):
        addr = 0x7F0000000000 + (i % 64) * 4096
        trace.append({"action": "alloc", "addr": addr, "size": 512 * (1 + i % 7),
                      "stream": 0, "time_us": i, "frames": []})
        trace.append({"action": "free_requested", "addr": addr, "size": 512 * (1 + i % 7),
                      "stream": 0, "time_us": i, "frames": []})
    # One None pickles as one byte ('N'), plus 2 bytes per batch of 1000.
    nones = int(megabytes * 1e6 * 1000 / 1002)
    snapshot = {"segments": [None] * nones, "device_traces": [trace],
                "allocator_settings": {}}
    with open(out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


main()
