"""Runs every test of the installed package and ends with one line, ``python tests: N passed,
M failed`` (skips are neither; .ci/run adds the counts to its own):

    python python/tests/run.py

Run it with the Python of a virtual environment where the wheel is installed
(docs/packaging.md); the tests import ``cuda_arena`` from there, never from the source tree.
"""

from __future__ import annotations

import os
import sys
import unittest


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
    print(f"python tests: {passed} passed, {failed} failed")
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
