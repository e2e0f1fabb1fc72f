"""The file a probe process reads its config from: one per probe, in the temp folder, named after
the process that wrote it (`autotune-probe-PID-XXXXXXXX.json`; the ranks of a DDP probe read
one of their own, `autotune-rank-PID-...`, that the probe process writes).

The writer (a Ray worker, the command running its probes itself, a DDP probe's process) removes
it when the probe is over. A writer killed mid-probe (a Ray worker SIGKILLed, a probe killed at
its time limit, a node out of memory) never does: the next file written on the machine removes
those whose writer is gone (`sweep`). It is not removed once read, because it is read more than
once: a fork that failed falls back to a fresh process with the same file, and each rank of a
DDP probe reads it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROBE = "autotune-probe-"
RANKS = "autotune-rank-"
#: The name of a file written here: the writer's pid, then tempfile's random part.
NAME = re.compile(r"^autotune-(?:probe|rank)-(\d+)-[A-Za-z0-9_]+\.json$")


def write(config: Mapping[str, Any], prefix: str = PROBE) -> str:
    """`config` as JSON in a new file of this process's (`prefix`: PROBE or RANKS); its path.
    Those a killed writer left are removed first (`sweep`)."""
    sweep()
    with tempfile.NamedTemporaryFile(
        "w", suffix=".json", prefix=f"{prefix}{os.getpid()}-", delete=False
    ) as f:
        json.dump(dict(config), f)
        return f.name


def remove(path: str) -> None:
    """Remove a file `write` made (gone already: nothing)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def sweep(folder: str | None = None) -> list[str]:
    """Remove the probe files in `folder` (the temp folder) whose writer is no longer running;
    the paths removed. Another user's files, and any it cannot tell, are left alone."""
    removed = []
    where = Path(folder or tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for path in where.glob("autotune-*-*.json"):
            found = NAME.match(path.name)
            if found is None or _running(int(found.group(1))):
                continue
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(str(path))
    return removed


def _running(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user's counts: it may be the writer)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, OSError):  # not ours to signal (EPERM): it may be the writer
        return True
    return True
