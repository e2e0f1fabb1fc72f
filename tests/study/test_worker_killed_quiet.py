"""A Ray worker killed mid-trial is one line of autotune's ("trial N failed (worker_died)"), not
Ray's own around it: a review saw "(raylet) A worker died ...", Ray Tune's "Trial task failed"
with a 15-line traceback and "Trials did not complete" in the study's output (when the screen
ran on Tune; its trials are plain Ray tasks now, `ray::probe_task` while they run)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def test_a_killed_worker_prints_only_autotunes_line(tmp_path: Path) -> None:
    name = "killed-worker"
    space = h.write(tmp_path, h.mlp_space(name, trials=3, steps=3000, timeout_s=300))
    token = h.new_token()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    cmd = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)]
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(
            h.autotune_cmd(*cmd), cwd=tmp_path, env=h.cli_env(token), stdout=o, stderr=e,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        baseline = tmp_path / "autotune-studies" / name / "trials" / "0000.json"
        killed = None
        deadline = time.monotonic() + 240
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if baseline.exists():  # the baseline's worker is never the one killed
                workers = [p for p, c in h.tagged_processes(token) if "probe_task" in c]
                if workers:
                    os.kill(workers[0], signal.SIGKILL)
                    killed = workers[0]
            time.sleep(0.2)
        assert killed is not None, out.read_text() + err.read_text()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        h.kill_tagged(token)
    text = out.read_text() + err.read_text()
    assert "worker_died" in text, text
    for ray_line in ("(raylet)", "Trial task failed", "Traceback", "Trials did not complete"):
        assert ray_line not in text, text
