"""A PostgreSQL server of a test's own, which the test may stop and start again (a storage lost
mid-study): the shared one of AUTOTUNE_TEST_PG serves other tests and must stay up.

Made with the server's own tools (initdb, pg_ctl) from /usr/lib/postgresql/*/bin or PATH, in a
folder under /tmp, on a free loopback port, trusting every local connection (the password in
its URL is accepted whatever it is: the tests check that it is never shown). As root the tools
run as the `postgres` user (initdb refuses root), as .ci/run runs them. Without the tools the
test is skipped, unless AUTOTUNE_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from assets.studies import free_port

PASSWORD = "s3cret-pw"


def _bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts[-3])
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Server:
    """One server: `url(db)` for a database of it, `stop()` and `start()`."""

    def __init__(self, bindir: Path, data: Path, port: int) -> None:
        self.bindir, self.data, self.port = bindir, data, port

    def url(self, db: str) -> str:
        return f"postgresql://autotune:{PASSWORD}@127.0.0.1:{self.port}/{db}"

    def run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            cmd = ["su", "postgres", "-c", shlex.join(cmd)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self.run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "-o", opts, "start"
        )

    def stop(self) -> None:
        """As an administrator stops it: `pg_ctl stop -m fast` (open connections are ended)."""
        self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def sql(self, statement: str) -> None:
        self.run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-qc", statement
        )


@contextlib.contextmanager
def own_server(*databases: str) -> Iterator[Server]:
    """A new server with the role `autotune` owning `databases`; stopped and removed after."""
    bindir = _bin()
    if bindir is None:
        reason = "PostgreSQL's initdb is not installed (apt-get install postgresql)"
        if os.environ.get("AUTOTUNE_REQUIRE_SERVICES") == "1":
            pytest.fail(reason + " and AUTOTUNE_REQUIRE_SERVICES=1")
        pytest.skip(reason)
    data = Path(tempfile.mkdtemp(prefix="atpg-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
    server = Server(bindir, data, free_port())
    try:
        server.run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres")
        server.start()
        server.sql(f"CREATE ROLE autotune LOGIN PASSWORD '{PASSWORD}'")
        for db in databases:
            server.sql(f"CREATE DATABASE {db} OWNER autotune")
        yield server
    finally:
        with contextlib.suppress(AssertionError, OSError, subprocess.SubprocessError):
            server.stop()
        shutil.rmtree(data, ignore_errors=True)
