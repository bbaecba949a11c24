#!/usr/bin/env python3
"""Issue 25's serving-from-threads bar: K Python threads, each on a CUDA stream of its own,
run one shared transformer layer (d_model 1024, 16 heads, feed-forward 4096, fp16, inference)
on seeded random shapes (batch 1-16 x sequence 16-512), all K at once, under one allocator.

    python3 scripts/gpu/torch_threads.py ALLOCATOR [--threads K] [--requests N] [--json OUT]

ALLOCATOR: native | expandable | arena | arena:CONF, as scripts/gpu/models.py (whose Arena,
Driver and Poller this uses). Driver peak as there: cuMemGetInfo polled about every
millisecond from the baseline (CUDA context, the layer's weights, cuBLAS handles after a
warm-up on the main thread, empty_cache) to the end; peak = max(total - free) - baseline.
Each request's output checksum (the sum of its first row, fp32, as bits) goes in the JSON, so
runs under different allocators can be compared request by request (they must be equal: the
inputs come from seeded generators, one per thread).

Output: one JSON object (--json OUT, else stdout) and one summary line on stderr.
"""

import argparse
import json
import os
import random
import statistics
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402  (Arena, Driver, Poller, set_environment)

MIB = 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("allocator", help="native | expandable | arena | arena:CONF")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--requests", type=int, default=40, help="requests per thread")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--lib", default=models.DEFAULT_LIB)
    p.add_argument("--poll-ms", type=float, default=1.0)
    a = p.parse_args(argv)
    a.kind, _, a.conf = a.allocator.partition(":")
    if a.kind not in ("native", "expandable", "arena") or (a.conf and a.kind != "arena"):
        p.error(f"unknown allocator {a.allocator!r}")
    if a.threads < 1 or a.requests < 1:
        p.error("--threads and --requests must be at least 1")
    return a


def serve(torch, layer, k, a, out, errors, start):
    """One thread's requests on its own stream: (batch, seq, checksum bits, seconds) each."""
    try:
        dev = torch.device("cuda", 0)
        stream = torch.cuda.Stream(device=dev)
        gen = torch.Generator(device=dev)
        gen.manual_seed(a.seed * 1000 + k)
        shapes = random.Random(a.seed * 1000 + k)
        start.wait()
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(a.requests):
                b, s = shapes.randint(1, 16), shapes.randint(16, 512)
                t = time.perf_counter()
                x = torch.randn(b, s, 1024, device=dev, dtype=torch.float16, generator=gen)
                y = layer(x)
                v = y[0].float().sum().item()  # the answer goes back to the client
                out.append((b, s, struct.unpack("<I", struct.pack("<f", v))[0],
                            time.perf_counter() - t))
    except Exception as e:  # reported in the JSON
        errors.append(f"thread {k}: {e!r}")


def run(a, result):
    models.set_environment(a)
    import torch
    arena = models.Arena(torch, a.lib) if a.kind == "arena" else None
    torch.manual_seed(a.seed)
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)
    driver = models.Driver(torch)
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, device=dev,
                                             dtype=torch.float16).eval()
    with torch.inference_mode():
        layer(torch.zeros(2, 16, 1024, device=dev, dtype=torch.float16)).sum().item()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = driver.used()
    result["device"] = torch.cuda.get_device_name(0)
    outs = [[] for _ in range(a.threads)]
    errors = []
    start = threading.Barrier(a.threads + 1)
    threads = [threading.Thread(target=serve, args=(torch, layer, k, a, outs[k], errors, start))
               for k in range(a.threads)]
    with models.Poller(driver, arena, a.poll_ms / 1000) as poller:
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        torch.cuda.synchronize()
    if errors:
        raise RuntimeError("; ".join(errors))
    times = sorted(r[3] for o in outs for r in o)
    result.update(
        threads=a.threads, requests_per_thread=a.requests,
        driver_peak_mib=round((poller.max_used - base) / MIB, 1),
        baseline_used_mib=round(base / MIB, 1),
        arena_peak_held_mib=round(poller.max_held / MIB, 1) if arena else None,
        arena_max_in_use_mib=round(arena.stats().max_in_use / MIB, 1) if arena else None,
        torch_peak_reserved_mib=None if arena else round(
            torch.cuda.max_memory_reserved() / MIB, 1),
        requests_per_s=round(a.threads * a.requests / wall, 2),
        median_request_ms=round(statistics.median(times) * 1000, 3),
        checksums=[[r[2] for r in o] for o in outs],
        samples=poller.samples)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    result = dict(schema="cuda-arena-torch-threads/1", allocator=a.allocator, ok=False,
                  error=None)
    code = 0
    try:
        run(a, result)
        result["ok"] = True
    except Exception as e:
        result["error"] = repr(e)
        code = 1
    text = json.dumps(result)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print(f"{a.allocator} K={a.threads}: " + (
        f"driver peak {result['driver_peak_mib']} MiB, {result['requests_per_s']} req/s, "
        f"median {result['median_request_ms']} ms" if result["ok"] else
        f"FAILED {result['error']}"), file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
