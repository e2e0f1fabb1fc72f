"""`autotune export NAME --storage URL` of a study run with its default storage (the folder's
own optuna.db, which records no `autotune.home`): the study's folder is the one that holds the
SQLite file, so the recipe has the trial's fingerprint and probe threads, as when exported by
the folder (review: it wrote them all as null, with no word). Where the folder cannot be
reached, export warns in one line, and `migrate`'s report says why the recipe lacks them
instead of blaming a hand-written file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from assets import studies as h
from typer.testing import CliRunner

from autotune.cli import app
from autotune.migrate import lacks
from autotune.study import export as ex
from autotune.study import folder as folder_

FP = {"hash": "abc123", "platform": "cpu", "env": {"torch_threads": 1}}


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    made = h.recorded_study(tmp_path / "a", "exp", trials=3, finished=3)
    for number in range(3):  # the trial records the folder keeps beside its storage
        record = {"outcome": "complete", "summary": {}, "fingerprint": FP}
        folder_.write_json(folder_.trial_path(made, number), record)
    (tmp_path / "b").mkdir()
    return made


def test_named_in_its_default_storage_the_recipe_has_the_folders_records(
    study_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path / "b")
    url = f"sqlite:///{study_dir / 'optuna.db'}"
    recipe = ex.recipe_from_study("exp", storage=url)
    by_folder = ex.recipe_from_study(str(study_dir))
    assert recipe.fingerprint == FP and recipe.fingerprint_hash == "abc123"
    assert recipe.probe["threads"] == 1 == by_folder.probe["threads"]
    assert recipe.source["study_dir"] == str(study_dir.resolve())
    assert ex.folder_note(recipe) is None
    out = CliRunner().invoke(app, ["export", "exp", "--storage", url, "-o", "r.yaml"])
    assert out.exit_code == 0 and "not reachable" not in out.output, out.output


def test_a_folder_out_of_reach_is_said_at_export_and_in_migrates_report(
    study_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path / "b")
    db = tmp_path / "b" / "copy.db"
    shutil.copy(study_dir / "optuna.db", db)  # the storage alone, away from its folder
    url = f"sqlite:///{db}"
    out = CliRunner().invoke(app, ["export", "exp", "--storage", url, "-o", "r.yaml"])
    assert out.exit_code == 0, out.output
    warned = [line for line in out.output.splitlines() if "not reachable" in line]
    assert len(warned) == 1 and "no fingerprint, loss curve, compute" in warned[0]
    recipe = ex.recipe_from_study("exp", storage=url)
    assert recipe.fingerprint is None and recipe.source["study_dir"] is None
    section = "\n".join(lacks.section(lacks.lacking(recipe), None, lacks.origin(recipe)))
    assert "storage alone" in section and "written by hand" not in section
