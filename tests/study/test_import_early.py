"""The importances' imports (Optuna's `optuna.importance`, which imports scikit-learn for
fANOVA, ~1 s) are done in a thread while the trials run, not at the study's end
(benchmarks/RESULTS.md, Study overhead)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys, time
from autotune.study.importance import import_early
assert "optuna.importance" not in sys.modules
t0 = time.perf_counter()
thread = import_early()
started = time.perf_counter() - t0
thread.join(60)
print(started, "optuna.importance" in sys.modules, not thread.is_alive())
"""


@pytest.mark.integration  # a fresh interpreter, where nothing imported optuna.importance yet
def test_the_importances_are_imported_in_a_thread_of_their_own() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    started, imported, finished = done.stdout.split()
    # the caller does not wait for the import (it takes ~1 s), and the thread does it
    assert float(started) < 0.2, started
    assert imported == "True" and finished == "True"
