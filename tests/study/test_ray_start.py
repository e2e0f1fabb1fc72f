"""Ray started in a thread of the driver (`study/ray_start.py`), with a real local Ray."""

from __future__ import annotations

import os
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
