"""Ray processes a killed driver left behind.

A local Ray's GCS server and raylet end with the driver that started them, whatever killed it
(they are started with a parent-death signal). Two of the raylet's children are not: after a
`kill -9` of the driver, its `ray::DashboardAgent` and `ray::RuntimeEnvAgent` live on, re-parented
to init, holding their log files in the dead session's folder (and memory, and ports) until
someone ends them. `end_orphans(root)` does that before a study starts its own Ray in `root`:
it ends every process named ``ray::...`` whose parent is no longer a raylet and which holds a file
open under `root`. A live Ray's processes are the children of their raylet and are never touched,
nor is anything outside `root`.

Linux only (it reads /proc); elsewhere it finds nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

PROC = Path("/proc")


def orphans_under(root: Path) -> list[int]:
    """The pids of the Ray processes left by a dead driver that hold a file under `root`."""
    if not PROC.is_dir():
        return []
    prefix = str(root.resolve()) + os.sep
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            if not (entry / "cmdline").read_bytes().startswith(b"ray::"):
                continue
            if b"raylet" in (PROC / str(_parent(entry)) / "cmdline").read_bytes():
                continue  # a live Ray's process
            if any(_target(fd).startswith(prefix) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
    return sorted(found)


def end_orphans(root: Path) -> list[int]:
    """End (SIGKILL) `orphans_under(root)`; the pids ended."""
    ended = []
    for pid in orphans_under(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            ended.append(pid)
    return ended


def _parent(entry: Path) -> int:
    """The parent pid from /proc/PID/stat (the name in parentheses may hold spaces)."""
    return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])


def _target(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:
        return ""
