"""Ray processes a killed driver left behind are ended before a study starts its Ray in the same
folder; a live Ray's, and anything else, are not. Real processes named as Ray names them, a real
local Ray."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.process.orphans import end_orphans, orphans_under

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc"),
]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is ended, waiting for its reaper


def wait_gone(pid: int, timeout: float = 10) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def spawn() -> Iterator[object]:
    started: list[int] = []

    def go(name: str, holds: Path, parent: str | None = None) -> int:
        """A `sleep` named `name` holding `holds` open, its parent gone (re-parented to init),
        or, with `parent`, a live parent process of that name; its pid."""
        pidfile = holds.with_suffix(".pid")
        quiet = "</dev/null >/dev/null 2>&1"
        child = f'(exec -a "{name}" sleep 300 3>>"{holds}" {quiet}) & echo $! > "{pidfile}"'
        if parent is not None:
            child = f"(exec -a \"{parent}\" bash -c '{child}; wait' {quiet}) &"
        subprocess.run(["bash", "-c", child], check=True, timeout=30)
        for _ in range(100):
            if pidfile.is_file() and pidfile.read_text().strip():
                break
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        started.append(pid)
        assert alive(pid)
        return pid

    yield go
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def test_only_a_dead_rays_processes_under_the_folder_are_ended(tmp_path: Path, spawn) -> None:
    root, elsewhere = tmp_path / "ray", tmp_path / "other"
    root.mkdir()
    elsewhere.mkdir()
    (root / "session_x").mkdir()
    orphan = spawn("ray::DashboardAgent", root / "session_x" / "agent.log")
    outside = spawn("ray::RuntimeEnvAgent", elsewhere / "agent.log")
    not_ray = spawn("python", root / "mine.log")
    live = spawn("ray::IDLE", root / "worker.log", parent="raylet --node")

    assert orphans_under(root) == [orphan]
    assert end_orphans(root) == [orphan]
    assert wait_gone(orphan)
    for pid in (outside, not_ray, live):
        assert alive(pid)
    assert orphans_under(root) == []


def test_a_study_ends_them_before_it_starts_its_ray(
    tmp_path: Path, spawn, capfd: pytest.CaptureFixture[str]
) -> None:
    from autotune.study import session

    study_dir = Path(os.path.relpath(tmp_path / "s", Path.cwd()))
    root = session.ray_dir(tmp_path / "s")
    root.mkdir(parents=True)
    if len(str(root.resolve())) > 40:  # the study's Ray goes to the short temp folder
        import tempfile

        root = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
        root.mkdir(exist_ok=True)
    orphan = spawn("ray::RuntimeEnvAgent", root / "left-by-a-killed-driver.log")
    ray = session.init_ray(None, study_dir, cpus=1)
    try:
        assert wait_gone(orphan)
        err = capfd.readouterr().err
        said = [line for line in err.splitlines() if "that a killed driver left" in line]
        assert len(said) == 1 and f"left running in {root} (pids" in said[0]  # others' too
        assert str(orphan) in said[0].rsplit("pids", 1)[1]
        # The new Ray's own processes are its raylet's: none is taken for an orphan. (Only its
        # session's: the short temp folder is shared, and another test's Ray shutting down
        # beside this one has processes whose raylet already ended, orphans for a moment.)
        session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
        assert session_dir.resolve().is_relative_to(root.resolve()), (session_dir, root)
        assert orphans_under(session_dir) == []
    finally:
        ray.shutdown()
