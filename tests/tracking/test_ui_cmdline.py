"""The MLflow server `autotune ui` starts is told its store in its environment, not on its
command line: any user of the machine reads a command line in `ps`, and a database URL carries
its password (`postgresql://user:secret@host/db`); a process's environment is its owner's."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from assets import studies as h

from autotune import tracking

pytestmark = pytest.mark.integration


def test_the_store_is_not_on_the_servers_command_line(tmp_path: Path) -> None:
    db = tmp_path / "store-named-secret.db"
    tracking.connect(f"sqlite:///{db}")
    port, token = h.free_port(), h.new_token()
    proc = subprocess.Popen(
        h.autotune_cmd("ui", "--tracking-uri", f"sqlite:///{db}", "--port", str(port)),
        cwd=tmp_path,
        env=h.cli_env(token),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        deadline, lines = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if f":{port}/" in line:  # the link: the server answers
                break
        assert any(f":{port}/" in line for line in lines), "".join(lines[-30:])
        servers = [(pid, cmd) for pid, cmd in h.tagged_processes(token) if pid != proc.pid]
        assert servers, "no MLflow server process found"
        assert all("store-named-secret" not in cmd for _, cmd in servers), servers
    finally:
        h.interrupt_group(proc, token, "`autotune ui`")
