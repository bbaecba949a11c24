"""Configs: ``install(config=...)``, ``CUDA_ARENA_CONF``, and every way a config can be wrong,
each an ``ERR_ARENA_INVALID_CONFIG`` naming the key, with torch's allocator left as it was."""

from __future__ import annotations

from support import MIB, ChildCase, expect_error, run_case

import cuda_arena.torch as ct


def check_applied() -> None:
    """extend_strategy=1 and max_mem=1 MiB are in force."""
    import torch

    a = torch.FAKE.current.allocator()
    p = a.malloc(512 * 1024, 0, None)
    assert p, "512 KiB fits"
    s = ct.memory_stats(0)
    assert s["TotalAllocated"] == 512 * 1024, f"extend_strategy=1: a region of the request, {s}"
    assert s["Limit"] == MIB, s
    assert a.malloc(MIB, 0, None) is None, "max_mem binds"
    a.free(p, 512 * 1024, 0, None)


def case_a_mapping_is_applied() -> None:
    ct.install({"arena.extend_strategy": 1, "max_mem": MIB, "arena.use_virtual_memory": "0"})
    check_applied()


def case_a_string_is_applied() -> None:
    ct.install("arena.extend_strategy=1,arena.max_mem=1048576,arena.use_virtual_memory=0")
    check_applied()


def case_the_variable_is_applied() -> None:
    ct.install()
    check_applied()


def case_config_replaces_the_variable() -> None:
    ct.install({"arena.extend_strategy": 1, "arena.max_mem": MIB, "arena.use_virtual_memory": 0})
    check_applied()


def case_bad_config_is_refused(key: str, given: str) -> None:
    import torch

    config = eval(given)  # the test's literal: a dict or a str
    expect_error("ERR_ARENA_INVALID_CONFIG", lambda: ct.install(config), key)
    assert torch.FAKE.current is None and not ct.is_installed(), "torch's allocator is unchanged"


def case_a_bad_variable_is_refused_by_every_call() -> None:
    import torch

    for _ in range(2):
        expect_error("ERR_ARENA_INVALID_CONFIG", ct.install, "arena.max_mem", "CUDA_ARENA_CONF")
    expect_error("ERR_ARENA_INVALID_CONFIG", ct.memory_stats, "arena.max_mem")
    expect_error("ERR_ARENA_INVALID_CONFIG", lambda: ct.start_recording("/tmp/x.jsonl"), "arena.max_mem")
    assert torch.FAKE.current is None


def case_a_config_the_device_refuses_raises_at_install_with_a_device() -> None:
    import torch

    expect_error(
        "ERR_ARENA_INVALID_CONFIG",
        lambda: ct.install({"arena.use_virtual_memory": 1, "arena.vm_page_size_bytes": 256}, device=0),
        "arena.vm_page_size_bytes",
    )
    assert torch.FAKE.current is None


def case_a_bad_backend_is_refused() -> None:
    expect_error("ERR_ARENA_INVALID_CONFIG", ct.install, "CUDA_ARENA_TORCH_BACKEND")


def case_the_config_cannot_change_once_read() -> None:
    ct.memory_stats(0)  # reads the setup: CUDA_ARENA_CONF unset
    expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.install({"arena.extend_strategy": 1}),
                 "read already")
    ct.install()  # the config read is fine


class Config(ChildCase):
    file = __file__

    def test_a_mapping_configures_the_allocator_with_or_without_the_arena_prefix(self) -> None:
        self.child("case_a_mapping_is_applied")

    def test_a_cuda_arena_conf_string_configures_the_allocator(self) -> None:
        self.child("case_a_string_is_applied")

    def test_cuda_arena_conf_configures_the_allocator_when_install_has_none(self) -> None:
        self.child("case_the_variable_is_applied", env={
            "CUDA_ARENA_CONF": "arena.extend_strategy=1,arena.max_mem=1048576,arena.use_virtual_memory=0"})

    def test_install_config_replaces_cuda_arena_conf(self) -> None:
        self.child("case_config_replaces_the_variable", env={"CUDA_ARENA_CONF": "arena.max_mem=8GB"})

    def test_every_bad_config_is_err_arena_invalid_config_naming_the_key(self) -> None:
        bad = {
            "arena.max_mem": [  # the library's checks
                '{"arena.max_mem": "8GB"}', '{"arena.max_mem": -1}', '{"arena.max_mem": 2**80}',
                '"arena.max_mem=8GB"', '{"arena.max_mem": True}', '{"arena.max_mem": 1.5}',
                '{"arena.max_mem": None}', '{"max_mem": [1]}', '{"arena.max_mem": "1,2"}',
            ],
            "arena.no_such_key": ['{"arena.no_such_key": 1}', '"arena.no_such_key=1"'],
            "arena.extend_strategy": ['{"arena.extend_strategy": 2}', '"arena.extend_strategy=1 "'],
            "=": ['{"arena.a=b": 1}'],
            "key": ['{1: 2}', '{"": 1}'],
            "mapping": ['5', '[("arena.max_mem", 1)]'],
            "NUL": ['"arena.max_mem=1\\0"'],
            "ep.": ['"ep.cuda.arena.max_mem=1"'],
            # A lone surrogate has no UTF-8 form: a coded error, not UnicodeEncodeError.
            "UTF-8": ['{"arena.max_mem": "\\ud800"}', '"arena.max_mem=\\ud800"', '{"\\ud800": 1}'],
        }
        for key, configs in bad.items():
            for given in configs:
                with self.subTest(config=given):
                    self.child("case_bad_config_is_refused", args=(key, given))

    def test_a_bad_cuda_arena_conf_is_refused_by_install_stats_and_recording(self) -> None:
        r = self.child("case_a_bad_variable_is_refused_by_every_call",
                       env={"CUDA_ARENA_CONF": "arena.extend_strategy=1,arena.max_mem=8GB"})
        self.assertEqual(r.stderr.count("CUDA_ARENA_CONF is invalid at arena.max_mem"), 1)

    def test_install_with_a_device_raises_for_a_config_that_device_refuses(self) -> None:
        self.child("case_a_config_the_device_refuses_raises_at_install_with_a_device")

    def test_a_bad_backend_variable_is_refused(self) -> None:
        self.child("case_a_bad_backend_is_refused", backend="gpu")

    def test_the_config_cannot_change_once_the_library_read_it(self) -> None:
        self.child("case_the_config_cannot_change_once_read")


if __name__ == "__main__":
    run_case(globals())
