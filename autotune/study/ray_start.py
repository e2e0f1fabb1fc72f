"""Ray started beside the driver's other work: the driver opens its stores (MLflow's schema,
the Optuna study, the fingerprint) while a thread of its own starts a local Ray or joins the
cluster, and Ray shuts down in that thread while the driver writes the summary. Ray's start and
shutdown were two of the largest fixed parts of a study's wall time (benchmarks/RESULTS.md,
study overhead).

The thread lives until Ray is shut down: on Linux Ray ties the processes it starts (the GCS,
the raylet) to the *thread* that started them (a parent-death signal, which fires when that
thread ends, not the process), so a thread that ended after `ray.init` would take the local
Ray down with it.

`ray.init` outside the main thread sets no Python SIGTERM handler (Ray logs a warning saying so,
which is kept off the user's screen here), and its core worker sets a C++ one that aborts, which
the thread takes back at once (`_sigterm_kept`): the driver's own (`signals`) stops the study as
on Ctrl-C, and its `finally` clauses and the shutdown here still run.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune.study import signals
from autotune.study.session import end_gone_ray, init_ray, ray_env, raylet_lines


class _NoSigtermNote(logging.Filter):
    """Drops Ray's warning that it set no SIGTERM handler (the driver sets its own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SIGTERM handler is not set")


_QUIET = _NoSigtermNote()
START_GRACE_S = 10.0  # how long `close` waits for a start that has not finished
STOP_GRACE_S = 5.0  # how long `close` waits for Ray's shutdown once a signal stopped the study
GONE_WAIT_S = 2.0  # how long a local Ray's raylet is given to end once its GCS has


class RayStart:
    """Start Ray (`session.init_ray`) in a thread now; `wait` for it, `stop` to shut it down in
    that thread without waiting, `close` to shut it down (if nothing did) and wait for that."""

    def __init__(self, address: str | None, study_dir: Path, cpus: int | None = None) -> None:
        ray_env()
        import ray  # imported here, in the main thread: no import is shared between threads

        del ray
        logging.getLogger("ray._private.worker").addFilter(_QUIET)  # once: filters are a set
        self._ready = threading.Event()
        self._end = threading.Event()
        self._ray: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(address, study_dir, cpus), name="autotune-ray", daemon=True
        )
        self._thread.start()

    def _run(self, address: str | None, study_dir: Path, cpus: int | None) -> None:
        try:
            with _sigterm_kept():
                self._ray = init_ray(address, study_dir, cpus)
        except BaseException as e:  # handed to the main thread by `wait`
            self._error = e
        finally:
            self._ready.set()
        self._end.wait()
        if self._ray is None:
            return
        if signals.local_ray_gone(wait_s=GONE_WAIT_S):  # nothing to shut down but its agents
            end_gone_ray(study_dir)
            return
        with contextlib.suppress(Exception):
            self._ray.shutdown()
        raylet_lines(True)  # Ray is down: nothing of this study's is left to print

    def wait(self) -> Any:
        """`ray`, connected; the start's error (e.g. ClusterError) raised here."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self._ray

    def stop(self) -> None:
        """Shut Ray down in its thread; the caller goes on."""
        signals.leaving()
        self._end.set()

    def close(self) -> None:
        """Shut Ray down (if `stop` did not already) and wait until it is down. A start that
        has not finished (a driver stopped while it joins a cluster that does not answer: Ray
        retries for many minutes) is waited for only `START_GRACE_S`: the thread is a daemon,
        and a local Ray's processes end with it (their parent-death signal), so a Ctrl-C or a
        SIGTERM stops the driver instead of waiting on Ray. Once a signal stopped the study,
        the shutdown is waited for only `STOP_GRACE_S` (Ray's processes may be half gone: a
        SIGTERM to the whole process group reaches them too), and not run at all when the local
        Ray's GCS is already gone (`signals.local_ray_gone`: `ray.shutdown()` then waited ~8 s
        after the summary was printed): its raylet's agents, which outlive it, are ended
        instead (`session.end_gone_ray`)."""
        signals.leaving()
        self._end.set()
        if not self._ready.is_set():
            self._thread.join(START_GRACE_S)
        else:  # after a signal, a shutdown that hangs (Ray's processes half gone) is not waited on
            self._thread.join(STOP_GRACE_S if signals.stopping() else None)


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """The process's SIGTERM action as it was before, put back after: Ray's core worker, which
    `ray.init` starts, installs a C++ handler for SIGTERM that prints a crash report and aborts
    the driver, over the driver's own (`signals`). Put back from this thread at once (the action
    is the process's; Python can set its handlers only from the main thread, which may still be
    opening the stores), as an opaque copy of the `struct sigaction` (512 bytes hold it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    saved = ctypes.create_string_buffer(512)
    kept = libc.sigaction(signal.SIGTERM, None, saved) == 0
    try:
        yield
    finally:
        if kept:
            libc.sigaction(signal.SIGTERM, saved, None)
