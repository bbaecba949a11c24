"""Issue 13: the PyTorch entry points of libcuda_arena.so, driven the way torch drives them.

torch.cuda.memory.CUDAPluggableAllocator loads cuda_arena_torch_alloc and cuda_arena_torch_free
by name and takes the other functions by address (set_init_fn, set_reset_fn,
set_memory_fraction_fn, set_record_stream_fn), then calls them through those pointers. This
does the same with ctypes, on the simulated backends (CUDA_ARENA_TORCH_BACKEND), one case per
process (the environment is read once): python3 torch_entry_points.py LIB CASE.
Run by bindings/c/tests/torch_entry_points.rs; prints "all checks passed" when every check
held, else exits non-zero naming the failed check.
"""

import ctypes
import sys
import threading

LIB, CASE = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(LIB)

OK, OOM, INVALID_CONFIG, INVALID_ARGUMENT, UNKNOWN_POINTER = 0, 1, 2, 3, 4
MIB = 1 << 20


class Stats(ctypes.Structure):
    """cuda_arena_stats, as the header declares it."""
    _fields_ = [("limit", ctypes.c_int64)] + [
        (name, ctypes.c_uint64)
        for name in (
            "in_use", "total_allocated", "max_in_use", "num_allocs", "num_reserves",
            "num_arena_extensions", "num_arena_shrinkages", "max_alloc_size",
            "requested_in_use", "reserved_bytes",
        )
    ]


def address(name):
    """What torch gets from ctypes.cast(getattr(lib, name), c_void_p).value."""
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


# The function pointers, as torch's std::functions call them.
alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
    address("cuda_arena_torch_alloc"))
free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
    address("cuda_arena_torch_free"))
init = ctypes.CFUNCTYPE(None, ctypes.c_int)(address("cuda_arena_torch_init"))
empty_cache = ctypes.CFUNCTYPE(None)(address("cuda_arena_torch_empty_cache"))
set_fraction = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(
    address("cuda_arena_torch_set_memory_fraction"))
record_stream = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
    address("cuda_arena_torch_record_stream"))

lib.cuda_arena_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
lib.cuda_arena_torch_stats.restype = ctypes.c_int
# cuda_arena_device_stats: six uint64 counters.
DeviceStats = ctypes.c_uint64 * 6
lib.cuda_arena_torch_device_stats.argtypes = [ctypes.c_int, ctypes.c_void_p]
lib.cuda_arena_torch_device_stats.restype = ctypes.c_int
lib.cuda_arena_last_error_code.restype = ctypes.c_int
lib.cuda_arena_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.cuda_arena_last_error.restype = ctypes.c_size_t


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def last_code():
    return lib.cuda_arena_last_error_code()


def last_message():
    buf = ctypes.create_string_buffer(1024)
    lib.cuda_arena_last_error(buf, len(buf))
    return buf.value.decode()


def stats(device=0):
    s = Stats()
    check(lib.cuda_arena_torch_stats(device, ctypes.byref(s)) == OK, f"stats: {last_message()}")
    return s


def stream(n):
    """A stream handle as torch passes it (any non-NULL value on the simulated backends)."""
    return ctypes.c_void_p(n)


DEFAULT = None  # torch's default stream is the NULL cudaStream_t


def driven_like_torch():
    init(1)
    p = alloc(4096, 0, DEFAULT)
    check(p, f"an allocation on the default stream: {last_message()}")
    check(p % 256 == 0, "256-byte aligned")
    ctypes.memset(p, 0x5A, 4096)  # host backend: real memory
    check(ctypes.string_at(p, 4096) == b"\x5a" * 4096, "the memory holds what was written")
    check(stats().in_use == 4096 and stats().num_allocs == 1, "stats count the block")
    free(p, 4096, 0, DEFAULT)
    check(stats().in_use == 0, "the free is counted")
    q = alloc(4096, 0, DEFAULT)
    check(q == p, "a block freed on a stream is reused on it at once")
    other = alloc(4096, 0, stream(0x7000))
    check(other and other != q, "another stream gets another block")
    record_stream(q, stream(0x7000))
    check(last_code() == OK, f"record_stream of a live block: {last_message()}")
    free(q, 4096, 0, DEFAULT)
    free(other, 4096, 0, stream(0x7000))
    check(alloc(0, 0, DEFAULT) is None and last_code() == OK, "size 0 is NULL, not an error")
    held = stats().total_allocated
    check(held > 0, "the arena keeps its regions cached")
    empty_cache()
    check(stats().total_allocated == 0, "empty_cache returns every idle region")
    check(stats().num_arena_shrinkages >= 1, "and counts it")


def memory_fraction_is_a_limit():
    init(1)
    set_fraction(0.25, 0)  # of the host backend's 4 GiB device: 1 GiB
    check(last_code() == OK, f"fraction: {last_message()}")
    p = alloc(768 * MIB, 0, DEFAULT)
    check(p, f"768 MiB fits under 1 GiB: {last_message()}")
    check(alloc(512 * MIB, 0, DEFAULT) is None, "1.25 GiB held would pass the limit")
    check(last_code() == OOM, "out of memory")
    check("memory fraction" in last_message(), last_message())
    free(p, 768 * MIB, 0, DEFAULT)
    q = alloc(1024 * MIB, 0, DEFAULT)
    check(q, f"1 GiB fits once idle memory went back: {last_message()}")
    free(q, 1024 * MIB, 0, DEFAULT)
    set_fraction(1.5, 0)
    check(last_code() == INVALID_ARGUMENT, "a fraction above 1 is refused")


def conf_is_applied():
    # CUDA_ARENA_CONF="arena.extend_strategy=1,arena.max_mem=1048576"
    p = alloc(512 * 1024, 0, DEFAULT)
    check(p, last_message())
    check(stats().total_allocated == 512 * 1024, "extend_strategy=1: a region of the request")
    check(stats().limit == MIB, "max_mem is the limit")
    check(alloc(MIB, 0, DEFAULT) is None and last_code() == OOM, "max_mem binds")
    free(p, 512 * 1024, 0, DEFAULT)


def bad_conf_fails_every_allocation():
    # CUDA_ARENA_CONF="arena.extend_strategy=1,arena.max_mem=8GB"
    init(1)
    for _ in range(3):
        check(alloc(4096, 0, DEFAULT) is None, "no allocation succeeds")
        check(last_code() == OOM, f"out of memory: {last_code()}")
        check("arena.max_mem" in last_message(), f"names the key: {last_message()}")
        check("CUDA_ARENA_CONF" in last_message(), last_message())
    s = Stats()
    check(lib.cuda_arena_torch_stats(0, ctypes.byref(s)) == INVALID_CONFIG, "stats say why")


def refused_conf_fails_every_allocation():
    # CUDA_ARENA_CONF="arena.use_virtual_memory=1,arena.vm_page_size_bytes=256": it parses,
    # but the device's arena cannot be made with it.
    init(1)
    for _ in range(3):
        check(alloc(4096, 0, DEFAULT) is None, "no allocation succeeds")
        check("arena.vm_page_size_bytes" in last_message(), f"names the key: {last_message()}")
    s = Stats()
    check(lib.cuda_arena_torch_stats(0, ctypes.byref(s)) != 0, "stats fail too")


def bad_backend_fails_every_allocation():
    # CUDA_ARENA_TORCH_BACKEND=gpu
    check(alloc(4096, 0, DEFAULT) is None and last_code() == OOM, "no allocation succeeds")
    check("CUDA_ARENA_TORCH_BACKEND" in last_message(), last_message())


def errors_are_codes_never_crashes():
    p = alloc(4096, 0, DEFAULT)
    free(p + 256, 4096, 0, DEFAULT)
    check(last_code() == UNKNOWN_POINTER, "an interior pointer is unknown")
    free(p, 4096, 0, DEFAULT)
    free(p, 4096, 0, DEFAULT)
    check(last_code() == UNKNOWN_POINTER, "a double free is unknown")
    free(None, 0, 0, DEFAULT)
    check(last_code() == OK, "freeing NULL is a no-op")
    record_stream(0xdead000, stream(0x7000))
    check(last_code() == UNKNOWN_POINTER, "record_stream of a pointer no device gave out")
    check(alloc(4096, -1, DEFAULT) is None and last_code() == INVALID_ARGUMENT, "device -1")
    check(alloc(4096, 1, DEFAULT) is None and last_code() == INVALID_ARGUMENT, "no device 1")
    check(alloc(1 << 62, 0, DEFAULT) is None and last_code() == OOM, "more than the device")
    check(lib.cuda_arena_torch_stats(0, None) == INVALID_ARGUMENT, "stats into NULL")
    d = DeviceStats()
    check(lib.cuda_arena_torch_device_stats(0, None) == INVALID_ARGUMENT, "device stats into NULL")
    for device in (-1, 1, 64, 2**31 - 1, -(2**31)):
        check(lib.cuda_arena_torch_device_stats(device, ctypes.byref(d)) == INVALID_ARGUMENT,
              f"device stats of device {device}")
        check(list(d) == [0] * 6, "a refused call writes nothing")
    check(lib.cuda_arena_torch_device_stats(0, ctypes.byref(d)) == OK and d[0] > 0,
          f"device stats: {last_message()}")
    for f in (-0.5, float("nan"), float("inf")):
        set_fraction(f, 0)
        check(last_code() == INVALID_ARGUMENT, f"fraction {f}")
    check(stats().in_use == 0, "nothing leaked")


def threads_share_the_device():
    errors = []

    def worker(n):
        s = stream(0x1000 * (n + 1))
        for i in range(2000):
            size = 256 * (1 + (i * 7 + n) % 64)
            p = alloc(size, 0, s)
            if not p:
                errors.append(last_message())
                return
            free(p, size, 0, s)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, f"every allocation succeeded: {errors[:1]}")
    check(stats().in_use == 0, "every block came back")
    check(stats().num_allocs == 8 * 2000, "every allocation was counted")


def the_c_abi_shares_the_allocator():
    lib.cuda_arena_create.restype = ctypes.c_void_p
    lib.cuda_arena_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_char_p, ctypes.c_size_t]
    lib.cuda_arena_get_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(Stats)]
    lib.cuda_arena_destroy.argtypes = [ctypes.c_void_p]
    p = alloc(8192, 0, DEFAULT)
    err = ctypes.create_string_buffer(256)
    h = lib.cuda_arena_create(b"host", b"Cuda", 0, None, None, 0, err, len(err))
    check(h, err.value.decode())
    s = Stats()
    check(lib.cuda_arena_get_stats(h, ctypes.byref(s)) == OK, "stats")
    check(s.in_use == 8192, "the handle sees torch's block: one shared allocator per device")
    lib.cuda_arena_destroy(h)
    free(p, 8192, 0, DEFAULT)


def virtual_backend_serves_large_sizes():
    # CUDA_ARENA_TORCH_BACKEND=virtual: addresses only (80 GiB), never touched.
    ps = [alloc(10 << 30, 0, stream(0x9000)) for _ in range(4)]
    check(all(ps), f"40 GiB on an 80 GiB device: {last_message()}")
    for p in ps:
        free(p, 10 << 30, 0, stream(0x9000))
    check(stats().in_use == 0, "all back")


CASES = {f.__name__: f for f in (
    driven_like_torch, memory_fraction_is_a_limit, conf_is_applied,
    bad_conf_fails_every_allocation, bad_backend_fails_every_allocation,
    refused_conf_fails_every_allocation,
    errors_are_codes_never_crashes, threads_share_the_device, the_c_abi_shares_the_allocator,
    virtual_backend_serves_large_sizes,
)}

CASES[CASE]()
print("all checks passed")
