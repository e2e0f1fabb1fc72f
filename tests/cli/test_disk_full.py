"""A full disk is one line naming what filled up, status 1, not a traceback (a black-box review
saw a study whose disk filled in its rungs end in 164 lines of SQLAlchemy). Real errors: a write
to /dev/full (ENOSPC), and SQLite's SQLITE_FULL through SQLAlchemy (a page limit)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import typer

from autotune.cli.app import disk_full, user_errors


def _fill_dev_full() -> None:
    with open("/dev/full", "w") as f:
        f.write("x" * 10_000)
        f.flush()


def _fill_sqlite(path: Path) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as con:
        con.execute(sa.text("PRAGMA max_page_count = 4"))
        con.execute(sa.text("CREATE TABLE t (x BLOB)"))
        for _ in range(50):
            con.execute(sa.text("INSERT INTO t VALUES (:x)"), {"x": b"\0" * 4000})


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_write_to_a_full_device_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exit_:
        user_errors(_fill_dev_full)()
    assert exit_.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: no space left on the device (") and err.count("\n") == 1
    assert "--resume" in err


def test_a_full_sqlite_database_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as exit_:
        user_errors(_fill_sqlite)(tmp_path / "full.db")
    assert exit_.value.exit_code == 1
    assert "database or disk is full" in capsys.readouterr().err


def test_other_errors_pass_through() -> None:
    def boom() -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        user_errors(boom)()
    chained = RuntimeError("wrapper")
    chained.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded", "/data/x")
    assert disk_full(chained) == "/data/x"
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None
