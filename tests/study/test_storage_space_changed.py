"""A study folder whose study is run again with another space is refused with advice that
works: a review deleted the optuna.db the message named, and the next run was refused again
(the folder's trial records of the earlier study). The folder is named, and removing it lets
the study start afresh; a shared storage is not told to be deleted whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.errors import StudyError


def opened(study_dir: Path, storage: str | None = None) -> tuple[st.StudyOptions, str]:
    """The options and storage URL of study `sc` at 40 steps (recorded at 30)."""
    text = h.mlp_space("sc", trials=2)
    space = sp.loads(text, source="sc", overrides=["probe.steps=40"])
    opts = st.StudyOptions(space=space, study_dir=study_dir, storage=storage)
    return opts, st.storage_url(opts, study_dir)


def test_the_advice_for_a_changed_space_is_to_remove_the_study_folder(tmp_path: Path) -> None:
    study_dir = h.recorded_study(tmp_path, "sc", trials=2, finished=2)
    opts, url = opened(study_dir)
    cond = sp.condition(opts.space, platform="cpu")
    with pytest.raises(StudyError) as refused:
        st.open_study(opts, st.open_storage(url), cond, None, study_dir)
    said = str(refused.value)
    assert "with a different space (probe.steps changed)" in said
    assert f"or remove its study folder {study_dir} (its optuna.db and trial records)" in said
    assert "or delete sqlite" not in said
    shutil.rmtree(study_dir)  # what it says to do
    study_dir.mkdir()
    assert st.open_study(opts, st.open_storage(url), cond, None, study_dir).study_name == "sc"


def test_a_shared_storage_is_told_to_delete_only_this_study(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    study_dir = h.recorded_study(tmp_path, "sc", trials=2, finished=1, storage=shared)
    opts, url = opened(study_dir, shared)
    cond = sp.condition(opts.space, platform="cpu")
    with pytest.raises(StudyError) as refused:
        st.open_study(opts, st.open_storage(url), cond, study_dir, study_dir)
    assert (
        f"delete it from the storage (optuna delete-study --study-name sc --storage "
        f"'{shared}') and remove its study folder {study_dir}"
    ) in str(refused.value)
