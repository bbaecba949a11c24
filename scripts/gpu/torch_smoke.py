"""Issue 13: PyTorch on cuda-arena, on the GPU machine (torch with CUDA; no network needed).

    python3 scripts/gpu/torch_smoke.py .device/libcuda_arena.so

Installs libcuda_arena.so as torch's CUDA allocator (CUDAPluggableAllocator, every setter),
then: matmuls on two side streams reading a tensor of the default stream, which is freed while
they may still run (record_stream must hold its memory back from the default stream's next
user); a small training loop; the memory fraction through ctypes; stats through ctypes; and
empty_cache, after which the allocator holds nothing and the driver's free memory is back to
where it was. CUDA_ARENA_CONF selects the config (e.g. arena.use_cuda_mempool=1). Prints one
line per check and "torch smoke: PASS" at the end; exits non-zero at the first failure.
"""

import ctypes
import os
import sys
import time

import torch

LIB = os.path.abspath(sys.argv[1])
MIB = 1 << 20


def soft(cond, what):
    """A check of the warm-up run: reported, not fatal (the checked run repeats it)."""
    print(("warm  " if cond else "WARM-FAIL  ") + what, flush=True)


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        sys.exit(1)


class Stats(ctypes.Structure):
    """cuda_arena_stats, as include/cuda_arena.h declares it."""
    _fields_ = [("limit", ctypes.c_int64)] + [
        (n, ctypes.c_uint64)
        for n in (
            "in_use", "total_allocated", "max_in_use", "num_allocs", "num_reserves",
            "num_arena_extensions", "num_arena_shrinkages", "max_alloc_size",
            "requested_in_use", "reserved_bytes",
        )
    ]


lib = ctypes.CDLL(LIB)
lib.cuda_arena_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
lib.cuda_arena_torch_alloc.restype = ctypes.c_void_p
lib.cuda_arena_torch_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.cuda_arena_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                      ctypes.c_void_p]
lib.cuda_arena_last_error_code.restype = ctypes.c_int


def stats():
    s = Stats()
    check(lib.cuda_arena_torch_stats(0, ctypes.byref(s)) == 0, "stats through ctypes")
    return s


def address(name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


# --- install, before anything initialises CUDA's caching allocator ------------------------
pluggable = torch.cuda.memory.CUDAPluggableAllocator(
    LIB, "cuda_arena_torch_alloc", "cuda_arena_torch_free")
a = pluggable.allocator()
a.set_init_fn(address("cuda_arena_torch_init"))
a.set_reset_fn(address("cuda_arena_torch_empty_cache"))
a.set_memory_fraction_fn(address("cuda_arena_torch_set_memory_fraction"))
a.set_record_stream_fn(address("cuda_arena_torch_record_stream"))
torch.cuda.memory.change_current_allocator(pluggable)
torch.cuda.init()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
      f"CUDA_ARENA_CONF={os.environ.get('CUDA_ARENA_CONF', '')!r}", flush=True)


def release_everything():
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()  # cuBLAS keeps a workspace from the allocator per handle and stream
    torch.cuda.empty_cache()
    torch.cuda.synchronize()


def exercise(checked):
    """The workload: two side streams reading a freed tensor, then a training loop."""
    global model, opt
    # --- two streams reading a tensor the default stream frees --------------------------------
    torch.manual_seed(0)
    n = 4096
    x = torch.randn(n, n, device="cuda")
    reference1 = x @ x
    reference2 = x @ x.T
    torch.cuda.synchronize()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        for _ in range(20):  # long enough to still run when x is freed below
            y1 = x @ x
    with torch.cuda.stream(s2):
        for _ in range(20):
            y2 = x @ x.T
    x.record_stream(s1)
    x.record_stream(s2)
    x_ptr = x.data_ptr()
    del x  # freed on the default stream while s1 and s2 may still read it
    z = torch.full((n, n), float("nan"), device="cuda")  # the default stream's next block
    same_block = z.data_ptr() == x_ptr
    torch.cuda.synchronize()
    (check if checked else soft)(torch.allclose(y1, reference1) and torch.allclose(y2, reference2),
          "side streams read x intact while the default stream reused its memory "
          f"(z got x's block: {same_block})")
    del y1, y2, z, reference1, reference2

    # --- many allocations on two streams, with record_stream, from autograd too ---------------
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    side = torch.cuda.Stream()
    start = time.perf_counter()
    for step in range(50):
        batch = torch.randn(64 + step % 7 * 32, 1024, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            shadow = batch * 2  # a copy made on the side stream
        batch.record_stream(side)
        loss = model(batch).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.current_stream().wait_stream(side)
        shadow.record_stream(torch.cuda.current_stream())
        # Doubling is exact in floating point, so the two sums agree to rounding.
        got, want = shadow.sum().item(), 2 * batch.sum().item()
        if abs(got - want) > 1e-3 * (abs(want) + 1):
            check(False, f"step {step}: the side stream's copy is wrong ({got} != {want})")
        del batch, shadow, loss
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    s = stats()
    (check if checked else soft)(s.num_allocs > 500 and s.in_use > 0,
          f"50 training steps on two streams: {s.num_allocs} allocations, "
          f"{s.in_use / MIB:.1f} MiB in use, {s.total_allocated / MIB:.1f} MiB held, "
          f"{elapsed * 1000 / 50:.2f} ms per step")



# Warm up: the first run of the workload loads its kernels (lazily) and makes cuBLAS handles
# for its streams, which take memory from the driver once, outside any allocator; the
# baseline is what the driver reports free after that, with nothing of ours held.
exercise(checked=False)
del model, opt
release_everything()
free0, total = torch.cuda.mem_get_info()
base = stats()
print(f"baseline: {base.in_use} bytes in use (what torch keeps), {base.total_allocated} held, "
      f"{free0 / MIB:.0f} MiB free", flush=True)
exercise(checked=True)

# --- the memory fraction, through torch's setter ------------------------------------------
torch.cuda.set_per_process_memory_fraction(0.01, 0)  # 1 % of the device (~800 MiB of 80 GiB)
limit = int(0.01 * total)
big = lib.cuda_arena_torch_alloc(limit + 64 * MIB, 0, None)
check(not big and lib.cuda_arena_last_error_code() == 1,
      f"over the fraction's {limit / MIB:.0f} MiB: refused as out of memory (not a torch tensor: "
      "torch does not check a NULL from a pluggable allocator)")
torch.cuda.set_per_process_memory_fraction(1.0, 0)
ok = lib.cuda_arena_torch_alloc(limit + 64 * MIB, 0, None)
check(bool(ok), "with the fraction back at 1, it fits")
lib.cuda_arena_torch_free(ok, limit + 64 * MIB, 0, None)

# --- everything back ----------------------------------------------------------------------
del model, opt
release_everything()
s = stats()
free1, _ = torch.cuda.mem_get_info()
if s.total_allocated > base.total_allocated and os.environ.get("CUDA_ARENA_DIAGNOSE"):
    cuda = ctypes.CDLL("libcuda.so.1")
    print(f"diagnose: held {s.total_allocated}, sync {cuda.cuCtxSynchronize()}", flush=True)
    lib.cuda_arena_torch_empty_cache()
    print(f"diagnose: after a second empty_cache, held {stats().total_allocated}", flush=True)
    p = lib.cuda_arena_torch_alloc(1 << 20, 0, None)
    lib.cuda_arena_torch_free(p, 1 << 20, 0, None)
    torch.cuda.synchronize()
    lib.cuda_arena_torch_empty_cache()
    print(f"diagnose: after an alloc+free on the legacy stream, held {stats().total_allocated}",
          flush=True)
check(s.in_use == base.in_use,
      f"after empty_cache: in use as at the start ({s.in_use} bytes, {base.in_use} before)")
check(s.total_allocated <= base.total_allocated,
      f"after empty_cache: held as at the start ({s.total_allocated} bytes, "
      f"{base.total_allocated} before)")
check(free1 + 8 * MIB >= free0,
      f"the driver's free memory is back: {free0 / MIB:.0f} MiB before, {free1 / MIB:.0f} MiB "
      "after (8 MiB allowed for the driver's own)")
print("torch smoke: PASS", flush=True)
