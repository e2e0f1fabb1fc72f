"""The study folder (`autotune.study.folder`): each file's place, and the one atomic JSON write
and read the records, rung records, verification seeds and study.json go through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.study import folder
from autotune.study import records as rc
from autotune.study import rung_phase as rp
from autotune.study import verification as ve


def test_every_file_has_its_own_place_in_the_folder(tmp_path: Path) -> None:
    paths = [
        folder.study_json(tmp_path),
        folder.optuna_db(tmp_path),
        folder.lock_file(tmp_path),
        folder.trial_path(tmp_path, 7),
        folder.rung_path(tmp_path, 7, 2),
        folder.verify_path(tmp_path, 7, seed=3, steps=120),
        folder.state_path(tmp_path, 7, 120),
        folder.ray_dir(tmp_path),
    ]
    assert len(set(paths)) == len(paths)
    assert all(p.resolve().is_relative_to(tmp_path.resolve()) for p in paths)
    assert folder.trial_path(tmp_path, 7).name == "0007.json"
    assert folder.rung_path(tmp_path, 7, 2).name == "0007-r2.json"
    assert folder.verify_path(tmp_path, 7, 3, 120).name == "0007-s120-seed3.json"
    assert folder.state_path(tmp_path, 7, 120).is_absolute()  # read by a probe elsewhere


def test_write_json_is_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "x.json"
    folder.write_json(path, {"a": 1, "p": Path("/x")})
    assert json.loads(path.read_text()) == {"a": 1, "p": "/x"}  # what JSON lacks, as str
    folder.write_json(path, {"a": 2}, indent=2)
    assert path.read_text() == '{\n  "a": 2\n}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"]


@pytest.mark.parametrize("text", [None, "{half", "[1, 2]", "\xff"])
def test_read_json_is_none_without_a_whole_object(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "x.json"
    if text is not None:
        path.write_bytes(text.encode("latin-1"))
    assert folder.read_json(path) is None


def test_the_records_go_through_the_folder(tmp_path: Path) -> None:
    record = {"number": 4, "outcome": "complete"}
    assert rc.write_outcome(tmp_path, record) == folder.trial_path(tmp_path, 4)
    assert folder.read_json(folder.trial_path(tmp_path, 4)) == record
    assert rc.read_outcome(tmp_path, 4) == record
    assert rc.read_outcome(tmp_path, 5) is None
    rp.write_rung_record(tmp_path, {"number": 4, "rung": 1, "steps": 60})
    assert folder.read_json(folder.rung_path(tmp_path, 4, 1)) == {
        "number": 4,
        "rung": 1,
        "steps": 60,
    }
    assert rp.read_rung_record(tmp_path, 4, 1, 60) is not None
    assert rp.read_rung_record(tmp_path, 4, 1, 120) is None  # another length does not count
    out = {"outcome": "complete", "summary": {"series": {"loss": [2.0, 1.0], "lr": [0.1, 0.1]}}}
    slim = ve.save_seed(tmp_path, 4, 9, out, 60)
    # without its step series, but with its loss (logged to the verification's MLflow run)
    assert slim == {"outcome": "complete", "summary": {}, "loss_series": [2.0, 1.0]}
    assert folder.read_json(folder.verify_path(tmp_path, 4, 9, 60)) == slim


def test_a_private_write_is_the_owners_alone_even_over_a_readable_file(tmp_path: Path) -> None:
    # study.json keeps the stores' URLs, passwords included (review: it was 0644)
    path = tmp_path / "study.json"
    path.write_text("{}")
    path.chmod(0o644)
    folder.write_json(path, {"storage": "postgresql://u:pw@h/db"}, private=True)
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["storage"] == "postgresql://u:pw@h/db"
