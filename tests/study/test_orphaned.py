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
