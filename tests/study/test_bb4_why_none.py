"""Black-box finding bb4 (extra minor items): `pick.why_none`, the "closest" list of an export
that found no candidate, called a trial that was queued and never ran "failed". It now says it
did not run, after the trials that did. Real Optuna studies (in memory, and an SQLite one told
through the study's own code); `export` through typer's CliRunner."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from assets.cli import invoke, one_line_error
from assets.studies import recorded_study

from autotune.study import pick as pk


def failed(study: optuna.Study, cause: str) -> None:
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL,
            user_attrs={"autotune.outcome": "failed", "autotune.cause": cause},
        )
    )


def test_a_queued_trial_is_not_run_not_failed() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.enqueue_trial({})  # 0: queued, never asked for
    failed(study, "timeout")  # 1
    text = pk.why_none(study)
    assert text == "trial 1: failed (timeout); trial 0: queued, not run"
    only = optuna.create_study(directions=["minimize", "maximize"])
    only.enqueue_trial({})
    assert pk.why_none(only) == "trial 0: queued, not run"


def test_the_queued_come_after_every_trial_that_ran() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.enqueue_trial({})  # 0
    for cause in ("timeout", "exception", "nan_loss"):  # 1, 2, 3
        failed(study, cause)
    assert pk.why_none(study, limit=3) == (
        "trial 1: failed (timeout); trial 2: failed (exception); trial 3: failed (nan_loss)"
    )
    assert pk.why_none(study, limit=10).endswith("; trial 0: queued, not run")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_export_does_not_call_a_queued_baseline_failed(here: Path) -> None:
    """A study stopped with its baseline still queued (trial 0) and one other trial failed:
    export names the failure and the baseline as not run."""
    study_dir = recorded_study(here, "q", trials=3, finished=0)  # the baseline enqueued
    study = optuna.load_study(study_name="q", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    failed(study, "timeout")  # trial 1
    line = one_line_error(invoke("export", "q", "-o", "r.yaml"), "every trial failed")
    assert "trial 1: failed (timeout); trial 0: queued, not run" in line, line
    assert "trial 0: failed" not in line
