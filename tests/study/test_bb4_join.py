"""Black-box finding bb4 F9: `autotune study --address` where the cluster answers on its port
but cannot be joined (the pre-check `check_tcp` passes, `ray.init` fails or never returns)
leaves nothing behind: no study folder, no optuna.db, no study.json, no driver.lock, no MLflow
store or run. The driver waits for Ray before it writes the study, so `Made` removes what the
run made. A real Ray (`ray.init` against a TCP server that is not Ray), a real SQLite Optuna
storage and a real SQLite MLflow store, through the CLI in a process of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from assets.studies import (
    autotune,
    autotune_cmd,
    cli_env,
    explain,
    kill_tagged,
    mlp_space,
    new_token,
)

pytestmark = pytest.mark.integration


#: What an HTTP/2 server (a gRPC one, such as Ray's GCS) sends first: an empty SETTINGS frame.
HTTP2_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@contextlib.contextmanager
def not_ray(reply: bytes | None = None) -> Iterator[tuple[int, list[int]]]:
    """A TCP server on loopback that accepts connections and is not Ray: its port, and a list
    that grows by one with each connection accepted. `reply`: None, it never answers; b"", it
    closes each connection at once (as PostgreSQL does on a client's HTTP/2 preface); else it
    sends `reply` and says nothing more (HTTP2_SETTINGS: a gRPC server that answers no call)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[int] = []
    held: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                accepted.append(1)
                if reply == b"":
                    conn.close()
                    continue
                held.append(conn)
                if reply:
                    conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        server.close()
        for conn in held:
            conn.close()


def only_the_space(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_join_that_fails_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(mlp_space("joined", trials=2))
    token = new_token()
    try:
        with not_ray() as (port, accepted):
            address = f"ray://127.0.0.1:{port}"
            result = autotune(
                ["study", "--space", "space.yaml", "--address", address],
                tmp_path,
                token=token,
                timeout=240,
            )
            assert accepted, "the address was not even checked"
    finally:
        kill_tagged(token)
    assert result.returncode == 2, explain(result)
    assert "Traceback" not in result.stderr, explain(result)
    errors = [x for x in result.stderr.splitlines() if x.startswith("autotune: error:")]
    assert len(errors) == 1 and f"cannot join the Ray cluster at {address}" in errors[0], explain(
        result
    )
    assert only_the_space(tmp_path) == ["space.yaml"], explain(result)
    assert "trials done" not in result.stdout, "the study was announced before Ray was up"


@pytest.mark.parametrize("reply", [b"", b"SSH-2.0-OpenSSH_9.6\r\n"], ids=["closes", "other"])
def test_a_port_that_is_not_ray_is_refused_at_once(tmp_path: Path, reply: bytes) -> None:
    """A review gave `--address` a PostgreSQL port: Ray retried its join for minutes ("Failed
    to connect to GCS" over and over), and a Ctrl-C then advised a --resume of a study never
    written. A port that answers, but not as a Ray GCS (gRPC) does, is refused in one line
    naming it, status 2, within seconds and before anything is made."""
    (tmp_path / "space.yaml").write_text(mlp_space("notray", trials=2))
    token = new_token()
    started = time.monotonic()
    try:
        with not_ray(reply) as (port, _):
            address = f"127.0.0.1:{port}"
            cmd = ["study", "--space", "space.yaml", "--address", address]
            result = autotune(cmd, tmp_path, token=token, timeout=120)
    finally:
        kill_tagged(token)
    assert time.monotonic() - started < 60, explain(result)
    assert result.returncode == 2, explain(result)
    assert "Traceback" not in result.stderr and "--resume" not in result.stderr, explain(result)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"autotune: error: cannot join the Ray cluster at {address}: "), last
    assert "not as Ray does" in last, last
    assert only_the_space(tmp_path) == ["space.yaml"], explain(result)


def test_a_driver_stopped_while_it_joins_a_silent_cluster_leaves_nothing(tmp_path: Path) -> None:
    """A cluster address that answers as a gRPC server does and then never answers a call:
    Ray retries for many minutes. Ctrl-C then stops the driver within seconds, what it made
    is removed, and it says to run the same command again (not --resume: no study was
    written)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "space.yaml").write_text(mlp_space("silent", trials=2))
    token = new_token()
    err = tmp_path / "stderr.txt"
    with not_ray(HTTP2_SETTINGS) as (port, _), err.open("w") as err_file:
        proc = subprocess.Popen(
            autotune_cmd("study", "--space", "space.yaml", "--address", f"127.0.0.1:{port}"),
            cwd=work,
            env=cli_env(token),
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 180
            while "GCS" not in err.read_text():  # Ray is retrying its join
                assert proc.poll() is None, err.read_text()[-3000:]
                assert time.monotonic() < deadline, "Ray never tried to join"
                time.sleep(0.5)
            assert (work / "autotune-studies" / "silent" / "driver.lock").exists()
            os.kill(proc.pid, signal.SIGINT)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    "the driver did not stop within 60 s of Ctrl-C while joining\n"
                    + err.read_text()[-3000:]
                ) from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kill_tagged(token)
    assert code == 130, err.read_text()[-3000:]  # as a study interrupted with Ctrl-C
    assert "Traceback" not in err.read_text(), err.read_text()[-3000:]
    last = err.read_text().strip().splitlines()[-1]
    assert last == "interrupted before this run wrote anything; run the same command again", last
    assert only_the_space(work) == ["space.yaml"], err.read_text()[-3000:]
