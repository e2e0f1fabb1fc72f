"""The study's MLflow writer when the store's server goes away mid-study: every write fails in
seconds (MLflow's default retries held the driver ~4 minutes per write), the study says so once
and at the end how many records --resume will log, and a stop is never held by a write."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from assets import studies as h
from assets.logged import logged_outcome

from autotune.study import signals
from autotune.study import writer as w
from autotune.tracking import connection

_BOUNDS = (*connection._HTTP_BOUNDS, *connection._QUIET_URLS)


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables `connect` sets for the process, put back as they were after the test."""
    for key in _BOUNDS:
        monkeypatch.delenv(key, raising=False)


def _empty_study() -> object:
    import optuna

    return optuna.create_study()


def test_writes_to_a_server_that_is_gone_fail_fast_and_are_said_once(
    bounded: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    connection.bound_http_requests()
    client = MlflowClient(tracking_uri=f"http://127.0.0.1:{h.free_port()}")  # nothing there
    writer = w.MlflowWriter(client, "1", "parent", "gone", tmp_path)
    t0 = time.monotonic()
    for n in range(3):
        writer.log(logged_outcome(n, [1.0, 0.5]))
    writer.drain()
    assert writer.verification(1, {}, None) is None
    writer.summary({}, _empty_study(), None)
    assert time.monotonic() - t0 < 20
    err = capsys.readouterr().err
    assert err.count("does not answer") == 1, err
    assert err.count("warning:") == 2, err  # the first failure, and the count at the end
    assert "5 records of this session could not be logged" in err, err
    assert "--resume" in err


def test_a_stop_is_not_held_by_a_write_that_hangs(
    bounded: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that takes the connection and never answers: each write would wait out its
    timeout; a stopping driver waits for the queue at most `STOP_GRACE_S`."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    monkeypatch.setattr(w, "STOP_GRACE_S", 1.0)
    with socket.create_server(("127.0.0.1", 0), backlog=16) as mute:
        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{mute.getsockname()[1]}")
        writer = w.MlflowWriter(client, "1", "parent", "mute", tmp_path)
        for n in range(2):
            writer.log(logged_outcome(n, [1.0]))
        monkeypatch.setitem(signals._STOPPED, "by", signal.SIGTERM)
        t0 = time.monotonic()
        writer.drain()
        assert writer.verification(1, {}, None) is None  # skipped: the writer holds the client
        assert time.monotonic() - t0 < 5
        assert writer.not_logged() == 3


def test_a_server_that_takes_connections_but_never_answers_is_down_too(
    bounded: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    connection.bound_http_requests()
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "1"  # put back by `bounded`
    with socket.create_server(("127.0.0.1", 0), backlog=16) as mute:
        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{mute.getsockname()[1]}")
        writer = w.MlflowWriter(client, "1", "parent", "mute", tmp_path)
        t0 = time.monotonic()
        for n in range(4):
            writer.log(logged_outcome(n, [1.0]))
        writer.drain()
        assert time.monotonic() - t0 < 10  # one timeout, not one per write
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "does not answer" in err, err
    assert writer.not_logged() == 4


@contextlib.contextmanager
def _mlflow_server(folder: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = h.free_port()
    env = {**h.cli_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'server.db'}"]
    proc = subprocess.Popen(
        cmd, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not connection.answers(f"http://127.0.0.1:{port}"):
            assert proc.poll() is None and time.monotonic() < deadline, "mlflow server"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.integration
def test_a_server_killed_mid_study_costs_seconds_and_prints_no_run_links(
    bounded: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune import tracking

    with _mlflow_server(tmp_path) as (uri, proc):
        client = tracking.connect(uri)  # as the driver does: it bounds MLflow's requests
        experiment = tracking.ensure_experiment(client, "down")
        parent = tracking.ensure_study_run(
            client, experiment, "down", space_yaml="name: down\n", params={}, tags={}
        )
        writer = w.MlflowWriter(client, experiment, parent, "down", tmp_path)
        writer.log(logged_outcome(0, [1.0, 0.5]))
        writer.drain()
        assert tracking.logged_trials(client, experiment, parent) == {0}
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        for n in (1, 2, 3):
            writer.log(logged_outcome(n, [1.0, 0.5]))
        writer.drain()
        writer.summary({}, _empty_study(), None)
        assert time.monotonic() - t0 < 30
    out, err = capsys.readouterr()
    assert "View run" not in out and "View experiment" not in out, out
    assert err.count("does not answer") == 1, err
    assert "4 records of this session could not be logged" in err, err
