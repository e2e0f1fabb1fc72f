"""A failed trial's MLflow run shows its world size and effective batch, as a complete one's does.

A black-box review found them only on the completed baseline's run: they were logged from the
probe's summary, which a failed DDP trial lacks. The trial's record keeps them as its config set
them (`records.planned_layout`), and its params fall back to that (`tracking.trial_params`)."""

from __future__ import annotations

import optuna

from autotune import space as sp
from autotune.study import attrs as ua
from autotune.study.records import complete_outcome
from autotune.tracking.runs import trial_params

SPACE = """name: x
workload: {name: mlp, size: tiny}
probe: {batch: 32, world_size: 2, device: cpu}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
"""


def failed_trial(knobs: dict) -> dict:
    space = sp.loads(SPACE)
    study = optuna.create_study()
    trial = study.ask()
    trial.set_user_attr(ua.KNOBS, knobs)
    frozen = study._storage.get_trial(trial._trial_id)
    result = {"outcome": "failed", "cause": "exception", "error": "rank 1 raised", "summary": None}
    return complete_outcome(space, frozen, result)


def test_a_failed_ddp_trial_logs_its_world_size_and_effective_batch() -> None:
    outcome = failed_trial({"clip_norm": 1.0, "accum_steps": 2, "batch": None})
    params = trial_params(outcome, outcome.get("summary") or {})
    assert params["world_size"] == 2
    assert params["micro_batch"] == 16 and params["accum_steps"] == 2
    assert params["effective_batch"] == 64  # 16 x 2 accumulated x 2 ranks


def test_a_summary_says_how_the_probe_ran_over_the_config() -> None:
    """An OOM retry ran at half the micro-batch: the summary's numbers are logged."""
    outcome = failed_trial({"accum_steps": 1})
    summary = {"micro_batch": 8, "accum_steps": 2, "effective_batch": 32, "world_size": 2}
    params = trial_params(outcome, summary)
    assert params["micro_batch"] == 8 and params["effective_batch"] == 32
