"""A study resumed with another budget is shown, listed and exported by that budget: the space a
study keeps is its last run's. It kept the first run's: a study of 4 trials stopped after 2 and
resumed with `budget.trials=2` finished ("all 2 trials are done") and was then listed as
"stopped in its screen", 2/4. Real Optuna (SQLite), Ray and MLflow, through the CLI, and a real
SIGTERM to stop the first run."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import optuna
import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def cli(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A read-only command in-process (`assets.cli.in_process`)."""
    from assets.cli import in_process

    return in_process(args, cwd)


def _stopped_after_two(cmd: list[str], cwd: Path) -> int:
    log = cwd / "first.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=h.cli_env(h.new_token()), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while "trial   1  complete" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_budget_given_on_resume_is_the_studys_budget(tmp_path: Path) -> None:
    h.write(tmp_path, h.mlp_space("less", trials=4, steps=200))
    uri = h.sqlite_uri(tmp_path)
    cmd = h.autotune_cmd("study", "--space", "space.yaml", "--tracking-uri", uri)
    assert _stopped_after_two(cmd, tmp_path) == 143
    fewer = h.autotune([*cmd[3:], "--resume", "--set", "budget.trials=2"], tmp_path)
    assert fewer.returncode == 0, h.explain(fewer)

    show = cli(["show", "less", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    assert json.loads(show.stdout)["unfinished"] is None, show.stdout[-3000:]
    listed = cli(["studies"], tmp_path).stdout
    line = next(x for x in listed.splitlines() if x.startswith("less "))
    assert "stopped" not in line, listed
    storage = f"sqlite:///{tmp_path / 'autotune-studies' / 'less' / 'optuna.db'}"
    kept = optuna.load_study(study_name="less", storage=storage).user_attrs["autotune.space_yaml"]
    assert "trials: 2" in kept, kept
