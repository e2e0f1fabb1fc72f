"""The summary's `next:` line names the study so that the commands it suggests find it: a
black-box review ran a study with `--study-dir` elsewhere and was told `autotune show small`,
which said "no study 'small'" (its folder was not ./autotune-studies/small)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.study.next_line import next_line


def test_a_study_in_its_default_folder_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    here = tmp_path / "autotune-studies" / "small"
    line = next_line("small", True, "sqlite:///mlflow.db", None, here)
    assert "`autotune show small` for this summary again" in line, line
    assert "`autotune export small -o recipe.yaml` for the recipe" in line, line
    assert "`autotune export" not in next_line("small", False, None, None, here)


def test_a_study_elsewhere_is_named_by_its_folder_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "runs dir" / "sd"
    line = next_line("small", True, None, None, folder)
    assert f"`autotune show '{folder}'` for this summary again" in line, line
    assert f"`autotune export '{folder}' -o recipe.yaml`" in line, line
    assert "--storage" not in line  # the folder's study.json names the storage
    # found by its name in a storage given: named so again, wherever its folder is
    line = next_line("small", True, None, "sqlite:///x.db", folder)
    assert "`autotune show small --storage sqlite:///x.db`" in line, line


def test_a_named_study_in_a_storage_keeps_it_and_says_its_password_is_masked() -> None:
    line = next_line("small", True, None, "postgresql://u:secret@db/x", None)
    assert "`autotune show small --storage postgresql://u:***@db/x`" in line, line
    assert "secret" not in line and "masked as ***" in line, line
