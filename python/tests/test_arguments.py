"""Arguments of every type and size: each bad one is an ``ERR_ARENA_INVALID_ARGUMENT`` naming
the argument and the value, never a crash. One process: none of these reads a config."""

from __future__ import annotations

import os
import sys
import unittest

from support import FAKE_TORCH, expect_error

os.environ["CUDA_ARENA_TORCH_BACKEND"] = "host"
os.environ.pop("CUDA_ARENA_CONF", None)
sys.path.insert(0, FAKE_TORCH)

import cuda_arena  # noqa: E402
import cuda_arena.torch as ct  # noqa: E402

BAD_DEVICES = [-1, 64, 2**31, 2**100, -(2**100), True, 1.5, float("nan"), "cpu", "cuda:x",
               "cuda:-1", "cuda:1:2", "cuda:٣", "", b"cuda", [0], object()]


class Arguments(unittest.TestCase):
    def test_devices_are_ints_cuda_strings_or_torch_devices(self) -> None:
        import torch

        for device in (None, 0, "cuda", "cuda:0", torch.device("cuda", 0), torch.device("cuda")):
            with self.subTest(device=device):
                self.assertEqual(ct.memory_stats(device)["NumAllocs"], 0)

    def test_every_other_device_is_an_invalid_argument_naming_it(self) -> None:
        import torch

        for device in BAD_DEVICES + [torch.device("cpu")]:
            with self.subTest(device=device):
                expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.memory_stats(device), "device")
                expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.stop_recording(device), "device")
                expect_error("ERR_ARENA_INVALID_ARGUMENT",
                             lambda: ct.start_recording("/tmp/x.jsonl", device), "device")

    def test_a_device_the_simulated_machine_lacks_is_refused_by_the_library(self) -> None:
        expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.memory_stats(1), "device 1")

    def test_recording_paths_must_be_paths(self) -> None:
        for path in (None, 5, 2**100, 1.5, [b"x"], "", "a\0b", b"a\0b", "/tmp/\ud800"):
            with self.subTest(path=path):
                expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.start_recording(path), "path")
                self.assertFalse(ct._recording.recording(0))

    def test_a_path_that_cannot_be_created_is_refused_by_the_library(self) -> None:
        expect_error("ERR_ARENA_INVALID_ARGUMENT",
                     lambda: ct.start_recording("/no/such/directory/trace.jsonl"), "/no/such/directory")
        self.assertFalse(ct._recording.recording(0))

    @unittest.skipUnless(hasattr(os, "mkfifo"), "no FIFOs here")
    def test_a_fifo_no_process_reads_is_refused_at_once(self) -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fifo")
            os.mkfifo(path)
            # Before, the library's open waited for a reader: this call never returned.
            expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.start_recording(path),
                         "no process has open for reading")
            self.assertFalse(ct._recording.recording(0))

    def test_stopping_without_a_recording_is_refused(self) -> None:
        expect_error("ERR_ARENA_INVALID_ARGUMENT", ct.stop_recording, "not being recorded")

    def test_replay_arguments(self) -> None:
        for path in (None, 5, "", "/tmp/\ud800"):
            with self.subTest(path=path):
                expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: cuda_arena.replay(path), "path")
        for backend in (None, 5, "gpu", "a\0", "\ud800", "cuda\udcff"):
            with self.subTest(backend=backend):
                expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: cuda_arena.replay("/dev/null", backend=backend))
        expect_error("ERR_ARENA_INVALID_CONFIG", lambda: cuda_arena.replay("/dev/null", {"max_mem": "8GB"}),
                     "arena.max_mem")
        for config in ({"max_mem": "\ud800"}, {"\ud800": 1}, {"max_mem": "1\udcff"}):
            with self.subTest(config=config):
                expect_error("ERR_ARENA_INVALID_CONFIG", lambda: cuda_arena.replay("/dev/null", config), "UTF-8")
        expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: cuda_arena.replay("/no/such/file.jsonl"),
                     "/no/such/file.jsonl")


if __name__ == "__main__":
    unittest.main()
