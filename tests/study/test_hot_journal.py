"""A driver killed in the middle of a write leaves a hot journal beside its SQLite storage;
the study is then still shown and resumed (its journal rolled back, as the next writer would),
not refused with "attempt to write a readonly database" (seen as a flaky resume after SIGKILL)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from assets import studies as h
from assets.cli import invoke

from autotune.study.storage import check_storage

WRITER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA cache_size=1")  # spill to the file: the journal is then hot
db.execute("BEGIN")
db.execute("CREATE TABLE junk(x)")
for i in range(20000):
    db.execute("INSERT INTO junk VALUES (?)", (str(i) * 50,))
print("writing", flush=True)
time.sleep(600)
"""


def killed_mid_write(db: Path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE)
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == b"writing"
    writer.kill()
    writer.wait()


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
