"""MLflow brought back in line on resume: a black-box review stopped the MLflow store (its
PostgreSQL) mid-study; the study went on (each failed write a warning line, beside which MLflow
printed its own traceback, 43 in all), and the resume logged the missing trial runs but not the
rung runs nor the verification runs. Now the resume logs every rung probe and verification the
study recorded without a run (checked on the finished study of `test_study_rungs.py`'s first
test, which has both: a study of its own here cost three drivers), and MLflow's own traceback of
an error it raises is not printed (here)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import assets.studies as h
import pytest

pytestmark = pytest.mark.integration


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
