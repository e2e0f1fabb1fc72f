"""A study whose driver is killed (SIGKILL: nothing of it runs on to tidy up) once its
verification has begun is unfinished: `show` says it stopped in its verification, its pick is
not called verified, and `export` warns and records `source.unfinished` (a black-box review saw
such a study shown and exported as finished). A real study through the CLI, a real kill."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def test_a_study_killed_in_its_verification_is_shown_and_exported_as_unfinished(
    tmp_path: Path,
) -> None:
    text = h.mlp_space("cut", trials=3, verify_top_k=1, verify_seeds=2)
    h.write(tmp_path, text.replace("device: cpu,", "device: cpu, threads: 1,"))
    token = h.new_token()
    cmd = h.autotune_cmd("study", "--space", "space.yaml", "--tracking-uri", h.sqlite_uri(tmp_path))
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=h.cli_env(token),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 240
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("verifying "):
                break
            assert time.monotonic() < deadline, "".join(seen)[-3000:]
        assert seen and seen[-1].startswith("verifying "), "".join(seen)[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        h.kill_tagged(token)

    show = h.autotune(["show", "cut", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    left = summary["unfinished"]
    assert left["phase"] == "verification" and left["unverified"], left
    assert summary["pick"]["verified"] is False and summary["compute_saved"] is None, summary
    assert "study cut was stopped before it finished: in its verification" in (
        h.autotune(["show", "cut"], tmp_path).stdout
    )
    export = h.autotune(["export", "cut", "-o", "r.yaml"], tmp_path)
    assert export.returncode == 0, h.explain(export)
    assert "study cut was stopped before it finished: in its verification" in export.stderr
    assert "phase: verification" in (tmp_path / "r.yaml").read_text()
