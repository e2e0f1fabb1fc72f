"""Black-box finding bb4 F14 (its last paragraph): `show c5`, where the study folder's
study.json is a link to /dev/zero, said "not a study folder" (no study 'c5'), while `studies`
lists such a folder as unreadable. `show` and `export` now name the study.json and why it cannot
be read, as `studies` does. Real folders, links and FIFOs; a real SQLite Optuna study beside
them; the commands through typer's CliRunner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error
from assets.studies import recorded_study


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def unreadable(here: Path, kind: str) -> Path:
    """./autotune-studies/c5 with a study.json of `kind`; its folder."""
    study_dir = here / "autotune-studies" / "c5"
    study_dir.mkdir(parents=True)
    meta = study_dir / "study.json"
    if kind == "zero":
        meta.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(meta)
    elif kind == "folder":
        meta.mkdir()
    else:  # a link to nothing
        meta.symlink_to(here / "gone.json")
    return study_dir


WHY = {
    "zero": "not a regular file (a device, FIFO or socket)",
    "fifo": "not a regular file (a device, FIFO or socket)",
    "folder": "not a regular file (a folder)",
    "dangling": "No such file or directory",
}


@pytest.mark.parametrize("kind", ["zero", "fifo", "folder", "dangling"])
def test_show_and_export_name_a_study_json_that_cannot_be_read(here: Path, kind: str) -> None:
    recorded_study(here, "good", trials=3, finished=2)
    study_dir = unreadable(here, kind)
    for ref in ("c5", str(study_dir), "autotune-studies/c5"):
        line = one_line_error(invoke("show", ref), f"c5/study.json: cannot read it: {WHY[kind]}")
        assert "no study" not in line and "not a study folder" not in line
    one_line_error(invoke("export", "c5", "-o", "r.yaml"), "c5/study.json: cannot read it")
    assert not (here / "r.yaml").exists()
    # `studies` lists it, unreadable, with the same reason, beside the good one.
    listed = invoke("studies", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert sorted(rows) == ["c5", "good"]
    assert WHY[kind] in rows["c5"]["error"], rows["c5"]
    assert "error" not in rows["good"]


def test_a_folder_without_study_json_is_still_no_study(here: Path) -> None:
    (here / "autotune-studies" / "empty").mkdir(parents=True)
    line = one_line_error(invoke("show", "empty"), "no study 'empty'")
    assert "not a study folder" in line
