"""A driver killed in the middle of a write leaves a hot journal beside its SQLite storage;
the study is then still shown and resumed (its journal rolled back, as the next writer would),
not refused with "attempt to write a readonly database" (seen as a flaky resume after SIGKILL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke
from assets.killed_writer import killed_mid_write

from autotune.study.storage import check_storage


@pytest.mark.integration
def test_a_study_killed_mid_write_is_shown_and_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    study_dir = h.recorded_study(tmp_path, "hot", trials=3, finished=3)
    db = study_dir / "optuna.db"
    killed_mid_write(db)
    journal = Path(f"{db}-journal")
    assert journal.is_file() and journal.stat().st_size > 0, "the writer left a hot journal"

    check_storage(f"sqlite:///{db}", study_dir)  # what a resume checks first: no refusal
    shown = invoke("show", "hot")
    assert shown.exit_code == 0, shown.output
    assert "3/3 trials" in shown.stdout
    assert not journal.exists() or journal.stat().st_size == 0, "rolled back"
    import sqlite3

    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall()
    assert ("junk",) not in tables, "the uncommitted write is gone"
