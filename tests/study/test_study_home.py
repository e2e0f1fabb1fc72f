"""A study in a shared `--storage` is continued only from its home folder (`study/home.py`).

From the fifth black-box review: a second driver started from another folder with the same
`--storage` re-ran the first driver's running baseline as "interrupted", ran 15 trials of a
budget of 8 and split the records between two folders and two MLflow stores; `--resume` from
another folder split them the same way. Real studies (local Ray, a real SQLite Optuna storage
shared by two folders, SQLite MLflow stores) through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest
from assets import studies as h

from autotune.study import attrs as ua

pytestmark = pytest.mark.integration


def test_a_study_in_a_shared_storage_is_continued_only_from_its_folder(tmp_path: Path) -> None:
    """Refused from another folder (a second driver, or --resume), continued from its home;
    then, its folder removed, refused from its home too (below). One study for both checks:
    each was a test running its own study of two trials on the same space."""
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    first, second = tmp_path / "B", tmp_path / "C"
    first.mkdir()
    second.mkdir()
    space = h.write(tmp_path, h.mlp_space("shared", trials=2, steps=20))
    cmd = ["study", "--space", str(space), "--storage", storage]
    done = h.autotune(cmd, first, token=h.new_token(), timeout=590)
    assert done.returncode == 0, h.explain(done)
    study = optuna.load_study(study_name="shared", storage=storage)
    home = study.user_attrs[ua.HOME]
    assert home["folder"] == str((first / "autotune-studies" / "shared").resolve())

    for extra in ([], ["--resume"]):  # a second driver, or a resume, from another folder
        other = h.autotune([*cmd, *extra], second, token=h.new_token(), timeout=300)
        assert other.returncode == 2, h.explain(other)
        line = other.stderr.strip().splitlines()[-1]
        assert line.startswith("autotune: error: study 'shared'"), line
        assert home["folder"] in line and "continue it from there" in line, line
        assert not (second / "autotune-studies").exists(), "the refused driver made a folder"
        assert not (second / "mlflow.db").exists(), "the refused driver made an MLflow store"
    trials = optuna.load_study(study_name="shared", storage=storage).get_trials()
    assert len(trials) == 2, "the refused driver ran trials"

    # from its home it continues; with nothing left to run, without starting a Ray at all
    marks = tmp_path / "timeline.jsonl"
    env = {**h.cli_env(h.new_token()), "AUTOTUNE_TIMELINE": str(marks)}
    again = h.autotune([*cmd, "--resume"], first, env=env, timeout=300)
    assert again.returncode == 0, h.explain(again)
    assert "study shared: all 2 trials are done" in again.stdout, h.explain(again)
    seen = [json.loads(line)["at"] for line in marks.read_text().splitlines()]
    assert "mlflow store" in seen and "summary logged" in seen, seen
    assert "ray up" not in seen and "ray started" not in seen, seen
    meta = json.loads((first / "autotune-studies" / "shared" / "study.json").read_text())
    assert meta["name"] == "shared"

    _refused_once_its_folder_is_removed(cmd, first, storage, "shared")


def _refused_once_its_folder_is_removed(cmd: list[str], cwd: Path, storage: str, name: str) -> None:
    """From the seventh black-box review: with a PostgreSQL storage, the same command after
    `rm -rf autotune-studies/NAME` continued the study ("all 8 trials are done") with its
    records gone, printed a compute of the screen alone ("91% less than every trial") and wrote
    it over the parent MLflow run's right figure. It is refused, and nothing is written."""
    study_dir = cwd / "autotune-studies" / name
    shutil.rmtree(study_dir)
    before = optuna.load_study(study_name=name, storage=storage)
    mlflow_db = (cwd / "mlflow.db").read_bytes()

    for extra in ([], ["--resume"]):
        again = h.autotune([*cmd, *extra], cwd, token=h.new_token(), timeout=300)
        assert again.returncode == 2, h.explain(again)
        lines = again.stderr.strip().splitlines()
        assert len([x for x in lines if x.startswith("autotune: error:")]) == 1, again.stderr
        line = lines[-1]
        assert str(study_dir.resolve()) in line and name in line, line
        assert "Restore the folder" in line and f"--set name={name}-2" in line, line
        assert not study_dir.exists(), "the refused driver made the study's folder again"
    after = optuna.load_study(study_name=name, storage=storage)
    assert after.user_attrs == before.user_attrs, "the refused driver wrote to the study"
    assert len(after.get_trials()) == len(before.get_trials())
    assert (cwd / "mlflow.db").read_bytes() == mlflow_db, "the refused driver wrote MLflow"
