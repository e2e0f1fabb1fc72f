"""What a probe's processes left running when they ended: adopted, and ended.

A workload may start a helper process (a tokenizer server, a data-loader pool never shut down).
When the process that started it ends, Linux hands the helper to init, out of reach of a kill
that does not name its process group: and the groups at hand cannot be killed whole (the CLI's
is the shell's, a DDP rank's is its launcher's own). The helper keeps running, holding the
pipes it inherited (a rank's log, which the launcher reads to its end; the caller's stdout,
which `autotune probe | grep` reads to its end), so whoever reads them waits until it dies.

A process that is a *child subreaper* (Linux's PR_SET_CHILD_SUBREAPER) gets the orphans of its
descendants as its own children instead of init: `adopt_orphans()` makes this process one, and
`end_children(keep)` ends every child of this process not in `keep` (then the children those
had, which it adopts in turn); `ended()` does both around a block. A process that left with
`setsid` and a double fork is still adopted; one whose ancestors all ended before
`adopt_orphans()` is not.

Linux only (prctl, /proc); elsewhere both do nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection, Iterator
from pathlib import Path

PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
ROUNDS = 20  # a helper's helpers are adopted as each generation ends: a bound, not a guess


def adopt_orphans(on: bool = True) -> bool:
    """Make this process the one that its descendants' orphans are handed to (`on`), or stop;
    whether it was one before (to restore: a process that runs probes among other work, a test
    run, should not collect every orphan for good)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
        return bool(was.value)
    return False


def children() -> set[int]:
    """The pids of this process's children (zombies included: they are reaped when ended)."""
    me, found = os.getpid(), set[int]()
    if not PROC.is_dir():
        return found
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the name in parentheses may hold spaces: the fields after the last ')'
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(entry.name))
    return found


def end_children(keep: Collection[int] = ()) -> list[int]:
    """SIGKILL and reap every child of this process not in `keep`, and the children they leave
    to it; the pids ended. A child is this process's until reaped: its pid cannot be reused
    meanwhile, so nothing else is ever signalled."""
    ended: list[int] = []
    for _ in range(ROUNDS):
        left = children() - set(keep)
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            ended.append(pid)
    return ended


@contextlib.contextmanager
def ended() -> Iterator[None]:
    """Within: this process adopts its descendants' orphans. At the end: every child it did not
    have before is ended (what a probe run in this process left running)."""
    was = adopt_orphans()
    before = children()
    try:
        yield
    finally:
        end_children(before)
        adopt_orphans(was)
