"""`autotune show NAME --storage URL` from a folder without the study's folder (fifth black-box
review, B12): the study's home folder (`autotune.home`, where its trial, rung and verification
records are) is found when this machine sees it and it is the study's, so the summary keeps its
`compute:` line; the "next:" line's commands name the storage. A home that is gone, or holds
another study, is not used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest
from assets import studies as h
from typer.testing import CliRunner

from autotune import study as st
from autotune.cli import app
from autotune.study import folder as folder_
from autotune.study import home


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str]:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    (tmp_path / "a").mkdir()
    folder = h.recorded_study(tmp_path / "a", "cl", trials=3, finished=3, storage=url)
    # As `autotune study` records it when it opens the study in its folder, and the trial
    # records it leaves there (what the compute is counted from).
    home.claim(optuna.load_study(study_name="cl", storage=url), folder)
    for number in range(3):
        folder_.write_json(folder_.trial_path(folder, number), {"summary": {"samples_seen": 960}})
    return folder, url


def test_named_in_its_storage_from_elsewhere_the_study_has_its_folder(
    shared: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, url = shared
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    _, _, study_dir, meta = st.find_study("cl", url)
    assert study_dir == folder.resolve() and meta["name"] == "cl"
    out = CliRunner().invoke(app, ["show", "cl", "--storage", url])
    assert out.exit_code == 0, out.output
    assert "\ncompute: 2.88k samples (screen 2.88k" in out.output
    assert f"`autotune show cl --storage {url}`" in out.output
    assert f"`autotune export cl --storage {url} -o recipe.yaml`" in out.output
    # The same from the study's own folder: no --storage to name.
    monkeypatch.chdir(tmp_path / "a")
    home = CliRunner().invoke(app, ["show", "cl"])
    assert "\ncompute: " in home.output and "--storage" not in home.output


def test_a_home_that_is_gone_or_another_studys_is_not_used(
    shared: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, url = shared
    monkeypatch.chdir(tmp_path)
    meta = json.loads((folder / "study.json").read_text())
    (folder / "study.json").write_text(json.dumps({**meta, "name": "other"}))
    assert st.find_study("cl", url)[2] is None
    (folder / "study.json").write_text(json.dumps({**meta, "storage": "sqlite:////else.db"}))
    assert st.find_study("cl", url)[2] is None
    shutil.rmtree(folder)
    _, _, study_dir, _ = st.find_study("cl", url)
    assert study_dir is None
    out = CliRunner().invoke(app, ["show", "cl", "--storage", url])
    assert out.exit_code == 0, out.output
    assert "\ncompute: " not in out.output  # nothing to count it from: said by its absence


def test_a_suggested_storage_whose_password_is_masked_says_so(shared: tuple[Path, str]) -> None:
    """The "next:" line keeps the storage's password masked, so the command fails as printed:
    it says so and how to give the password (review: `--storage postgresql://optuna:***@...`
    was suggested as is)."""
    folder, url = shared
    study, space, study_dir, _ = st.find_study(str(folder))
    summary = st.summarize(study, space, study_dir)
    secret = "postgresql://optuna:Hunter2SecretPW@db:5432/optuna"
    text = st.format_summary(summary, storage=secret)
    line = next(x for x in text.splitlines() if x.startswith("next:"))
    assert "`autotune show cl --storage postgresql://optuna:***@db:5432/optuna`" in line
    assert "password is masked" in line and "PGPASSWORD" in line
    assert "Hunter2SecretPW" not in text
    assert "masked" not in st.format_summary(summary, storage=url)  # no password: as it is


def test_the_home_is_the_studys_whether_the_password_is_in_the_url_or_not() -> None:
    """study.json keeps the storage URL as the study was started (its password in it); the
    user may name the same storage with the password left to libpq (PGPASSWORD, ~/.pgpass)."""
    from autotune.study.storage import same_storage as _same_storage

    kept = "postgresql://optuna:Hunter2SecretPW@db:5432/optuna"
    assert _same_storage(kept, "postgresql://optuna@db:5432/optuna")
    assert not _same_storage(kept, "postgresql://optuna@db:5432/other")
