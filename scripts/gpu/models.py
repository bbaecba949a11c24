#!/usr/bin/env python3
"""Issue 13, the GPU proof on real models: one workload under one allocator, in one process.

    python3 scripts/gpu/models.py WORKLOAD ALLOCATOR [--json OUT] [--snapshot PATH]
                                  [--check [REF.json]] [--label NAME] [sizes...]

WORKLOAD:  gpt2-train        transformers' GPT2LMHeadModel(GPT2Config()), random weights, bf16
                             autocast, AdamW, batch 8 x 1024 tokens, 2 warm-up + 10 timed steps
           resnet50-train    torchvision's resnet50(weights=None), bf16 autocast, SGD, batch 64
                             x 3 x 224 x 224, 2 warm-up + 10 timed steps
           encoder-serve     BertModel(BertConfig()) in bf16, inference: 5 warm-up + 300 timed
                             requests of random batch 1-32 x sequence 8-512
           decoder-generate  GPT2LMHeadModel(GPT2Config()) in bf16, greedy generate: 2 warm-up +
                             30 timed prompts of random batch 1-8 x length 8-512, 32 new tokens
ALLOCATOR: native            torch's caching allocator (PYTORCH_CUDA_ALLOC_CONF unset)
           expandable        torch's, with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
           arena             libcuda_arena.so through CUDAPluggableAllocator, CUDA_ARENA_CONF unset
           arena:CONF        the same with CUDA_ARENA_CONF=CONF ("arena.extend_strategy=1,...")

Nothing is downloaded: weights are random, inputs are random token ids / images drawn from
seeded generators, so every run of a workload computes the same thing whatever the allocator.

Determinism: torch.use_deterministic_algorithms(True) (strict: an op without a deterministic
implementation raises), CUBLAS_WORKSPACE_CONFIG=:4096:8, cudnn.deterministic=True,
cudnn.benchmark=False, torch's default fill_uninitialized_memory=True (torch.empty memory is
filled, so no result can depend on what an allocator leaves in memory), seed 0. Strict mode
matters for the transformers: SDPA's flash and memory-efficient backward run their
deterministic algorithm only when warn_only is False (with warn_only=True they warn and run the
non-deterministic one). ResNet-50's AdaptiveAvgPool2d((1, 1)) has no deterministic CUDA
backward (adaptive_avg_pool2d_backward_cuda), so it is replaced by the same function, a mean
over H and W. If a strict run still raises on a non-deterministic op, the JSON says so
("determinism.nondeterministic_op") and exits 3; proof.sh then reruns that workload under
every allocator with --warn-only, and the JSON lists the ops that warned.

Memory. Baseline: after CUDA init and a warm-up of tiny ops (a matmul in fp32 and in bf16
autocast, a linear with bias; for ResNet a small conv + batch norm forward and backward), then
torch._C._cuda_clearCublasWorkspaces() and empty_cache(): it holds the CUDA context with the
kernels loaded so far, the cuBLAS/cuBLASLt (and cuDNN) handles' own device memory, and what the
allocator still holds (reported apart, "allocator_baseline"). Driver peak: a thread polls
cuMemGetInfo (driver API through ctypes, so the GIL is released while it waits) about every
millisecond from the baseline to the end of the workload; peak = max(total - free) - baseline.
It therefore includes, beside the allocator's memory, what CUDA and the libraries take outside
any allocator during the run (kernels loaded lazily, library workspaces), the same for every
allocator. Allocator peak: native/expandable: torch.cuda.memory_stats() peaks (reserved,
allocated, requested; reset at the baseline); arena: cuda_arena_torch_stats through ctypes,
MaxInUse, and TotalAllocated (held) polled by the same thread (the arena's held memory only
grows between empty_caches, so its maximum is exact; RequestedInUse sampled).

--snapshot PATH (native or expandable): records the allocation history from the baseline on
(_record_memory_history, context=None, 4,000,000 entries) and dumps torch's snapshot pickle
for `cuda-arena replay`. Recording adds work to every allocation, so proof.sh records in a
run of its own; its times are not the allocator's. With --snapshot-stacks, each entry also
carries its Python stack (context="alloc", stacks="python"): an op with none ran on a thread
with no Python frame, autograd's backward thread (scripts/gpu/tag_threads.py writes the
thread-tagged traces of benches/traces/torch/*.threads.txt from such a snapshot).

--check [REF.json]: the device test of issue 13: after the workload, everything is released
(the model, the optimizer, cuBLAS workspaces, empty_cache) and the allocator must be back to
its baseline (in use equal, held no more), the driver's used memory back to within 16 MiB of
what the reference run left (kernels loaded lazily stay loaded in every run; without a
reference the residue is reported, not judged), and, with REF.json, every loss (or request
checksum) bitwise equal to the reference's. Exit 1 when a check fails.

Output: one JSON object (--json OUT, else stdout) and one summary line on stderr. Every run
writes its JSON, failures included ("ok": false, "error").
"""

import argparse
import ctypes
import gc
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import statistics
import sys
import threading
import time
import traceback
import warnings

MIB = 1 << 20
SCHEMA = "cuda-arena-models/1"
WORKLOADS = ("gpt2-train", "resnet50-train", "encoder-serve", "decoder-generate")
DEFAULT_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".device",
                           "libcuda_arena.so")
SNAPSHOT_ENTRIES = 4_000_000
EXIT_NONDETERMINISTIC = 3
DRIVER_SLACK = 16 * MIB


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See the module docstring (python3 -m pydoc scripts/gpu/models.py) for the method.")
    p.add_argument("workload", choices=WORKLOADS)
    p.add_argument("allocator", help="native | expandable | arena | arena:CONF")
    p.add_argument("--json", metavar="OUT", help="write the JSON here (default: stdout)")
    p.add_argument("--label", help="the run's name in the JSON (default: the allocator)")
    p.add_argument("--snapshot", metavar="PATH", help="record and dump torch's memory snapshot")
    p.add_argument("--snapshot-stacks", action="store_true",
                   help="with --snapshot: each entry with its Python stack (tells the threads apart)")
    p.add_argument("--check", nargs="?", const="", metavar="REF.json",
                   help="check memory back after empty_cache, and outputs equal to REF's")
    p.add_argument("--lib", default=DEFAULT_LIB, help="libcuda_arena.so (default: .device/)")
    p.add_argument("--via-wheel", action="store_true",
                   help="arena: installed by the cuda_arena package (cuda_arena.torch.install(), "
                        "its own library) instead of this script's ctypes; the JSON compares "
                        "cuda_arena.torch.memory_stats with the C stats at the end")
    p.add_argument("--record", metavar="PATH",
                   help="with --via-wheel: cuda_arena.torch.start_recording(PATH) from the "
                        "baseline to the end of the workload")
    p.add_argument("--warn-only", action="store_true",
                   help="use_deterministic_algorithms(True, warn_only=True)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, help="timed steps / requests / prompts")
    p.add_argument("--warmup", type=int, help="untimed steps / requests / prompts before them")
    p.add_argument("--batch", type=int, help="training batch; serving: the largest batch")
    p.add_argument("--seq", type=int,
                   help="GPT-2 training: sequence; ResNet: image side; serving: the longest")
    p.add_argument("--new-tokens", type=int, default=32, help="decoder-generate (default 32)")
    p.add_argument("--poll-ms", type=float, default=1.0, help="driver polling period")
    p.add_argument("--dry-run", action="store_true",
                   help="run on the CPU with tiny models, no allocator or memory measurement: "
                        "for checking the script on a machine without a GPU")
    a = p.parse_args(argv)
    kind, _, conf = a.allocator.partition(":")
    if kind not in ("native", "expandable", "arena") or (conf and kind != "arena"):
        p.error(f"allocator must be native, expandable, arena or arena:CONF, got {a.allocator!r}")
    if a.allocator == "arena:":
        p.error("arena: needs a CONF after the colon (or say arena)")
    if a.snapshot and kind == "arena":
        p.error("--snapshot needs torch's own allocator (native or expandable): torch records "
                "no history through a pluggable allocator")
    if a.via_wheel and kind != "arena":
        p.error("--via-wheel installs cuda-arena: it needs the allocator arena or arena:CONF")
    if a.record and not a.via_wheel:
        p.error("--record needs --via-wheel (cuda_arena.torch.start_recording)")
    a.kind, a.conf = kind, conf
    defaults = {
        "gpt2-train": dict(steps=10, warmup=2, batch=8, seq=1024),
        "resnet50-train": dict(steps=10, warmup=2, batch=64, seq=224),
        "encoder-serve": dict(steps=300, warmup=5, batch=32, seq=512),
        "decoder-generate": dict(steps=30, warmup=2, batch=8, seq=512),
    }[a.workload]
    if a.dry_run:
        defaults = dict(steps=3, warmup=1, batch=2, seq=32 if a.workload != "resnet50-train" else 64)
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    for k in ("steps", "batch", "seq", "new_tokens"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be at least 1")
    if a.warmup < 0:
        p.error("--warmup must be at least 0")
    if a.workload == "encoder-serve" and a.seq < 8 or a.workload == "decoder-generate" and a.seq < 8:
        p.error("--seq must be at least 8 for serving (the shortest sequence is 8)")
    return a


# --- environment, before torch is imported --------------------------------------------------
def set_environment(a):
    """What must be in the environment before torch (and CUDA) start."""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if a.kind == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if a.kind == "arena":
        if a.conf:
            os.environ["CUDA_ARENA_CONF"] = a.conf
        else:
            os.environ.pop("CUDA_ARENA_CONF", None)
    os.environ.pop("CUDA_ARENA_TORCH_BACKEND", None)  # the GPU, never a simulated device


class Stats(ctypes.Structure):
    """cuda_arena_stats, as bindings/c/include/cuda_arena.h declares it."""
    _fields_ = [("limit", ctypes.c_int64)] + [
        (n, ctypes.c_uint64) for n in (
            "in_use", "total_allocated", "max_in_use", "num_allocs", "num_reserves",
            "num_arena_extensions", "num_arena_shrinkages", "max_alloc_size",
            "requested_in_use", "reserved_bytes")]


# cuda_arena.torch.memory_stats' keys and the C fields they must equal.
WHEEL_KEYS = [("InUse", "in_use"), ("TotalAllocated", "total_allocated"),
              ("MaxInUse", "max_in_use"), ("NumAllocs", "num_allocs"),
              ("RequestedInUse", "requested_in_use"), ("MaxAllocSize", "max_alloc_size"),
              ("NumArenaExtensions", "num_arena_extensions"),
              ("allocated_bytes.all.current", "in_use"),
              ("reserved_bytes.all.current", "total_allocated")]


class Arena:
    """libcuda_arena.so installed as torch's allocator, and its counters through ctypes."""

    def __init__(self, torch, path, via_wheel=False):
        if via_wheel:
            # The package's own install; the same library (dlopen finds it loaded) for the
            # C stats this script compares the package's with.
            import cuda_arena
            import cuda_arena.torch
            cuda_arena.torch.install()
            self.path = str(cuda_arena.library_path())
            self.lib = ctypes.CDLL(self.path)
            self.lib.cuda_arena_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
            self.lib.cuda_arena_torch_stats.restype = ctypes.c_int
            return
        self.path = os.path.abspath(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{self.path}: build it with scripts/gpu/build-device.sh")
        self.lib = ctypes.CDLL(self.path)
        self.lib.cuda_arena_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
        self.lib.cuda_arena_torch_stats.restype = ctypes.c_int
        pluggable = torch.cuda.memory.CUDAPluggableAllocator(
            self.path, "cuda_arena_torch_alloc", "cuda_arena_torch_free")
        setters = pluggable.allocator()
        setters.set_init_fn(self.address("cuda_arena_torch_init"))
        setters.set_reset_fn(self.address("cuda_arena_torch_empty_cache"))
        setters.set_memory_fraction_fn(self.address("cuda_arena_torch_set_memory_fraction"))
        setters.set_record_stream_fn(self.address("cuda_arena_torch_record_stream"))
        torch.cuda.memory.change_current_allocator(pluggable)

    def address(self, name):
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    def stats(self):
        s = Stats()
        code = self.lib.cuda_arena_torch_stats(0, ctypes.byref(s))
        if code != 0:
            raise RuntimeError(f"cuda_arena_torch_stats failed with code {code}")
        return s

    def device_stats(self):
        """(driver allocations, driver frees, waits for the device) of device 0, or None from a
        library before cuda_arena_torch_device_stats."""
        fn = getattr(self.lib, "cuda_arena_torch_device_stats", None)
        if fn is None:
            return None
        out = (ctypes.c_uint64 * 6)()
        if fn(0, ctypes.byref(out)) != 0:
            raise RuntimeError("cuda_arena_torch_device_stats failed")
        return dict(device_allocs=out[0], device_frees=out[1], device_waits=out[4],
                    stream_waits=out[5])


class Driver:
    """cuMemGetInfo through the driver API, callable from any thread once it made the main
    thread's context current there. ctypes releases the GIL during the call."""

    def __init__(self, torch):
        self.torch = torch
        self.cuda = None
        self.ctx = ctypes.c_void_p()
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            if cuda.cuCtxGetCurrent(ctypes.byref(self.ctx)) == 0 and self.ctx.value:
                self.cuda = cuda
        except OSError:
            pass
        self.source = "cuMemGetInfo (driver API, ctypes)" if self.cuda else \
            "torch.cuda.mem_get_info (cudaMemGetInfo)"

    def bind_thread(self):
        if self.cuda is not None and self.cuda.cuCtxSetCurrent(self.ctx) != 0:
            self.cuda = None

    def info(self):
        """(free, total) bytes of the device."""
        if self.cuda is not None:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            if self.cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0:
                return free.value, total.value
        return self.torch.cuda.mem_get_info()

    def used(self):
        free, total = self.info()
        return total - free

    def version(self):
        if self.cuda is None:
            return None
        v = ctypes.c_int()
        return v.value if self.cuda.cuDriverGetVersion(ctypes.byref(v)) == 0 else None


class Poller(threading.Thread):
    """The driver's used memory (and the arena's counters) every poll period, keeping maxima."""

    def __init__(self, driver, arena, period_s):
        super().__init__(daemon=True)
        self.driver, self.arena, self.period_s = driver, arena, period_s
        self.stop_event = threading.Event()
        self.max_used = 0
        self.max_held = self.max_requested = self.max_in_use = 0
        self.samples = 0
        self.error = None
        self.started_at = self.stopped_at = None

    def sample(self):
        self.max_used = max(self.max_used, self.driver.used())
        if self.arena is not None:
            try:
                s = self.arena.stats()
            except RuntimeError as e:  # the driver's figure goes on; the JSON says what failed
                self.error = self.error or repr(e)
            else:
                self.max_held = max(self.max_held, s.total_allocated)
                self.max_requested = max(self.max_requested, s.requested_in_use)
                self.max_in_use = max(self.max_in_use, s.in_use)
        self.samples += 1

    def run(self):
        try:
            self.driver.bind_thread()
            while not self.stop_event.is_set():
                self.sample()
                self.stop_event.wait(self.period_s)
        except Exception as e:  # reported in the JSON, never silently
            self.error = repr(e)

    def __enter__(self):
        self.started_at = time.perf_counter()
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.join()
        self.stopped_at = time.perf_counter()
        self.sample()  # the end state, from this thread


class Warnings:
    """Every warning torch raises while the workload runs, for the JSON (deduplicated)."""

    def __init__(self):
        self.seen = {}

    def __call__(self, message, category, filename, lineno, file=None, line=None):
        text = str(message).split(" (Triggered internally")[0][:300]
        self.seen[text] = self.seen.get(text, 0) + 1

    def report(self):
        return [{"message": m, "count": n} for m, n in self.seen.items()]


def progress(text):
    """A line on stderr while the run goes on (the JSON comes at the end)."""
    print(text, file=sys.stderr, flush=True)


def float_hex(x):
    return float(x).hex()


def digest(t):
    """Bitwise digest of a tensor: its bytes, copied to the host."""
    import torch
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype in (torch.bfloat16, torch.float16):
        flat = flat.view(torch.int16)
    elif flat.dtype in (torch.float32,):
        flat = flat.view(torch.int32)
    return hashlib.sha1(flat.cpu().numpy().tobytes()).hexdigest()[:16]


# --- workloads -----------------------------------------------------------------------------
class Workload:
    def __init__(self, a, torch, dev):
        self.a, self.torch, self.dev = a, torch, dev
        self.notes = []

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    def autocast(self):
        return self.torch.autocast(self.dev.type, dtype=self.torch.bfloat16)


class Gpt2Train(Workload):
    unit = "step"

    def params(self):
        return dict(model="GPT2LMHeadModel(GPT2Config())", dtype="fp32 weights, bf16 autocast",
                    optimizer="AdamW(lr=1e-4)", batch=self.a.batch, seq=self.a.seq,
                    dropout="GPT2Config defaults (0.1)")

    def build(self):
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config() if not self.a.dry_run else GPT2Config(n_layer=2, n_embd=64, n_head=2)
        with self.dev:
            self.model = GPT2LMHeadModel(cfg)
        self.model.train()
        self.vocab = cfg.vocab_size
        self.opt = self.torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.gen = self.torch.Generator(device=self.dev).manual_seed(self.a.seed + 1)
        attn = getattr(self.model.config, "_attn_implementation", None)
        self.notes.append(f"attention implementation: {attn}")

    def step(self, i):
        t = self.torch
        ids = t.randint(0, self.vocab, (self.a.batch, self.a.seq), device=self.dev,
                        generator=self.gen)
        t0 = time.perf_counter()
        with self.autocast():
            out = self.model(input_ids=ids, labels=ids)
        out.loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        loss = out.loss.item()
        self.sync()
        elapsed = time.perf_counter() - t0
        return dict(loss=loss, loss_hex=float_hex(loss)), elapsed

    def release(self):
        del self.model, self.opt


class Resnet50Train(Workload):
    unit = "step"

    def params(self):
        return dict(model="torchvision resnet50(weights=None), avgpool -> mean over H, W",
                    dtype="fp32 weights, bf16 autocast",
                    optimizer="SGD(lr=0.01, momentum=0.9, weight_decay=1e-4)",
                    batch=self.a.batch, image=self.a.seq, classes=1000)

    def build(self):
        import torchvision
        t = self.torch

        class Mean(t.nn.Module):
            """AdaptiveAvgPool2d((1, 1)) as a mean: adaptive_avg_pool2d_backward_cuda has no
            deterministic implementation; the mean's backward (an expand) does."""

            def forward(self, x):
                return x.mean(dim=(2, 3), keepdim=True)

        with self.dev:
            self.model = torchvision.models.resnet50(weights=None)
        self.model.avgpool = Mean()
        self.model.train()
        self.notes.append("AdaptiveAvgPool2d((1, 1)) replaced by x.mean((2, 3), keepdim=True): "
                          "the same function, with a deterministic CUDA backward")
        self.opt = t.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9,
                               weight_decay=1e-4)
        self.gen = t.Generator(device=self.dev).manual_seed(self.a.seed + 1)

    def step(self, i):
        t = self.torch
        b, s = self.a.batch, self.a.seq
        x = t.randn(b, 3, s, s, device=self.dev, generator=self.gen)
        y = t.randint(0, 1000, (b,), device=self.dev, generator=self.gen)
        t0 = time.perf_counter()
        with self.autocast():
            loss = t.nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        value = loss.item()
        self.sync()
        elapsed = time.perf_counter() - t0
        return dict(loss=value, loss_hex=float_hex(value)), elapsed

    def release(self):
        del self.model, self.opt


class EncoderServe(Workload):
    unit = "request"

    def params(self):
        return dict(model="BertModel(BertConfig())", dtype="bf16 weights", mode="inference_mode",
                    batch=f"1-{self.a.batch}", seq=f"8-{self.a.seq}", requests=self.a.steps,
                    output="last_hidden_state, digested bitwise (sha1 of its bytes)")

    def build(self):
        from transformers import BertConfig, BertModel
        cfg = BertConfig() if not self.a.dry_run else BertConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128)
        with self.dev:
            self.model = BertModel(cfg)
        self.model.to(self.torch.bfloat16).eval()
        self.vocab = cfg.vocab_size
        self.shapes = random.Random(self.a.seed + 2)
        self.gen = self.torch.Generator(device=self.dev).manual_seed(self.a.seed + 1)
        attn = getattr(self.model.config, "_attn_implementation", None)
        self.notes.append(f"attention implementation: {attn}")

    def step(self, i):
        t = self.torch
        b = self.shapes.randint(1, self.a.batch)
        s = self.shapes.randint(8, self.a.seq)
        ids = t.randint(0, self.vocab, (b, s), device=self.dev, generator=self.gen)
        t0 = time.perf_counter()
        with t.inference_mode():
            out = self.model(input_ids=ids).last_hidden_state
        self.sync()
        elapsed = time.perf_counter() - t0
        return dict(batch=b, seq=s, checksum=digest(out)), elapsed

    def release(self):
        del self.model


class DecoderGenerate(Workload):
    unit = "request"

    def params(self):
        return dict(model="GPT2LMHeadModel(GPT2Config())", dtype="bf16 weights",
                    decoding="greedy generate(), KV cache", batch=f"1-{self.a.batch}",
                    prompt=f"8-{self.a.seq}", new_tokens=self.a.new_tokens,
                    prompts=self.a.steps,
                    output="generated ids and every step's scores, digested bitwise")

    def build(self):
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config() if not self.a.dry_run else GPT2Config(n_layer=2, n_embd=64, n_head=2)
        with self.dev:
            self.model = GPT2LMHeadModel(cfg)
        self.model.to(self.torch.bfloat16).eval()
        self.vocab = cfg.vocab_size
        self.eos = cfg.eos_token_id
        self.shapes = random.Random(self.a.seed + 2)
        self.gen = self.torch.Generator(device=self.dev).manual_seed(self.a.seed + 1)

    def step(self, i):
        t = self.torch
        b = self.shapes.randint(1, self.a.batch)
        s = self.shapes.randint(8, self.a.seq)
        ids = t.randint(0, self.vocab, (b, s), device=self.dev, generator=self.gen)
        n = self.a.new_tokens
        t0 = time.perf_counter()
        with t.inference_mode():
            out = self.model.generate(
                input_ids=ids, attention_mask=t.ones_like(ids), max_new_tokens=n,
                min_new_tokens=n, do_sample=False, pad_token_id=self.eos,
                output_scores=True, return_dict_in_generate=True)
        self.sync()
        elapsed = time.perf_counter() - t0
        scores = t.stack(list(out.scores))
        return dict(batch=b, seq=s, checksum=digest(out.sequences) + digest(scores),
                    new_tokens=int(out.sequences.shape[1] - s)), elapsed

    def release(self):
        del self.model


WORKLOAD_CLASSES = {"gpt2-train": Gpt2Train, "resnet50-train": Resnet50Train,
                    "encoder-serve": EncoderServe, "decoder-generate": DecoderGenerate}


# --- the run -------------------------------------------------------------------------------
def warm_up(torch, dev, workload):
    """Tiny ops that make the libraries' handles (and load their first kernels) before the
    baseline; they allocate a few MiB, all given back before it is taken."""
    x = torch.ones(256, 256, device=dev)
    (x @ x).sum().item()
    lin = torch.nn.Linear(256, 256, device=dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        (x @ x).sum().item()
        lin(x).sum().item()
    if workload == "resnet50-train":
        conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).to(dev)
        img = torch.ones(2, 3, 16, 16, device=dev, requires_grad=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            conv(img).float().sum().backward()
        del conv, img
    del x, lin


def release_everything(torch, dev):
    gc.collect()
    if dev.type != "cuda":
        return
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()  # cuBLAS keeps a workspace from the allocator per handle and stream
    torch.cuda.empty_cache()
    torch.cuda.synchronize()


def allocator_counters(torch, arena):
    """What the allocator itself says it holds and hands out now."""
    if arena is not None:
        s = arena.stats()
        return dict(held=s.total_allocated, in_use=s.in_use, requested=s.requested_in_use,
                    max_in_use=s.max_in_use, allocs=s.num_allocs,
                    regions=s.num_arena_extensions, shrinkages=s.num_arena_shrinkages,
                    device=arena.device_stats())
    st = torch.cuda.memory_stats()
    return dict(held=torch.cuda.memory_reserved(), in_use=torch.cuda.memory_allocated(),
                device=dict(device_allocs=st.get("num_device_alloc"),
                            device_frees=st.get("num_device_free"),
                            device_waits=st.get("num_sync_all_streams")))


def device_counts_since(base, end):
    """Driver allocations, frees and waits for the device between two allocator_counters."""
    b, e = base.get("device"), end.get("device")
    if not b or not e:
        return None
    return {k: (e[k] - b[k]) if e[k] is not None and b[k] is not None else None for k in e}


def summary_of_times(times):
    if not times:
        return dict(count=0)
    times = sorted(times)
    return dict(count=len(times), median_s=statistics.median(times),
                mean_s=statistics.fmean(times), min_s=times[0], max_s=times[-1],
                p90_s=times[min(len(times) - 1, int(0.9 * len(times)))], total_s=sum(times))


def outputs_of(result):
    """The per-step values that must be bitwise equal across allocators."""
    key = "loss_hex" if result.get("unit") == "step" else "checksum"
    return [r.get(key) for r in result.get("records", [])]


def compare_outputs(result, ref):
    mine, theirs = outputs_of(result), outputs_of(ref)
    n = min(len(mine), len(theirs))
    mismatches = [i for i in range(n) if mine[i] != theirs[i]]
    out = dict(reference_label=ref.get("label"), compared=n,
               same_count=len(mine) == len(theirs), mismatches=len(mismatches),
               first_mismatch=mismatches[0] if mismatches else None,
               identical=not mismatches and len(mine) == len(theirs) and n > 0)
    if result.get("unit") == "step":
        diffs = []
        for i in range(n):
            x = float.fromhex(mine[i])
            y = float.fromhex(theirs[i])
            diffs.append(abs(x - y) if x == x and y == y else (0.0 if x != x and y != y
                                                                 else float("inf")))
        out["max_abs_diff"] = max(diffs) if diffs else None
    return out


def run(a, result):
    t_start = time.perf_counter()
    set_environment(a)
    import torch
    result["versions"] = dict(python=platform.python_version(), torch=torch.__version__,
                              cuda=torch.version.cuda)
    for name in ("transformers", "torchvision"):
        try:  # without importing it (torchvision takes seconds)
            result["versions"][name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            result["versions"][name] = None
    dev = torch.device("cpu" if a.dry_run else "cuda")
    t_import = time.perf_counter()

    arena = None
    if a.kind == "arena" and not a.dry_run:
        arena = Arena(torch, a.lib, a.via_wheel)  # before anything initialises CUDA's allocator
    if not a.dry_run and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device (use --dry-run to check the script without one)")

    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=a.warn_only)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    import torch.utils.deterministic as deterministic
    result["determinism"] = dict(
        use_deterministic_algorithms=True, warn_only=a.warn_only,
        cublas_workspace_config=os.environ["CUBLAS_WORKSPACE_CONFIG"],
        cudnn_deterministic=True, cudnn_benchmark=False,
        fill_uninitialized_memory=bool(deterministic.fill_uninitialized_memory), seed=a.seed)

    driver = None
    if not a.dry_run:
        torch.cuda.init()
        torch.zeros(1, device=dev)  # the primary context, current on this thread
        driver = Driver(torch)
        result["device"] = dict(name=torch.cuda.get_device_name(0),
                                driver_version=driver.version(),
                                total_bytes=driver.info()[1], memory_source=driver.source)
    warm_up(torch, dev, a.workload)
    release_everything(torch, dev)
    t_init = time.perf_counter()

    # --- the baseline ---
    mem = result["memory"] = {}
    if driver is not None:
        base_used = driver.used()
        base_alloc = allocator_counters(torch, arena)
        if arena is None:
            torch.cuda.reset_peak_memory_stats()
        mem["baseline"] = dict(
            driver_used_bytes=base_used,
            includes="CUDA context + kernels loaded by the warm-up + cuBLAS/cuBLASLt (and "
                     "cuDNN for ResNet) handles, after clearCublasWorkspaces and empty_cache",
            allocator=base_alloc)
    if a.snapshot and not a.dry_run:
        if a.snapshot_stacks:
            torch.cuda.memory._record_memory_history(
                enabled="all", context="alloc", stacks="python", max_entries=SNAPSHOT_ENTRIES)
        else:
            torch.cuda.memory._record_memory_history(
                enabled="all", context=None, max_entries=SNAPSHOT_ENTRIES)

    if a.record and not a.dry_run:
        import cuda_arena.torch
        cuda_arena.torch.start_recording(a.record, 0)

    w = WORKLOAD_CLASSES[a.workload](a, torch, dev)
    result["unit"] = w.unit
    result["params"] = w.params()
    seen = Warnings()
    warnings.simplefilter("always")
    warnings.showwarning = seen
    records, times = [], []
    poller = Poller(driver, arena, a.poll_ms / 1000) if driver is not None else None
    try:
        if poller:
            poller.__enter__()
        t_build0 = time.perf_counter()
        w.build()
        w.sync()
        t_build = time.perf_counter() - t_build0
        progress(f"built in {t_build:.1f} s, {time.perf_counter() - t_start:.1f} s since start")
        t_run0 = time.perf_counter()
        for i in range(a.warmup + a.steps):
            rec, elapsed = w.step(i)
            rec = dict(index=i, warmup=i < a.warmup, time_s=elapsed, **rec)
            records.append(rec)
            if i >= a.warmup:
                times.append(elapsed)
            if w.unit == "step" or i % 50 == 0 or i == a.warmup + a.steps - 1:
                progress(f"{w.unit} {i}: {elapsed * 1000:.2f} ms " +
                         (f"loss {rec['loss']:.6f}" if w.unit == "step" else
                          f"batch {rec['batch']} x {rec['seq']}"))
        t_run = time.perf_counter() - t_run0
    except RuntimeError as e:
        if "deterministic" in str(e) and not a.warn_only:
            result["determinism"]["nondeterministic_op"] = str(e).split("\n")[0][:400]
            result["exit_code"] = EXIT_NONDETERMINISTIC
        raise
    finally:
        if poller:
            poller.__exit__()
        result["records"] = records
        result["determinism"]["warnings"] = seen.report()
        result["notes"] = w.notes

    result["time"] = dict(unit=w.unit, warmup=a.warmup, **summary_of_times(times))
    if w.unit == "request" and a.workload == "decoder-generate":
        result["time"]["per_token_median_s"] = result["time"].get("median_s", 0) / a.new_tokens

    if driver is not None:
        mem["driver_peak_bytes"] = poller.max_used - base_used
        mem["driver_peak_used_bytes"] = poller.max_used
        mem["driver_samples"] = poller.samples
        span = (poller.stopped_at or 0) - (poller.started_at or 0)
        mem["driver_mean_period_s"] = span / poller.samples if poller.samples else None
        mem["poller_error"] = poller.error
        end = allocator_counters(torch, arena)
        if arena is None:
            st = torch.cuda.memory_stats()
            mem["allocator"] = dict(
                source="torch.cuda.memory_stats (peaks reset at the baseline)",
                peak_held_bytes=st.get("reserved_bytes.all.peak", 0) - base_alloc["held"],
                peak_allocated_bytes=st.get("allocated_bytes.all.peak", 0) - base_alloc["in_use"],
                peak_requested_bytes=st.get("requested_bytes.all.peak", 0),
                held_at_end_bytes=end["held"] - base_alloc["held"],
                segments_allocated=st.get("segment.all.allocated"),
                cuda_malloc_retries=st.get("num_alloc_retries"),
                num_device_alloc=st.get("num_device_alloc"),
                device_since_baseline=device_counts_since(base_alloc, end))
        else:
            mem["allocator"] = dict(
                source="cuda_arena_torch_stats (held and requested polled, MaxInUse counted)",
                peak_held_bytes=poller.max_held - base_alloc["held"],
                peak_allocated_bytes=end["max_in_use"] - base_alloc["in_use"],
                peak_allocated_is_since_process_start=True,
                peak_requested_bytes_sampled=poller.max_requested,
                held_at_end_bytes=end["held"] - base_alloc["held"],
                regions=end["regions"], allocs=end["allocs"],
                shrinkages=end["shrinkages"],
                device_since_baseline=device_counts_since(base_alloc, end))
    if a.via_wheel and arena is not None:
        import cuda_arena.torch
        torch.cuda.synchronize()
        c, wheel = arena.stats(), cuda_arena.torch.memory_stats(0)
        pairs = {k: (wheel.get(k), getattr(c, f)) for k, f in WHEEL_KEYS}
        result["wheel"] = dict(package=cuda_arena.__version__, library=arena.path,
                               stats_equal=all(x == y for x, y in pairs.values()),
                               memory_stats=wheel)
        if a.record:
            result["wheel"]["recording"] = dict(
                path=cuda_arena.torch.stop_recording(0), max_in_use=c.max_in_use,
                bytes=os.path.getsize(a.record))
    if a.snapshot and not a.dry_run:
        torch.cuda.memory._dump_snapshot(a.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
        result["snapshot"] = dict(path=a.snapshot, bytes=os.path.getsize(a.snapshot),
                                  max_entries=SNAPSHOT_ENTRIES)

    # --- everything back (the device test) ---
    w.release()
    del w
    release_everything(torch, dev)
    if driver is not None:
        after = allocator_counters(torch, arena)
        mem["after_empty_cache"] = dict(
            driver_residue_bytes=driver.used() - base_used,
            allocator_in_use_delta_bytes=after["in_use"] - base_alloc["in_use"],
            allocator_held_delta_bytes=after["held"] - base_alloc["held"])
    if a.check is not None:
        result["check"] = check(a, result)
    result["wall_s"] = dict(import_s=t_import - t_start, init_s=t_init - t_import,
                            build_s=t_build, run_s=t_run,
                            total_s=time.perf_counter() - t_start)


def check(a, result):
    """Issue 13's device test: memory back to the baseline after empty_cache, and the same
    outputs as the reference run."""
    c = dict(reference=a.check or None, failures=[])
    back = result["memory"].get("after_empty_cache")
    if back is not None:
        c["allocator_back"] = back["allocator_in_use_delta_bytes"] == 0 and \
            back["allocator_held_delta_bytes"] <= 0
        if not c["allocator_back"]:
            c["failures"].append(
                f"allocator not back after empty_cache: in use {back['allocator_in_use_delta_bytes']:+d}, "
                f"held {back['allocator_held_delta_bytes']:+d} bytes from the baseline")
    ref = None
    if a.check:
        with open(a.check) as f:
            ref = json.load(f)
        c["outputs"] = compare_outputs(result, ref)
        if not c["outputs"]["identical"]:
            o = c["outputs"]
            c["failures"].append(
                f"outputs differ from {ref.get('label')}'s: {o['mismatches']} of {o['compared']} "
                f"differ (first at {o['first_mismatch']})" +
                ("" if o["same_count"] else f"; {len(outputs_of(result))} values here, "
                 f"{len(outputs_of(ref))} there"))
        ref_back = ref.get("memory", {}).get("after_empty_cache")
        if back is not None and ref_back is not None:
            limit = ref_back["driver_residue_bytes"] + DRIVER_SLACK
            c["driver_back"] = back["driver_residue_bytes"] <= limit
            c["driver_limit_bytes"] = limit
            if not c["driver_back"]:
                c["failures"].append(
                    f"driver memory not back: {back['driver_residue_bytes'] / MIB:.1f} MiB above "
                    f"the baseline, {ref.get('label')} left {ref_back['driver_residue_bytes'] / MIB:.1f} MiB")
    c["passed"] = not c["failures"]
    return c


def one_line(r):
    m = r.get("memory", {})
    parts = [f"{r['workload']} {r['label']}:", "ok" if r.get("ok") else "FAILED"]
    if "driver_peak_bytes" in m:
        parts.append(f"driver peak {m['driver_peak_bytes'] / MIB:.0f} MiB")
        parts.append(f"allocator peak held {m['allocator']['peak_held_bytes'] / MIB:.0f} MiB")
        d = m["allocator"].get("device_since_baseline")
        if d:
            parts.append(f"driver allocs/frees {d['device_allocs']}/{d['device_frees']}, "
                         f"device waits {d['device_waits']}"
                         + (f", stream waits {d['stream_waits']}" if "stream_waits" in d else ""))
    t = r.get("time", {})
    if t.get("count"):
        parts.append(f"median {t['median_s'] * 1000:.2f} ms/{t['unit']}")
    if "check" in r:
        parts.append("check passed" if r["check"]["passed"] else
                     "check FAILED: " + "; ".join(r["check"]["failures"]))
    if r.get("error"):
        parts.append(r["error"].strip().split("\n")[-1][:300])
    return " ".join(parts)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    result = dict(schema=SCHEMA, workload=a.workload, allocator=a.allocator,
                  allocator_kind=a.kind, arena_conf=a.conf if a.kind == "arena" else None,
                  label=a.label or a.allocator, dry_run=a.dry_run, argv=sys.argv[1:],
                  host=platform.node(), ok=False, error=None)
    code = 0
    try:
        run(a, result)
        result["ok"] = True
        if "check" in result and not result["check"]["passed"]:
            code = 1
    except Exception:
        result["error"] = traceback.format_exc()
        code = result.get("exit_code", 1)
    text = json.dumps(result, indent=1)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    print(one_line(result), file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
