"""Reading an SQLite file without creating or changing it: the Optuna storage a study reads
(`show`, `studies`, a resume's checks) and the MLflow store `autotune ui` serves are both looked
at this way before anything opens them with a library that would add its tables to any file.

A writer killed in the middle of a write (SIGKILL, a crash) leaves a hot journal beside the
file: until a writer rolls it back, every read-only reader fails ("attempt to write a readonly
database"). `read_only` rolls it back first, as the next writer would: the file returns to its
last committed state.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Collection
from pathlib import Path


def read_only(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file `path` that can neither create nor change it (a killed
    writer's hot journal rolled back first: `recover`)."""
    recover(path)
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)


def recover(path: Path) -> None:
    """Roll back the hot journal a killed writer left beside the SQLite file `path`, when there
    is one and the file can be written (else a read-only reader says why it cannot read)."""
    journal = Path(f"{path}-journal")
    try:
        hot = journal.is_file() and journal.stat().st_size > 0 and os.access(path, os.W_OK)
    except OSError:
        return
    if not hot:
        return
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # the first read rolls back


def tables_problem(path: Path, tables: Collection[str], holds: str) -> str | None:
    """Why the SQLite file `path` does not hold `holds` (e.g. "Optuna storage"): not there,
    empty, not an SQLite database, or without every one of `tables`. None: it holds it."""
    if not path.is_file():
        return "no such database file"
    if path.stat().st_size == 0:
        return f"the database file is empty (no {holds} in it)"
    try:
        with contextlib.closing(read_only(path)) as con:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.Error as e:
        return f"not an SQLite database ({e})"
    if not set(tables) <= {r[0] for r in rows}:
        return f"not an {holds} (its tables are not in the file)"
    return None
