"""The benchmarks' own options refuse bad input with one line naming the option (argparse's
exit 2), before anything runs: `migrate_cost.py --here-env`, `rung_idle_sim.py --modes`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # each starts the script in a process

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize(
    ("script", "args", "said"),
    [
        ("migrate_cost.py", ["--here-env", "FOO"], "--here-env takes KEY=VALUE, not 'FOO'"),
        ("migrate_cost.py", ["--here-env", "=1"], "--here-env takes KEY=VALUE, not '=1'"),
        ("rung_idle_sim.py", ["--modes", "fastest"], "unknown mode(s) ['fastest']"),
    ],
)
def test_a_bad_option_is_one_message_and_exit_2(script: str, args: list[str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH,
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
