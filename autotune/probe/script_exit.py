"""A script that ends its own process with `os._exit(0)` once it has reported every step (common,
to skip a slow DataLoader or NCCL teardown) is complete: `os._exit` skips whatever would come
after the script, `run_script`'s return and so the probe's summary, so while the script runs
`os._exit` is wrapped to build that summary first.

Only a call with status 0, in the process the script runs in (a forked DataLoader worker
inherits the wrapper and leaves as it asked), and only when the run ends as `run_script` would
take it (every step reported, or stopped by a divergence or out of memory, no bad report): a
script that leaves early is judged as before, a process that ended without a summary.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, NoReturn


def summary_before_os_exit(end: Callable[[], Any]) -> Callable[[], None]:
    """From now on, `os._exit(0)` in this process first calls `end()` (the run's checks and its
    summary; an exception there leaves the summary unmade), then exits. Returns what takes the
    wrapper back (a script run standalone keeps it until the process ends)."""
    real, pid = os._exit, os.getpid()

    def leave(status: int) -> NoReturn:
        if status == 0 and os.getpid() == pid and os._exit is leave:
            os._exit = real  # once: `end` exits the usual way, never through here again
            with contextlib.suppress(Exception):
                end()
        real(status)

    def restore() -> None:
        os._exit = real

    os._exit = leave
    return restore


@contextlib.contextmanager
def summary_on_os_exit(end: Callable[[], Any]) -> Iterator[None]:
    """While it is open, `os._exit(0)` in this process first calls `end()`
    (`summary_before_os_exit`)."""
    restore = summary_before_os_exit(end)
    try:
        yield
    finally:
        restore()
