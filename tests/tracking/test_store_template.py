"""A new SQLite MLflow store made from the cached empty schema (`tracking/store_template.py`),
with real MLflow stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autotune.tracking import connect
from autotune.tracking import store_template as st


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(folder))
    return folder


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


def logs_a_run(uri: str) -> None:
    client = connect(uri)
    exp = client.create_experiment("e")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "loss", 1.5, step=3)
    assert client.get_metric_history(run.info.run_id, "loss")[0].value == 1.5


def test_the_first_store_keeps_the_template_and_the_next_starts_from_it(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "a" / "mlflow.db"
    first.parent.mkdir()  # a store is made in a folder that exists
    logs_a_run(f"sqlite:///{first}")
    template = st.template_path()
    assert template.parent == cache and template.is_file()
    assert rows(template, "SELECT COUNT(*) FROM experiments") == [(0,)]  # no Default, no "e"
    assert rows(template, "SELECT version_num FROM alembic_version") == rows(
        first, "SELECT version_num FROM alembic_version"
    )

    # Mark the template: a store made from it carries the mark; MLflow's own would not.
    with sqlite3.connect(template) as con:
        con.execute("CREATE TABLE autotune_mark (x INTEGER)")
    elsewhere = tmp_path / "b"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    second = elsewhere / "mlflow.db"
    logs_a_run(f"sqlite:///{second}")
    assert rows(second, "SELECT name FROM sqlite_master WHERE name = 'autotune_mark'")
    # MLflow made the Default experiment itself, where this store is used from.
    (location,) = rows(second, "SELECT artifact_location FROM experiments WHERE experiment_id=0")
    assert str(elsewhere) in location[0], location
    assert not list(elsewhere.glob(".mlflow-template-*")), "a temporary copy was left"


def test_a_template_mlflow_refuses_falls_back_to_mlflow_s_own_store(
    cache: Path, tmp_path: Path
) -> None:
    logs_a_run(f"sqlite:///{tmp_path / 'a.db'}")
    template = st.template_path()
    with sqlite3.connect(template) as con:  # a schema from another MLflow
        con.execute("UPDATE alembic_version SET version_num = '0584bdc529eb'")
    store = tmp_path / "b.db"
    logs_a_run(f"sqlite:///{store}")
    current = rows(tmp_path / "a.db", "SELECT version_num FROM alembic_version")
    assert rows(store, "SELECT version_num FROM alembic_version") == current
    # The refused template is gone; the store MLflow made instead is the template now.
    assert rows(template, "SELECT version_num FROM alembic_version") == current


def test_a_template_that_is_not_a_database_is_not_used(cache: Path, tmp_path: Path) -> None:
    cache.mkdir()
    st.template_path().write_bytes(b"not sqlite" * 100)
    store = tmp_path / "c.db"
    assert not st.seed_new_store(store)
    assert not store.exists() and not list(tmp_path.glob(".mlflow-template-*"))
    logs_a_run(f"sqlite:///{store}")


def test_an_existing_store_is_never_replaced(cache: Path, tmp_path: Path) -> None:
    logs_a_run(f"sqlite:///{tmp_path / 'a.db'}")
    before = rows(tmp_path / "a.db", "SELECT name FROM experiments ORDER BY name")
    assert not st.seed_new_store(tmp_path / "a.db")
    connect(f"sqlite:///{tmp_path / 'a.db'}")
    assert rows(tmp_path / "a.db", "SELECT name FROM experiments ORDER BY name") == before
