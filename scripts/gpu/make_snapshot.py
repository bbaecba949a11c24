#!/usr/bin/env python3
"""PyTorch memory snapshots for `cuda-arena replay` (issue 13).

    python3 scripts/gpu/make_snapshot.py OUT.pickle [--steps N] [--max-entries N] [--context all]
        On a machine with a GPU and torch: records the allocation history of a small training
        loop (a default stream and a side stream) and writes torch's own snapshot, the file
        `torch.cuda.memory._dump_snapshot` writes. `--max-entries` is small by default, so the
        history is a ring buffer that has wrapped: frees of blocks allocated before it starts,
        and blocks live at its end, both occur.

    python3 scripts/gpu/make_snapshot.py --synthetic OUT.pickle
        Anywhere, without torch: the small snapshot the tests read
        (__test__/fixtures/torch-snapshot.pickle), built as torch builds one (shared key
        strings and frame dicts) and written by the same `pickle.dump`.

Either way it prints, as one JSON line, what `cuda-arena replay OUT.pickle --json` should
report under "snapshot" for the default device (the one with the most events), counted here
by the rules of docs/pytorch.md, so the two can be compared.
"""
import argparse
import json
import pickle
import sys


def expected_report(snapshot, device=None):
    """The counts of docs/pytorch.md ("Replaying a PyTorch snapshot") for one device."""
    traces = snapshot["device_traces"]
    counts = [len(t) for t in traces]
    if device is None:
        device = max(range(len(traces)), key=lambda d: (counts[d], -d))
    r = dict(device=device, deviceEvents=counts, allocs=0, frees=0, unknownFrees=0,
             liveAddressAllocs=0, zeroSizeAllocs=0, freedAtEnd=0, freeCompleted=0,
             segmentEvents=0, otherEvents=0, streams=[])
    live = {}
    for e in traces[device]:
        a = e["action"]
        if a == "alloc" and e["size"] == 0:
            r["zeroSizeAllocs"] += 1
        elif a == "alloc":
            if e["stream"] not in r["streams"]:
                r["streams"].append(e["stream"])
            if e["addr"] in live:
                r["liveAddressAllocs"] += 1
            live[e["addr"]] = True
            r["allocs"] += 1
        elif a == "free_requested":
            if live.pop(e["addr"], None):
                r["frees"] += 1
            else:
                r["unknownFrees"] += 1
        elif a == "free_completed":
            r["freeCompleted"] += 1
        elif a.startswith("segment_"):
            r["segmentEvents"] += 1
        else:
            r["otherEvents"] += 1
    r["freedAtEnd"] = len(live)
    return r


def synthetic():
    """Two devices; device 1 (the default: more events) has every kind of event, two streams
    and both ring-buffer artefacts. The Rust test `torch_snapshot.rs` lists the trace it gives."""
    # Torch builds each key string once and shares it, and shares the frame dicts of
    # tracebacks (py_symbolize): the pickle stores each once and refers to it after.
    train = {"filename": "train.py", "line": 12, "name": "step"}
    layer = {"filename": "model.py", "line": 40, "name": "forward"}
    side = 0x55D0C0FFEE00  # a cudaStream_t, as an integer

    def ev(action, addr, size, stream=0, frames=(train, layer)):
        return {"action": action, "addr": addr, "size": size, "stream": stream,
                "time_us": 1_700_000_000_000_000 + addr % 1000, "frames": list(frames),
                "compile_context": "N/A", "user_metadata": ""}

    base = 0x7F1000200000
    device1 = [
        ev("free_requested", 0x7F1000000000, 1024),  # allocated before the history starts
        ev("free_completed", 0x7F1000000000, 1024),
        ev("segment_alloc", base, 2 << 20, frames=()),
        ev("alloc", base, 1000),
        ev("alloc", base + 0x400, 3000, side),
        ev("alloc", base + 0x1000, 40000),
        ev("free_requested", base, 1000),
        ev("free_completed", base, 1000),
        ev("alloc", base, 800),
        ev("free_requested", base + 0x400, 3000, side),
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 0},
        {"action": "oom", "device_free": 123, "size": 1 << 40, "stream": 0, "time_us": 0},
        ev("segment_free", 0x7F1000400000, 2 << 20, frames=()),
    ]
    device0 = [
        ev("alloc", 0x7F0000000000, 512),
        ev("free_requested", 0x7F0000000000, 512),
        ev("free_completed", 0x7F0000000000, 512),
    ]
    segment = {"device": 1, "address": base, "total_size": 2 << 20, "allocated_size": 41024,
               "active_size": 41024, "requested_size": 40800, "stream": 0,
               "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": [train],
               "blocks": [{"address": base, "size": 1024, "requested_size": 800,
                           "state": "active_allocated", "frames": [train, layer]}]}
    return {
        "segments": [segment],
        "device_traces": [device0, device1],
        "external_annotations": [],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "garbage_collection_threshold": 0.0,
                               "expandable_segments": False,
                               "roundup_power2_divisions": {1: 0, 2: 0}},
    }


def real(out, steps, max_entries, context):
    import torch

    if not torch.cuda.is_available():
        sys.exit("make_snapshot.py: no CUDA device (use --synthetic for the test snapshot)")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    side = torch.cuda.Stream()
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None if context == "none" else context, max_entries=max_entries)
    for step in range(steps):
        x = torch.randn(64 + 8 * (step % 8), 1024, device=dev)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        # Work on a side stream: its blocks are allocated on it, and one is used back on the
        # default stream (record_stream), as data loaders and overlapped copies do.
        with torch.cuda.stream(side):
            y = torch.randn(256, 1024, device=dev) * 2
            z = y.sum(dim=0)
        torch.cuda.current_stream().wait_stream(side)
        z.record_stream(torch.cuda.current_stream())
        w = z * 2
        del x, y, z, w, loss
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(out)
    torch.cuda.memory._record_memory_history(enabled=None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--synthetic", action="store_true", help="the tests' snapshot, without torch")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--max-entries", type=int, default=20000)
    p.add_argument("--context", choices=["none", "state", "alloc", "all"], default="none",
                   help="stack traces to record (default none: the smallest file)")
    a = p.parse_args()
    if a.synthetic:
        with open(a.out, "wb") as f:
            # Protocol 4, what torch's pickle.dump writes up to Python 3.13, so that the
            # fixture's bytes do not depend on the Python that made it.
            pickle.dump(synthetic(), f, protocol=4)
    else:
        real(a.out, a.steps, a.max_entries, a.context)
    with open(a.out, "rb") as f:
        snapshot = pickle.load(f)
    print(json.dumps(expected_report(snapshot)))


if __name__ == "__main__":
    main()
