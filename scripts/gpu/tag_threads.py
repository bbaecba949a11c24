#!/usr/bin/env python3
"""Issue 25: a PyTorch training trace tagged with the thread of each op, from a snapshot
recorded with Python stacks (`models.py W native --snapshot S.pickle --snapshot-stacks`).

    python3 scripts/gpu/tag_threads.py S.pickle OUT.threads.txt

An op whose entry has no Python frame ran on a thread with no Python frame: autograd's
backward thread (1); the others ran on Python's main thread (0). Output, one op a line after a
comment: `a SIZE THREAD` allocates the next id (0 up), `f ID THREAD` frees it; zero-size
allocations and frees of blocks allocated before the recording are left out.
`crates/arena-core/tests/torch_training_threads.rs` replays these on two threads.
"""
import pickle
import sys


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    with open(argv[1], "rb") as f:
        snapshot = pickle.load(f)
    trace = max(snapshot["device_traces"], key=len)
    ids, lines = {}, []
    next_id = 0
    for e in trace:
        thread = 0 if e.get("frames") else 1
        if e["action"] == "alloc" and e["size"] > 0:
            ids[e["addr"]] = next_id
            lines.append(f"a {e['size']} {thread}")
            next_id += 1
        elif e["action"] == "free_requested" and e["addr"] in ids:
            lines.append(f"f {ids.pop(e['addr'])} {thread}")
    with open(argv[2], "w") as out:
        out.write("# PyTorch training, two steps and more: each op with the thread that made it "
                  "(0: Python main thread, 1: autograd). a SIZE THREAD allocates the next id "
                  "(0 up); f ID THREAD frees it.\n")
        out.write("\n".join(lines) + "\n")
    print(f"{argv[2]}: {next_id} allocations, {len(lines) - next_id} frees")


if __name__ == "__main__":
    main(sys.argv)
