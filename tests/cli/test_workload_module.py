"""A user's workload module that exits or prints while it is imported or built, through the
commands that import it (`autotune.probe.workload_guard`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error

WORKLOAD = """\
from autotune.probe.workload import resolve


def make(size="tiny"):
    {make}
    return resolve("mlp", size)
"""

SPACE = """\
name: guarded
workload: {{name: {ref}, size: tiny}}
probe: {{steps: 10, micro_batch: 16, threads: 1, device: cpu}}
knobs: {{lr: 0.003}}
"""


def _space(write_space: Callable[..., Path], tmp_path: Path, top: str, make: str = "") -> Path:
    module = tmp_path / "user_workload.py"
    module.write_text(top + "\n" + WORKLOAD.format(make=make or "pass"))
    return write_space(SPACE.format(ref=f"{module}:make"))


COMMANDS = {
    "check": ["check", "{path}"],
    "probe": ["probe", "--space", "{path}", "--json"],
    "repro": ["repro", "{path}", "--json"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_module_that_exits_at_import_is_one_line_naming_it(
    write_space: Callable[..., Path], tmp_path: Path, command: str
) -> None:
    """Once every command ended silently with the module's own status (3 here); repro named
    neither the space file nor its key."""
    path = _space(write_space, tmp_path, "raise SystemExit(3)")
    args = [a.format(path=path) for a in COMMANDS[command]]
    one_line_error(
        invoke(*args),
        f"{path}: workload: workload '{tmp_path / 'user_workload.py'}:make'",
        "exited while it was imported: SystemExit(3)",
    )


def test_probe_json_stays_json_when_the_module_prints(
    write_space: Callable[..., Path], tmp_path: Path
) -> None:
    path = _space(write_space, tmp_path, "print('HELLO AT IMPORT')", make="print('HELLO IN MAKE')")
    result = invoke("probe", "--space", path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "ok"
    assert "HELLO AT IMPORT" in result.stderr and "HELLO IN MAKE" in result.stderr
