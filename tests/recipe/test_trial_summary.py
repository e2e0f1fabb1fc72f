"""`AUTOTUNE_SUMMARY` of a script run standalone (`autotune.recipe.trial`): a run a probe would
fail is `failed` with the probe's cause, not `ok`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HEAD = "import sys, autotune\ntrial = autotune.trial(steps=30, micro_batch=16)\n"


def _run(tmp_path: Path, loop: str) -> tuple[int, dict[str, Any]]:
    script = tmp_path / "train.py"
    script.write_text(HEAD + "for i in range(trial.steps):\n" + loop)
    out = tmp_path / "s.json"
    env = {**os.environ, "AUTOTUNE_SUMMARY": str(out)}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, json.loads(out.read_text())


@pytest.mark.integration
@pytest.mark.parametrize(
    ("loop", "rc", "cause", "said", "steps_run"),
    [
        (  # once `ok`, with steps_run 10 of steps_planned 30
            "    if i == 10: sys.exit(3)\n    trial.report(i, loss=1.0 / (i + 1))\n",
            3,
            "bad_report",
            "the script reported 10 of 30 steps and stopped without being asked",
            10,
        ),
        (
            "    trial.report(i if i != 5 else 7, loss=1.0 / (i + 1))\n",
            1,
            "bad_report",
            "trial.report(step=7) after step 4",
            5,
        ),
        (
            "    trial.report(i, loss=1.0)\nraise RuntimeError('after the loop')\n",
            1,
            "exception",
            "RuntimeError: after the loop",
            30,
        ),
        ("    trial.report(i, loss=1.0 / (i + 1))\n", 0, None, None, 30),
        (  # os._exit skips atexit: the summary is written before it all the same
            "    trial.report(i, loss=1.0 / (i + 1))\nimport os\nos._exit(0)\n",
            0,
            None,
            None,
            30,
        ),
        (
            "    if i == 12: import os; os._exit(0)\n    trial.report(i, loss=1.0 / (i + 1))\n",
            0,
            "bad_report",
            "the script reported 12 of 30 steps",
            12,
        ),
    ],
    ids=["exit_at_step_10", "bad_report", "raised", "ok", "os_exit_after", "os_exit_at_12"],
)
def test_the_summary_says_what_a_probe_would(
    tmp_path: Path, loop: str, rc: int, cause: str | None, said: str | None, steps_run: int
) -> None:
    code, summary = _run(tmp_path, loop)
    assert code == rc
    assert summary["status"] == ("ok" if cause is None else "failed")
    assert summary.get("cause") == cause
    assert (said or "") in (summary.get("error") or "")
    assert (summary["steps_run"], summary["steps_planned"]) == (steps_run, 30)
