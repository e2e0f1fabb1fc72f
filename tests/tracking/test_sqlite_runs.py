"""The trials' MLflow runs read straight from an SQLite store (`tracking/sqlite_runs.py`, which
`autotune export` uses so as not to import MLflow) give what MLflow's own client gives, on a
real MLflow store: the logged child runs of the study's run, a deleted or half-logged run
left out, a trial logged twice given its later run."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.tracking import connect
from autotune.tracking import runs as tr
from autotune.tracking.sqlite_runs import study_trial_runs, trial_run_ids

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


def child(client: MlflowClient, exp: str, parent: str, number: str, logged: bool = True) -> str:
    tags = {tr.TAG_PARENT: parent, tr.TAG_TRIAL_NUMBER: number}
    if logged:
        tags[tr.TAG_LOGGED] = "true"
    run = client.create_run(exp, tags=tags)
    time.sleep(0.002)  # start times in order: a trial logged twice keeps its later run
    return str(run.info.run_id)


def test_the_trials_runs_are_read_as_mlflow_gives_them(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    client = connect(f"sqlite:///{db}")
    exp = client.create_experiment("study")
    other_exp = client.create_experiment("other")
    parent = str(client.create_run(exp, tags={tr.TAG_ROLE: "study"}).info.run_id)
    child(client, exp, parent, "0")
    child(client, exp, parent, "1")
    child(client, exp, parent, "2", logged=False)  # the driver died while logging it
    deleted = child(client, exp, parent, "3")
    client.delete_run(deleted)
    child(client, exp, parent, "1")  # logged again by a resume: this run is trial 1's
    child(client, exp, parent, "x")  # not a trial number
    child(client, exp, "another-parent", "4")
    child(client, other_exp, parent, "5")

    expected = tr.trial_run_ids(client, exp, parent)
    assert sorted(expected) == [0, 1]
    assert trial_run_ids(db, exp, parent) == expected
    assert trial_run_ids(db, exp, "no-such-run") == {}
    assert study_trial_runs(f"sqlite:///{db}", exp, parent) == expected


def test_a_file_that_is_not_an_mlflow_store_is_left_to_mlflow(tmp_path: Path) -> None:
    assert trial_run_ids(tmp_path / "missing.db", "1", "p") is None
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    assert trial_run_ids(garbage, "1", "p") is None
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert trial_run_ids(empty, "1", "p") is None  # no MLflow tables
    assert trial_run_ids(garbage, "not-a-number", "p") is None


def test_a_store_that_cannot_be_read_gives_no_runs_and_no_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    assert study_trial_runs(f"sqlite:///{garbage}", "1", "p") == {}
    assert study_trial_runs("http://127.0.0.1:9", "1", "p") == {}  # nothing listens there
