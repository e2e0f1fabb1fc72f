"""No `-o` replaces a file a study keeps: `export -o autotune-studies/NAME/optuna.db` replaced
the storage it had just read (a blind user check: the study then read "not an SQLite database").
An SQLite database anywhere, a study folder's study.json, lock and records are refused, with
nothing written; a recipe exported into the study folder may be exported over. A real study
told through the study's own code, `export` and `compare` through typer's CliRunner."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    h.recorded_study(tmp_path, "kept", trials=3, finished=3)
    return tmp_path


def test_export_replaces_no_file_a_study_keeps(here: Path) -> None:
    study = Path("autotune-studies/kept")
    other = here / "other.db"  # any SQLite database: an MLflow store, another study's storage
    sqlite3.connect(other).execute("create table t (x)").connection.commit()
    record = study / "trials" / "0000.json"
    kept = [study / "optuna.db", study / "study.json", study / "driver.lock", other, record]
    for path in kept:
        if not path.exists():  # a driver makes its lock and records; a study told here has none
            path.parent.mkdir(exist_ok=True)
            path.write_text("{}")
        before = path.read_bytes()
        result = invoke("export", "kept", "-o", str(path))
        assert result.exit_code == 2, (path, result.output)
        assert f"-o {path}: is " in result.output and "not replaced" in result.output, result.output
        assert path.read_bytes() == before, path
    assert not list(here.rglob(".*.tmp"))
    assert invoke("show", "kept").exit_code == 0  # the study reads as before
    # a recipe exported into the study's folder is no file of the study: exported over
    for _ in range(2):
        assert invoke("export", "kept", "-o", str(study / "recipe.yaml")).exit_code == 0
    assert "autotune_recipe:" in (study / "recipe.yaml").read_text()


def test_an_audit_no_format_but_the_recipe_file_holds_is_refused_before_it_runs(here: Path) -> None:
    """`export -f python --audit` ran the op audit (~15 s) and wrote nothing of it."""
    for fmt in ("python", "env", "hf", "lightning"):
        result = invoke("export", "kept", "-f", fmt, "--audit", "-o", f"r.{fmt}")
        assert result.exit_code == 2, result.output
        assert f"--audit: the {fmt} format has no place for the op audit" in result.output
        assert not (here / f"r.{fmt}").exists()
