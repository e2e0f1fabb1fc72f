"""MLflow brought back in line on resume: a black-box review stopped the MLflow store (its
PostgreSQL) mid-study; the study went on (each failed write a warning line, beside which MLflow
printed its own traceback, 43 in all), and the resume logged the missing trial runs but not the
rung runs nor the verification runs. Now the resume logs every rung probe and verification the
study recorded without a run, and MLflow's own traceback of an error it raises is not printed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import assets.studies as h
import pytest

pytestmark = pytest.mark.integration


def _runs(uri: str, name: str) -> dict[str, list[Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    out: dict[str, list[Any]] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000):
        out.setdefault(r.data.tags.get("autotune.role", "study"), []).append(r)
    return out


def test_a_resume_logs_the_rung_and_verification_runs_mlflow_lost(tmp_path: Path) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    space = h.mlp_space("backfill", trials=4, steps=20, verify_top_k=1, verify_seeds=2)
    space = space.replace("budget: {", "budget: {target_steps: 60, ")
    path = h.write(tmp_path, space)
    uri = h.sqlite_uri(tmp_path)
    cmd = ["study", "--space", str(path), "--tracking-uri", uri]
    run = h.autotune(cmd, tmp_path, timeout=600)
    assert run.returncode == 0, h.explain(run)
    before = _runs(uri, "backfill")
    rungs = sorted(
        (r.data.tags["mlflow.parentRunId"], r.data.tags["autotune.steps"]) for r in before["rung"]
    )
    assert rungs and before.get("verification"), sorted(before)

    # What a store that was down when they finished leaves: no rung or verification runs, and
    # the verification stored with `run_id` None (`MlflowWriter.verification` returned None).
    client = MlflowClient(tracking_uri=uri)
    for r in before["rung"] + before["verification"]:
        client.delete_run(r.info.run_id)
    storage = f"sqlite:///{tmp_path / 'autotune-studies' / 'backfill' / 'optuna.db'}"
    study = optuna.load_study(study_name="backfill", storage=storage)
    verified = {k: v for k, v in study.user_attrs.items() if k.startswith("autotune.verified.")}
    assert verified
    for key, res in verified.items():
        study.set_user_attr(key, {**res, "run_id": None})

    again = h.autotune([*cmd, "--resume"], tmp_path, timeout=600)
    assert again.returncode == 0, h.explain(again)
    after = _runs(uri, "backfill")
    assert (
        sorted(
            (r.data.tags["mlflow.parentRunId"], r.data.tags["autotune.steps"])
            for r in after["rung"]
        )
        == rungs
    )
    assert len(after["verification"]) == len(verified), after["verification"]
    study = optuna.load_study(study_name="backfill", storage=storage)
    ids = {r.info.run_id for r in after["verification"]}
    for key in verified:
        assert study.user_attrs[key]["run_id"] in ids, study.user_attrs[key]

    # a third run finds nothing missing and logs nothing twice
    third = h.autotune([*cmd, "--resume"], tmp_path, timeout=600)
    assert third.returncode == 0, h.explain(third)
    final = _runs(uri, "backfill")
    assert len(final["rung"]) == len(rungs) and len(final["verification"]) == len(verified)


def test_a_write_to_a_locked_store_is_one_warning_line_without_mlflow_s_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from autotune import tracking
    from autotune.study.writer import MlflowWriter

    uri = h.sqlite_uri(tmp_path)
    client = tracking.connect(uri)
    eid = tracking.ensure_experiment(client, "locked")
    parent = client.create_run(eid).info.run_id
    writer = MlflowWriter(client, eid, parent, "locked", tmp_path)
    capfd.readouterr()
    lock = sqlite3.connect(str(tracking.sqlite_path(uri)), timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # another writer holds the database: MLflow's write fails
    try:
        writer.log({"number": 0, "outcome": "complete", "summary": {}, "knobs": {}})
        writer.drain()
    finally:
        lock.rollback()
        lock.close()
    err = capfd.readouterr().err
    assert "warning: could not log trial 0 to MLflow" in err, err
    assert "Traceback" not in err and "SQLAlchemy database error" not in err, err
    json.dumps(err)  # one readable line, not a dump
