"""`verify` stopped by Ctrl-C even when started with SIGINT ignored (a shell script's `&` job),
as `study` and `migrate` are: one line, exit status 130, no MLflow run (the report is logged only
once every seed ran), no probe left running. From a black-box review: such a `verify` ignored
SIGINT and ran every probe to the end (exit 0)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h
from assets.recipes import make_recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job


def test_a_ctrl_c_stops_verify_started_with_sigint_ignored(tmp_path: Path) -> None:
    make_recipe().save(tmp_path / "r.yaml")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["verify", "r.yaml", "--seeds", "2", "--steps", "20000", "--tracking-uri", uri]
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            h.autotune_cmd(*args),
            cwd=tmp_path,
            env=h.cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_ignore_sigint,
        )
    try:
        deadline = time.monotonic() + 120
        while "verifying recipe" not in err_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        time.sleep(2.0)  # the first probe running
        os.kill(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err = err_path.read_text()
    assert rc == 130, err
    assert err.splitlines()[-1] == "autotune: verify interrupted: nothing logged", err
    assert "seed" not in err.split("verifying recipe")[1].split("\n", 1)[1], err  # none ran out
    deadline = time.monotonic() + 10
    while True:  # its probe went with it
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "a probe outlived verify"
        time.sleep(0.2)
    from autotune import tracking

    client = tracking.connect(uri)
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])
