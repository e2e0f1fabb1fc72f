"""A study folder that lost its study.json (deleted, or a driver killed before writing it) is
named as such by `show` and listed as unreadable by `studies`: a review found "not a study
folder, no ./autotune-studies/NAME" said of a folder that exists and holds the study."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets import studies as h

from autotune import study as st
from autotune.errors import StudyError
from autotune.study import folder
from autotune.study.listing import find_all


def test_a_folder_without_its_study_json_is_named_and_still_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    study_dir = h.recorded_study(tmp_path, "lost", trials=3, finished=3)
    folder.study_json(study_dir).unlink()
    for ref in ("lost", str(study_dir)):
        with pytest.raises(StudyError, match=r"study\.json: missing: the folder holds") as e:
            st.find_study(ref)
        assert f"--storage sqlite:///{(study_dir / 'optuna.db').resolve()}" in str(e.value)
    (listed,) = find_all(tmp_path / "autotune-studies")
    assert listed.name == "lost" and listed.error and "missing" in listed.error
    # what the message says to do reads it
    study, _, _, _ = st.find_study("lost", f"sqlite:///{study_dir / 'optuna.db'}")
    assert len(study.get_trials()) == 3
    (study_dir / "optuna.db").unlink()  # nothing of a study left: not a study folder
    with pytest.raises(StudyError, match="not a study folder"):
        st.find_study("lost")


def test_a_new_study_does_not_overwrite_an_earlier_ones_records(tmp_path: Path) -> None:
    """A review: with its optuna.db deleted, running the study again silently started afresh
    and overwrote trials/0000-0002.json."""
    from autotune import space as sp

    space = sp.loads(h.mlp_space("wiped", trials=3), source="wiped")
    study_dir = st.study_dir_for("wiped", tmp_path)
    (study_dir / "trials").mkdir(parents=True)
    record = study_dir / "trials" / "0000.json"
    record.write_text('{"number": 0}')
    opts = st.StudyOptions(space=space, study_dir=study_dir)
    storage = st.open_storage(st.storage_url(opts, study_dir))
    cond = sp.condition(space, platform="cpu")
    said = r"holds 1 trial record\(s\) of an earlier study, while .* no study 'wiped'"
    with pytest.raises(StudyError, match=said):
        st.open_study(opts, storage, cond, None, study_dir)
    assert record.read_text() == '{"number": 0}'
    record.unlink()  # an empty folder (a driver killed before its first trial): started
    assert st.open_study(opts, storage, cond, None, study_dir).study_name == "wiped"


def test_an_empty_study_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A review: `--study-dir ""` (an unset variable) put the study's files in this folder."""
    from typer.testing import CliRunner

    from autotune.cli import app

    monkeypatch.chdir(tmp_path)
    space = h.write(tmp_path, h.mlp_space("empty-dir", trials=1))
    for empty in ("", "  "):
        result = CliRunner().invoke(app, ["study", "--space", str(space), "--study-dir", empty])
        assert result.exit_code == 2, result.output
        assert "--study-dir is empty" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]  # nothing made
