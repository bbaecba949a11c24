"""``cuda_arena.torch.install()`` with torch's API (the stand-in torch, fake_torch/): the
allocator torch gets, the entry points torch then calls through their addresses, on the
``host`` backend, and the ways installing fails."""

from __future__ import annotations

import ctypes

from support import MIB, ChildCase, expect_error, run_case

import cuda_arena
import cuda_arena.torch as ct

OTHER_STREAM = 0x7000


def installed():  # type: ignore[no-untyped-def]
    import torch

    allocator = ct.install()
    assert torch.FAKE.current is allocator, "torch's current allocator is cuda-arena's"
    assert allocator.path == cuda_arena.library_path()
    torch.cuda.init()  # torch's lazy init calls init_fn
    return allocator.allocator()


def case_torch_calls_every_entry_point_through_its_address() -> None:
    a = installed()
    assert set(a.fns) == {"alloc", "free", "init", "reset", "memory_fraction", "record_stream"}
    p = a.malloc(4096, 0, None)
    assert p and p % 256 == 0, p
    ctypes.memset(p, 0x5A, 4096)  # host backend: real memory
    assert ctypes.string_at(p, 4096) == b"\x5a" * 4096
    s = ct.memory_stats(0)
    assert s["InUse"] == s["allocated_bytes.all.current"] == 4096, s
    assert s["NumAllocs"] == s["allocation.all.allocated"] == 1, s
    a.free(p, 4096, 0, None)
    q = a.malloc(4096, 0, None)
    assert q == p, "a block freed on a stream is reused on it at once"
    other = a.malloc(4096, 0, OTHER_STREAM)
    assert other and other != q, "another stream gets another block"
    a.record_stream(q, OTHER_STREAM)
    a.free(q, 4096, 0, None)
    a.free(other, 4096, 0, OTHER_STREAM)
    s = ct.memory_stats()
    assert s["InUse"] == 0 and s["allocated_bytes.all.peak"] == 8192, s
    assert ct.memory_reserved() > 0, "the arena keeps its memory cached"
    a.empty_cache()  # torch.cuda.empty_cache()
    s = ct.memory_stats("cuda:0")
    assert s["reserved_bytes.all.current"] == s["TotalAllocated"] == 0, s
    assert s["segment.all.current"] == 0, s
    # The pages went back to the driver, after one wait for the device's work (on the host
    # backend, the call that would wait on a GPU).
    assert s["num_device_alloc"] >= 1 and s["num_device_free"] >= 1, s
    assert s["num_sync_all_streams"] == 1, s


def case_the_memory_fraction_limits_what_the_device_holds() -> None:
    a = installed()
    a.set_memory_fraction(0.25, 0)  # of the host backend's 4 GiB: 1 GiB
    p = a.malloc(768 * MIB, 0, None)
    assert p, "768 MiB fits"
    assert a.malloc(512 * MIB, 0, None) is None, "1.25 GiB held would pass the limit"
    a.free(p, 768 * MIB, 0, None)
    q = a.malloc(1024 * MIB, 0, None)
    assert q, "1 GiB fits once idle memory went back"
    a.free(q, 1024 * MIB, 0, None)


def case_stats_are_the_c_stats() -> None:
    a = installed()
    ps = [a.malloc(size, 0, None) for size in (1000, 5000, 70000)]
    lib = ctypes.CDLL(cuda_arena.library_path())
    from cuda_arena._library import Stats

    raw = Stats()
    assert lib.cuda_arena_torch_stats(0, ctypes.byref(raw)) == 0
    s = ct.memory_stats(0)
    assert s["RequestedInUse"] == s["requested_bytes.all.current"] == raw.requested_in_use == 76000
    for key, field in (("InUse", "in_use"), ("TotalAllocated", "total_allocated"),
                       ("MaxInUse", "max_in_use"), ("NumAllocs", "num_allocs"),
                       ("Limit", "limit"), ("MaxAllocSize", "max_alloc_size"),
                       ("NumArenaExtensions", "num_arena_extensions")):
        assert s[key] == getattr(raw, field), (key, s[key], getattr(raw, field))
    from cuda_arena._library import DeviceStats

    device = DeviceStats()
    assert lib.cuda_arena_torch_device_stats(0, ctypes.byref(device)) == 0
    s = ct.memory_stats(0)
    for key, field in (("num_device_alloc", "raw_allocs"), ("num_device_free", "raw_frees"),
                       ("num_sync_all_streams", "device_waits")):
        assert s[key] == getattr(device, field), (key, s[key], getattr(device, field))
    assert device.raw_bytes_outstanding == s["TotalAllocated"] > 0, (device.raw_bytes_outstanding, s)
    assert ct.memory_allocated(0) == raw.in_use and ct.max_memory_allocated(0) == raw.max_in_use
    for p, size in zip(ps, (1000, 5000, 70000)):
        a.free(p, size, 0, None)


def case_install_after_torch_initialised_cuda_is_refused() -> None:
    import torch

    torch.cuda.init()
    expect_error("ERR_TORCH_ALLOCATOR_INITIALIZED", ct.install, "before the first CUDA tensor")
    assert torch.FAKE.current is None and not ct.is_installed(), "torch's allocator is unchanged"


def case_torchs_own_refusal_is_the_same_error() -> None:
    import torch

    # torch initialised its allocator where is_initialized() does not see it (another thread).
    torch.cuda.is_initialized = lambda: False
    torch.FAKE.initialized = True
    expect_error("ERR_TORCH_ALLOCATOR_INITIALIZED", ct.install)
    assert not ct.is_installed()


def case_a_second_install_returns_the_same_allocator() -> None:
    first = ct.install({"arena.extend_strategy": 1})
    assert ct.install() is first and ct.install("arena.extend_strategy=1") is first
    expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.install({"arena.extend_strategy": 0}),
                 "installed already")


def case_torch_without_cuda_is_err_no_cuda() -> None:
    import torch

    torch.FAKE.cuda_built = False
    expect_error("ERR_NO_CUDA", ct.install, "without CUDA")


def case_failures_are_codes_never_crashes() -> None:
    a = installed()
    p = a.malloc(4096, 0, None)
    a.free(p + 256, 4096, 0, None)  # interior pointer: refused, reported on stderr
    a.free(p, 4096, 0, None)
    a.free(p, 4096, 0, None)  # double free
    a.free(None, 0, 0, None)
    a.record_stream(0xDEAD000, OTHER_STREAM)
    assert a.malloc(4096, -1, None) is None and a.malloc(4096, 1, None) is None
    assert a.malloc(1 << 62, 0, None) is None
    for f in (-0.5, float("nan"), float("inf"), 1.5):
        a.set_memory_fraction(f, 0)
    assert a.malloc(0, 0, None) is None
    assert ct.memory_stats()["InUse"] == 0, "nothing leaked"


def case_the_virtual_backend_serves_a_large_device() -> None:
    a = installed()
    ps = [a.malloc(10 << 30, 0, 0x9000) for _ in range(4)]
    assert all(ps), "40 GiB on an 80 GiB simulated device"
    for p in ps:
        a.free(p, 10 << 30, 0, 0x9000)
    assert ct.memory_stats()["InUse"] == 0


class Install(ChildCase):
    file = __file__

    def test_torch_calls_every_entry_point_through_its_address(self) -> None:
        self.child("case_torch_calls_every_entry_point_through_its_address")

    def test_the_memory_fraction_limits_what_the_device_holds(self) -> None:
        self.child("case_the_memory_fraction_limits_what_the_device_holds")

    def test_memory_stats_are_the_c_stats_under_both_names(self) -> None:
        self.child("case_stats_are_the_c_stats")

    def test_install_after_torch_initialised_cuda_is_refused_and_changes_nothing(self) -> None:
        self.child("case_install_after_torch_initialised_cuda_is_refused")

    def test_torchs_own_already_initialised_refusal_is_the_same_error(self) -> None:
        self.child("case_torchs_own_refusal_is_the_same_error")

    def test_a_second_install_returns_the_same_allocator_and_refuses_another_config(self) -> None:
        self.child("case_a_second_install_returns_the_same_allocator")

    def test_torch_without_cuda_is_err_no_cuda(self) -> None:
        self.child("case_torch_without_cuda_is_err_no_cuda")

    def test_bad_pointers_devices_sizes_and_fractions_fail_without_crashing(self) -> None:
        r = self.child("case_failures_are_codes_never_crashes")
        self.assertIn("ERR_ARENA_UNKNOWN_POINTER", r.stderr)

    def test_the_virtual_backend_serves_a_large_device(self) -> None:
        self.child("case_the_virtual_backend_serves_a_large_device", backend="virtual")


if __name__ == "__main__":
    run_case(globals())
