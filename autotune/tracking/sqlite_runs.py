"""The MLflow run of each trial read straight from an SQLite store, without importing MLflow.

`autotune export` records the run of the trial it exports. Asking MLflow's client for it costs
its import, ~4-6 s of CPU on two cores: most of an export's time. For the default store (an
SQLite file) the same rows are read here from MLflow's tables (`runs`, `tags`), read-only; any
surprise in the file (another schema, a locked or damaged file) returns None, and the caller
asks MLflow's client as before.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from autotune.sqlite_read import read_only
from autotune.tracking import runs
from autotune.tracking.connection import connect, sqlite_path
from autotune.tracking.runs import TAG_LOGGED, TAG_PARENT, TAG_TRIAL_NUMBER

# The runs MLflow's `search_runs` returns by default (ViewType.ACTIVE_ONLY), oldest first, as
# `runs.child_runs` asks: a later run of the same trial (a resume that logged it again) wins.
_QUERY = """
SELECT number.value, r.run_uuid
FROM runs AS r
JOIN tags AS parent ON parent.run_uuid = r.run_uuid AND parent.key = ? AND parent.value = ?
JOIN tags AS number ON number.run_uuid = r.run_uuid AND number.key = ?
JOIN tags AS logged ON logged.run_uuid = r.run_uuid AND logged.key = ? AND logged.value = 'true'
WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active'
ORDER BY r.start_time ASC
"""


def trial_run_ids(path: Path, experiment_id: str, parent_run_id: str) -> dict[int, str] | None:
    """Trial number -> run id of its completely logged child run of `parent_run_id`, as
    `runs.trial_run_ids` gives it; None when the file cannot be read so."""
    if not path.is_file():
        return None
    try:
        exp = int(experiment_id)
        with contextlib.closing(read_only(path)) as con:
            args = (TAG_PARENT, parent_run_id, TAG_TRIAL_NUMBER, TAG_LOGGED, exp)
            rows = con.execute(_QUERY, args).fetchall()
    except (ValueError, sqlite3.Error):
        return None
    out: dict[int, str] = {}
    for number, run_id in rows:
        try:
            out[int(number)] = str(run_id)
        except (TypeError, ValueError):
            continue  # as `runs.trial_number`: a tag that is not a number names no trial
    return out


def study_trial_runs(uri: str, experiment_id: str, parent_run_id: str) -> dict[int, str]:
    """Trial number -> run id in the store at `uri`: read from the file for an SQLite store,
    else (or when that fails) asked of MLflow's client; {} when the store cannot be reached
    (the ids are for the record: an unreachable store must not stop an export)."""
    path = sqlite_path(uri) if uri.startswith("sqlite:") else None
    if path is not None:
        ids = trial_run_ids(path, experiment_id, parent_run_id)
        if ids is not None:
            return ids
    try:
        return runs.trial_run_ids(connect(uri), experiment_id, parent_run_id)
    except Exception:
        return {}
