"""A study folder whose study.json names another storage than this folder's own file, run
without --storage, is refused saying which storage to pass (`storage.check_folder_storage`).

From the seventh black-box review: in a PostgreSQL study's folder, `autotune study --resume`
without --storage said "no study 'term1' in sqlite:///...; drop --resume to start it", and
without --resume "its storage deleted or replaced ... remove the folder ... to start afresh",
though study.json named the PostgreSQL storage; neither said to pass --storage. The CLI in
this process (it stops before Ray or any store is touched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke, one_line_error

from autotune.study import folder

PG = "postgresql://optuna:s3cret@127.0.0.1:1/optuna"


@pytest.mark.parametrize("named", [PG, "sqlite:///{tmp}/shared.db"])
def test_a_folder_of_another_storage_says_to_pass_it(tmp_path: Path, named: str) -> None:
    named = named.format(tmp=tmp_path)
    space = h.write(tmp_path, h.mlp_space("term1", trials=2))
    study_dir = tmp_path / "autotune-studies" / "term1"
    (study_dir / "trials").mkdir(parents=True)
    (study_dir / "trials" / "0000.json").write_text("{}")  # an earlier run's record
    record = folder.meta_record(study_dir, "term1", named, tracking_uri=None)
    folder.study_json(study_dir).write_text(json.dumps(record))
    before = sorted(p.name for p in study_dir.rglob("*"))

    shown = PG.replace("s3cret", "***") if named == PG else named
    for extra in ([], ["--resume"]):
        result = invoke("study", "--space", space, "--study-dir", study_dir, *extra)
        line = one_line_error(result, f"pass --storage '{shown}'", "study 'term1'")
        assert "s3cret" not in line, line
        assert ("its password where *** is" in line) == (named == PG), line
        assert "drop --resume" not in line and "deleted or replaced" not in line, line
    assert sorted(p.name for p in study_dir.rglob("*")) == before, "the refused run made files"
    assert not (tmp_path / "shared.db").exists()


def test_a_folder_of_its_own_storage_is_not_refused_for_it(tmp_path: Path) -> None:
    """The folder's own file (moved: study.json names the old path) is its storage still."""
    space = h.write(tmp_path, h.mlp_space("mine", trials=2))
    study_dir = tmp_path / "autotune-studies" / "mine"
    study_dir.mkdir(parents=True)
    old = tmp_path / "elsewhere" / "mine" / "optuna.db"
    record = folder.meta_record(old.parent, "mine", f"sqlite:///{old}", tracking_uri=None)
    folder.study_json(study_dir).write_text(json.dumps(record))
    result = invoke("study", "--space", space, "--study-dir", study_dir, "--resume")
    line = one_line_error(result, "--resume: no study 'mine'")  # its own (empty) file's word
    assert "pass --storage" not in line, line


def test_another_studys_folder_given_as_study_dir_says_so(tmp_path: Path) -> None:
    """A black-box review: `--study-dir` of study 'small' for a new study 'other' was refused
    as "its storage deleted or replaced ... --set name=other-2", which failed the same way
    (the folder is the one given, whatever the name). Now it names the study the folder is
    of, and to give the new one a folder of its own; nothing in it changes."""
    study_dir = tmp_path / "sd"
    (study_dir / "trials").mkdir(parents=True)
    (study_dir / "trials" / "0000.json").write_text("{}")  # the earlier study's record
    own = f"sqlite:///{study_dir / 'optuna.db'}"
    folder.study_json(study_dir).write_text(json.dumps(folder.meta_record(study_dir, "small", own)))
    before = sorted(p.name for p in study_dir.rglob("*"))
    space = h.write(tmp_path, h.mlp_space("other", trials=2))
    result = invoke("study", "--space", space, "--study-dir", study_dir)
    line = one_line_error(result, f"{study_dir} is the folder of study 'small'", "study 'other'")
    assert "give it a folder of its own (--study-dir)" in line and "name=" not in line, line
    assert sorted(p.name for p in study_dir.rglob("*")) == before
