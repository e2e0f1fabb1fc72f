"""Ray started in a thread of the driver (`study/ray_start.py`), with a real local Ray."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.study.ray_start import RayStart

pytestmark = pytest.mark.integration


def test_ray_started_in_a_thread_stays_up_until_closed(tmp_path: Path) -> None:
    """Tasks still run well after `ray.init` returned in the thread: the thread that started
    the local Ray lives on (had it ended, Linux would have ended Ray's GCS and raylet with it,
    and the second round of tasks below would hang until Ray gave up). `stop` shuts Ray down
    in that thread; `close` waits for it."""
    started = RayStart(None, tmp_path / "study", cpus=1)
    ray = started.wait()
    try:

        @ray.remote
        def pid() -> int:
            return os.getpid()

        first = ray.get(pid.remote(), timeout=60)
        time.sleep(3)
        again = ray.get(pid.remote(), timeout=30)
        assert first != os.getpid() and again != os.getpid()
        assert ray.is_initialized()
    finally:
        started.stop()
        started.close()
    assert not ray.is_initialized()


def test_a_local_rays_workers_run_at_the_drivers_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's own default runs its workers at nice 15, and a probe forked there inherits it:
    on a busy machine its throughput would measure the load. A local Ray the study starts runs
    them, and what they start, at the driver's niceness."""
    if os.nice(0) > 19 - 15:  # Ray's 15 on top would be capped at 19: the test could not fail
        pytest.skip("the test process runs at nice > 4")
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    started = RayStart(None, tmp_path / "study", cpus=1)
    ray = started.wait()
    try:

        @ray.remote
        def niceness() -> tuple[int, int]:
            import subprocess
            import sys

            child = subprocess.run(
                [sys.executable, "-c", "import os; print(os.nice(0))"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            return os.nice(0), int(child.stdout)

        assert ray.get(niceness.remote(), timeout=60) == (os.nice(0), os.nice(0))
    finally:
        started.stop()
        started.close()


SIGTERM_AFTER_RAY = """
import os, signal, sys, time
from pathlib import Path
from autotune.study import signals
from autotune.study.ray_start import RayStart

with signals.handled():
    early = RayStart(None, Path(sys.argv[1]), cpus=1)
    early.wait()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("no handler ran")
    except KeyboardInterrupt:
        print("the driver's handler ran")
    early.close()
"""


def test_ray_leaves_the_drivers_sigterm_handler_in_place(tmp_path: Path) -> None:
    """Ray's core worker, started by `ray.init` in the thread, sets a C++ SIGTERM handler (a
    crash report, then an abort in the CLI) over the driver's: the thread puts the driver's
    back at once, before the main thread is done opening the stores."""
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_AFTER_RAY, str(tmp_path / "study")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"},
    )
    assert done.stdout.strip() == "the driver's handler ran", done.stdout + done.stderr[-3000:]
    assert "SIGTERM received" not in done.stderr, done.stderr[-3000:]
