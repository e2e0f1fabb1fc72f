"""The CLI as the tests invoke it in-process, and what a user error must look like."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner, Result

from autotune.cli import app

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


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
