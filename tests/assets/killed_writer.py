"""A writer killed in the middle of an SQLite write (SIGKILL), leaving its hot journal beside the
file: what a driver killed mid-write leaves behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    """Begin a large write to `db`, then kill the writer before it commits."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE)
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == b"writing"
    writer.kill()
    writer.wait()
