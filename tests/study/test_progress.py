"""The study's live lines (`autotune.study.progress`): what a finished trial's line says."""

from __future__ import annotations

import math

import pytest

from autotune import space as sp
from autotune.study.progress import Progress

SPACE = sp.loads(
    """\
name: lines
workload: mlp
knobs:
  lr: {low: 1.0e-4, high: 1.0e-1, log: true}
"""
)


def test_an_infeasible_trial_says_why_a_stand_in_included(capsys: pytest.CaptureFixture) -> None:
    # the training loss did not drop (noise_per_drop NaN), the held-out one did: infeasible
    # for its stand-in alone (`objectives.constraints_of`), and the line says so, not "()"
    p = Progress(SPACE, 3, 0, 1, False)
    metrics = {"noise_per_drop": math.nan, "throughput": 5.8e4, "loss_drop": 0.46}
    p.finished(
        {
            "number": 4,
            "outcome": "complete",
            "feasible": False,
            "constraints": [1.0, -0.41],
            "summary": {"metrics": metrics},
        }
    )
    assert "complete (infeasible: no finite noise_per_drop)" in capsys.readouterr().out
    broke = {**metrics, "noise_per_drop": 0.1, "loss_drop": -1.7}
    p.finished(
        {
            "number": 5,
            "outcome": "complete",
            "feasible": False,
            "constraints": [0.0, 1.75],
            "summary": {"metrics": broke},
        }
    )
    assert "complete (infeasible: loss_drop >= 0.05)" in capsys.readouterr().out
