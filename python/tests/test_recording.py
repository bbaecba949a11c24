"""``start_recording`` / ``stop_recording``: torch's traffic on a device, written as the trace
``cuda-arena replay`` reads, with the live run's peak. The command-line check runs where the
test is given Node and the built CLI (``CUDA_ARENA_TEST_NODE``, ``CUDA_ARENA_TEST_CLI``; CI
sets ``CUDA_ARENA_REQUIRE_CLI=1`` so that it cannot be skipped there)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
import unittest
from typing import Dict, List, Tuple

from support import ChildCase, expect_error, run_case

import cuda_arena
import cuda_arena.torch as ct

STREAMS = (None, 0x7000, 0x8000)  # torch's default stream and two others


def workload(a, seed: int = 28) -> Tuple[int, int]:  # type: ignore[no-untyped-def]
    """Seeded allocations and frees on three streams, through torch's function pointers.
    Returns (the peak of requested bytes live, the allocations made)."""
    rng = random.Random(seed)
    live: List[Tuple[int, int, object]] = []
    in_use = peak = allocs = 0
    for _ in range(600):
        if live and rng.random() < 0.45:
            p, size, stream = live.pop(rng.randrange(len(live)))
            a.free(p, size, 0, stream)
            in_use -= size
        else:
            size = rng.choice((1, 255, 4096, 70_000, 1 << 20)) + rng.randrange(512)
            stream = rng.choice(STREAMS)
            p = a.malloc(size, 0, stream)
            assert p, size
            live.append((p, size, stream))
            allocs += 1
            in_use += size
            peak = max(peak, in_use)
    for p, size, stream in live:
        a.free(p, size, 0, stream)
    return peak, allocs


def installed():  # type: ignore[no-untyped-def]
    import torch

    ct.install()
    torch.cuda.init()
    return torch.FAKE.current.allocator()


def case_record(path: str, summary: str) -> None:
    a = installed()
    before = a.malloc(4096, 0, None)  # live before the recording: not in the trace
    ct.start_recording(path)
    expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.start_recording(path + ".2"), "already")
    a.free(before, 4096, 0, None)  # its free is left out
    peak, allocs = workload(a)
    assert ct.stop_recording() == path
    expect_error("ERR_ARENA_INVALID_ARGUMENT", ct.stop_recording, "not being recorded")
    with open(summary, "w") as f:
        json.dump({"peak": peak, "allocs": allocs, "live": ct.memory_stats()}, f)


def case_record_until_exit(path: str) -> None:
    a = installed()
    ct.start_recording(path, device="cuda:0")
    workload(a, seed=1)
    # No stop_recording: the exit stops it, with everything written.


def case_refused_while_another_process_records(path: str) -> None:
    installed()
    expect_error("ERR_ARENA_INVALID_ARGUMENT", lambda: ct.start_recording(path), "another process")
    expect_error("ERR_ARENA_INVALID_ARGUMENT", ct.stop_recording, "not being recorded")


def trace_lines(path: str) -> List[Dict[str, object]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class Recording(ChildCase):
    file = __file__

    # One recording, made once, read by every test.
    dir: tempfile.TemporaryDirectory
    trace: str
    summary: Dict[str, int]

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.TemporaryDirectory()
        cls.trace = os.path.join(cls.dir.name, "torch.jsonl")
        summary = os.path.join(cls.dir.name, "summary.json")
        cls("test_the_trace_holds_torchs_allocations_and_frees_with_their_streams").child(
            "case_record", args=(cls.trace, summary)
        )
        with open(summary) as f:
            cls.summary = json.load(f)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.dir.cleanup()

    def test_the_trace_holds_torchs_allocations_and_frees_with_their_streams(self) -> None:
        lines = trace_lines(self.trace)
        allocs = [line for line in lines if line["op"] == "alloc"]
        frees = [line for line in lines if line["op"] == "free"]
        self.assertEqual(len(allocs), self.summary["allocs"])
        self.assertEqual(len(frees), len(allocs), "every block was freed; the earlier one's free left out")
        self.assertEqual(len({line["stream"] for line in allocs}), len(STREAMS))

    def test_replaying_it_from_python_gives_the_live_peak(self) -> None:
        report = cuda_arena.replay(self.trace)
        run = report["runs"][0]  # type: ignore[index]
        self.assertEqual(run["peakRequested"], self.summary["peak"])  # type: ignore[index]
        self.assertEqual(run["liveAtEnd"], 0)  # type: ignore[index]
        self.assertEqual(run["stats"]["NumAllocs"], self.summary["allocs"])  # type: ignore[index]
        other = cuda_arena.replay(self.trace, {"arena.extend_strategy": 1})["runs"][0]  # type: ignore[index]
        self.assertEqual(other["peakRequested"], self.summary["peak"])  # type: ignore[index]

    def test_the_cli_replays_it_with_the_live_peak_and_draws_it(self) -> None:
        node, cli = os.environ.get("CUDA_ARENA_TEST_NODE"), os.environ.get("CUDA_ARENA_TEST_CLI")
        if not (node and cli):
            if os.environ.get("CUDA_ARENA_REQUIRE_CLI") == "1":
                self.fail("CUDA_ARENA_TEST_NODE and CUDA_ARENA_TEST_CLI are required here")
            raise unittest.SkipTest("no CUDA_ARENA_TEST_NODE / CUDA_ARENA_TEST_CLI")
        page = os.path.join(self.dir.name, "page.html")
        r = subprocess.run(
            [node, cli, "replay", self.trace, "--backend", "virtual", "--json", "--html", page],
            capture_output=True, text=True, timeout=120,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        run = json.loads(r.stdout)["runs"][0]
        self.assertEqual(run["peakRequested"], self.summary["peak"])
        self.assertEqual(run["stats"]["numAllocs"], self.summary["allocs"])
        with open(page, encoding="utf-8") as f:
            self.assertIn("<html", f.read(4096).lower())


class RecordingAtExit(ChildCase):
    file = __file__

    def test_a_recording_still_on_at_exit_is_stopped_with_everything_written(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "exit.jsonl")
            self.child("case_record_until_exit", args=(trace,))
            lines = trace_lines(trace)
            allocs = sum(1 for line in lines if line["op"] == "alloc")
            self.assertEqual(allocs, sum(1 for line in lines if line["op"] == "free"))
            self.assertGreater(allocs, 300)


class RecordingElsewhere(ChildCase):
    file = __file__

    @unittest.skipUnless(os.name == "posix", "flock is POSIX")
    def test_a_file_another_process_records_to_is_refused_and_left_whole(self) -> None:
        import fcntl

        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "theirs.jsonl")
            with open(trace, "w") as f:
                f.write("theirs\n")
                f.flush()
                # What a recording in this process holds on its file, seen from the child.
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.child("case_refused_while_another_process_records", args=(trace,))
            with open(trace) as f:
                self.assertEqual(f.read(), "theirs\n")


if __name__ == "__main__":
    run_case(globals())
