"""The CLI as the tests invoke it in-process, and what a user error must look like."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

from typer.testing import CliRunner, Result

from autotune.cli import app

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def in_process(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`autotune ARGS` (a read-only command: show, studies, export) in `cwd`, run by the CLI's
    own app in this process, in the environment a new process gets (`studies.cli_env`): its exit
    status, stdout and stderr are those of `python -m autotune ARGS` (the app is all the command
    runs: its `main` only ends the process), without the ~3.5 s of CPU a new process spends
    importing torch, MLflow and Optuna. Commands that start Ray or probes run as processes."""
    from assets.studies import cli_env

    before = Path.cwd()
    with mock.patch.dict(os.environ, cli_env(), clear=True):
        os.chdir(cwd)
        try:
            r = invoke(*args)
        finally:
            os.chdir(before)
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def one_line_error(result: Result, *fragments: str) -> str:
    """Exit 2, one `autotune: error:` line on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("autotune: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
