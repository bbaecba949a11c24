#!/usr/bin/env python3
"""Keeps what `cuda-arena replay` reads of a PyTorch memory snapshot (device_traces' action,
addr, size, stream) and writes it xz-compressed: benches/traces/torch/ holds the four real-model
snapshots of scripts/gpu/proof.sh this way (3 MB instead of 5.6 MB compressed, 107 MB raw),
and `cuda-arena replay` gives the same figures for either form.

    python3 scripts/gpu/slim_snapshot.py SNAPSHOT.pickle[.xz] OUT.pickle.xz
"""
import lzma
import pickle
import sys

KEEP = ("action", "addr", "size", "stream")


def main(src: str, dst: str) -> None:
    opener = lzma.open if src.endswith(".xz") else open
    with opener(src, "rb") as f:
        snapshot = pickle.load(f)
    slim = {
        "device_traces": [
            [{k: e[k] for k in KEEP if k in e} for e in trace] for trace in snapshot["device_traces"]
        ],
        "segments": [],
    }
    with lzma.open(dst, "wb", preset=9 | lzma.PRESET_EXTREME) as f:
        pickle.dump(slim, f, protocol=2)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
