"""`autotune ui --host`: loopback by default; an empty host is refused; a bind beyond loopback
(including "0", which the OS reads as 0.0.0.0) needs --expose and says what it exposes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from assets import studies as h
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import UsageError
from autotune.tracking.ui import check_host

runner = CliRunner()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2", "::1"])
def test_loopback_hosts_need_nothing(host: str) -> None:
    assert check_host(host, 5000, expose=False) == (host, host)


@pytest.mark.parametrize("host", ["", "   "])
def test_an_empty_host_is_refused(host: str) -> None:
    with pytest.raises(UsageError, match="--host: empty"):
        check_host(host, 5000, expose=True)


@pytest.mark.parametrize("host", ["0", "0.0.0.0", "::"])
def test_every_interface_needs_expose(host: str) -> None:
    with pytest.raises(UsageError, match=r"every interface.*--expose"):
        check_host(host, 5000, expose=False)


def test_expose_says_what_it_exposes_and_polls_loopback(capsys: pytest.CaptureFixture) -> None:
    assert check_host("0", 5000, expose=True) == ("0.0.0.0", "127.0.0.1")
    assert check_host("::", 5000, expose=True) == ("::", "::1")
    err = capsys.readouterr().err
    assert "every interface" in err and "no authentication" in err and "5000" in err


def test_an_unknown_host_is_named() -> None:
    with pytest.raises(UsageError, match=r"no-such-host\.invalid"):
        check_host("no-such-host.invalid", 5000, expose=False)


@pytest.mark.parametrize("host", ["", "0", "0.0.0.0"])
def test_cli_refuses_before_starting_anything(host: str, tmp_path: Path) -> None:
    start = time.monotonic()
    result = runner.invoke(
        app, ["ui", "--host", host, "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "--host" in result.stderr
    assert not (tmp_path / "m.db").exists()  # no store touched
    assert time.monotonic() - start < 5


@pytest.mark.integration
def test_exposed_ui_answers_on_loopback(tmp_path: Path) -> None:
    """With --host 0 --expose the UI starts and its health check (polled on 127.0.0.1)
    succeeds: the URL line is printed. Before, `--host 0` polled http://0:PORT and never did."""
    port = h.free_port()
    script = Path(sys.executable).with_name("autotune")
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "autotune"]
    store = f"sqlite:///{tmp_path}/m.db"
    MlflowClient(store).search_experiments()  # the store a study would have made
    proc = subprocess.Popen(
        [*cmd, "ui", "--host", "0", "--expose", "--port", str(port), "--tracking-uri", store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        seen = []  # MLflow's server prints a line of its own first; wait for ours (or the end)
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("MLflow UI for"):
                break
        assert seen and seen[-1].startswith("MLflow UI for"), "".join(seen)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "every interface" in (proc.stderr.read() if proc.stderr else "")
