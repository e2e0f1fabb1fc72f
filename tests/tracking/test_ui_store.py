"""`autotune ui` refuses, in one line naming it, a store the MLflow UI cannot open, and links
a study's experiment only in a store that has it.

A black-box review: a corrupt SQLite file and an unknown URI scheme each gave 67 lines of
MLflow's tracebacks and "(is the port in use?)"; `autotune ui STUDY --tracking-uri OTHER` linked
experiment 1 of OTHER (another experiment) with the study's recorded id."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke, one_line_error
from assets.killed_writer import killed_mid_write

from autotune import tracking
from autotune.errors import TrackingError
from autotune.tracking.ui_store import check_served, study_experiment


@pytest.mark.parametrize(
    ("make", "says"),
    [
        ("junk", "not an SQLite database"),
        ("other tables", "not an MLflow store"),
        ("scheme", "not a tracking store the MLflow UI can open (scheme 'bogus')"),
    ],
)
def test_a_store_the_ui_cannot_open_is_one_line(tmp_path: Path, make: str, says: str) -> None:
    path = tmp_path / "bad.db"
    if make == "junk":
        path.write_text("junk\n")
    elif make == "other tables":
        with sqlite3.connect(path) as con:
            con.execute("CREATE TABLE studies (id INTEGER)")
    before = path.read_bytes() if path.exists() else None
    uri = "bogus://x" if make == "scheme" else f"sqlite:///{path}"
    line = one_line_error(invoke("ui", "--tracking-uri", uri, "--port", str(h.free_port())), says)
    assert uri in line and "port in use" not in line
    assert (path.read_bytes() if path.exists() else None) == before  # nothing written to it


def test_a_study_is_linked_only_in_a_store_that_has_its_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    h.recorded_study(tmp_path, "rvj", trials=2, finished=2)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    client = tracking.connect(other)
    client.create_experiment("OTHER")  # id 1, the id the study's own store gave rvj
    line = one_line_error(
        invoke("ui", "rvj", "--tracking-uri", other, "--port", str(h.free_port())),
        "no experiment 'rvj' in the MLflow tracking store",
    )
    assert other in line
    # a store where the study's experiment has another id: found by its name
    rvj = client.create_experiment("rvj")
    assert study_experiment(client, "rvj", "1") == rvj
    client.delete_experiment(rvj)
    with pytest.raises(TrackingError, match="only a deleted experiment 'rvj'"):
        study_experiment(client, "rvj", rvj)


@pytest.mark.integration
def test_a_store_left_by_a_killed_writer_is_served_not_refused(tmp_path: Path) -> None:
    """The hot journal a writer killed mid-write leaves made every read-only reader fail
    ("attempt to write a readonly database"): `autotune ui` refused the store as "not an SQLite
    database", where `show` reads an Optuna storage in that state (its journal rolled back)."""
    db = tmp_path / "mlflow.db"
    tracking.connect(f"sqlite:///{db}")  # an MLflow store
    killed_mid_write(db)
    journal = Path(f"{db}-journal")
    assert journal.is_file() and journal.stat().st_size > 0, "the writer left a hot journal"
    check_served(f"sqlite:///{db}")  # no TrackingError
    tables = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}
    assert "junk" not in tables and {"experiments", "runs"} <= tables  # rolled back, intact
