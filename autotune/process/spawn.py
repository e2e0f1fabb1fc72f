"""How autotune starts its processes: from one long-lived thread, each dying with its parent.

PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, and the thread a caller
runs in may end first (Ray ran each trial in a thread of its own under Ray Tune): processes are
started from one long-lived thread (`popen`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autotune-spawner")


# `python -m` puts the current folder first on sys.path. Run from a checkout with a non-editable
# install, the folder's autotune/ source tree (which lacks the shipped workloads and spaces) would
# then shadow the installed package. The probe's processes leave the current folder off sys.path,
# as a study's trials (which run in their own trial folders) always have: a workload is a file
# (path/file.py:make) or a module importable from the installation or PYTHONPATH.
_BOOT = (
    "import runpy, sys; sys.path.pop(0); module = sys.argv.pop(1); "
    "runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def python_module(module: str, *args: str) -> list[str]:
    """The command line that runs `python -m module args` without the current folder on
    sys.path."""
    return [sys.executable, "-c", _BOOT, module, *args]


def die_with_parent() -> None:
    """In a child: get SIGKILL when the thread that started it ends (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def popen(
    args: list[str], env: Mapping[str, str], stdin: int, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[str]:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            pass_fds=pass_fds,
            env=dict(env),
            text=True,
            errors="replace",  # a stray byte a program prints: U+FFFD, never a dead reader
            bufsize=1,
            start_new_session=True,  # the probe and all it starts are one process group
            preexec_fn=die_with_parent,  # in the probe process: SIGKILL when the worker dies
        )

    return _SPAWNER.submit(start).result()


def kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the probe and anything it started
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
    for stream in (proc.stdin, proc.stdout):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.close()
