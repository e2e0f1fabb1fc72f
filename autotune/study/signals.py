"""How the driver stops on a signal: SIGINT (Ctrl-C) and SIGTERM (`timeout`, a batch scheduler)
both stop the study in whatever phase it is, keep what finished, print one "interrupted" line and
the summary so far; the same command (or `--resume`) continues it. The exit status says which
signal it was: 130 (SIGINT) or 143 (SIGTERM).

Until Ray is up (`handled`) a signal raises KeyboardInterrupt: the driver is opening its stores or
waiting for Ray (a cluster that does not answer is retried for minutes), and nothing is written
yet that a resume needs. Once Ray is up (`defer`) a signal only notes that the study is to stop
(`stopping`): each phase looks at it between its probes (`workers.run_feed`) and stops there. A
KeyboardInterrupt raised at any point of Ray's own Python code (a task being submitted, a
reference freed) can leave Ray's core worker inconsistent, which then aborts the process.

Two things take these signals from the driver unless it takes them back:
- A shell starts a script's background job (`autotune study ... &`) with SIGINT ignored, and
  Python leaves it ignored. `handled` and `defer` install the driver's handler whatever was
  inherited.
- Ray's core worker, started by `ray.init` (in the driver's Ray thread), installs a C++ handler
  for SIGTERM that prints a crash report and aborts (status 134) before Python sees the signal.
  That thread puts the driver's back as soon as `ray.init` returns (`ray_start`).

A KeyboardInterrupt raised while the interpreter's import lock is held is not raised there:
importlib takes that lock in places where an exception before its `try` leaves it taken (a
module lock's clean-up callback, which also prints "Exception ignored" and drops the exception),
and every other thread's import then waits for ever (the driver's Ray thread, so the driver
hung on a SIGTERM sent while it imported). The stop is noted, and the signal is delivered again
to the main thread every few milliseconds (`_thread.interrupt_main`) until it lands where the
lock is free.
"""

from __future__ import annotations

import _imp
import _thread
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from autotune import startup

#: The signal that stopped the study ("by"), once one did.
_STOPPED: dict[str, int] = {}

#: One entry per `handled` entered and not yet left.
_DEPTH: list[int] = []

#: Set once the driver ends its own Ray (`leaving`), and once its GCS is watched.
_LEAVING: list[bool] = []
_WATCHING: list[bool] = []

#: Set once this session's study is written (`written`): a --resume can find it.
_WRITTEN: list[bool] = []

#: What the driver does before the watch of its Ray ends it at once (`os._exit`): end the
#: study's MLflow runs still RUNNING as KILLED (`on_abort`), each given at most `ABORT_S`.
_ON_ABORT: list[Callable[[], None]] = []
ABORT_S = 5.0

#: The signal whose KeyboardInterrupt waits for the import lock (`_raise`), while it waits
#: ("by"); once it landed, until when (`time.monotonic`) a delivery is a late one of it
#: ("late_until").
_PENDING: dict[str, float] = {}
#: How often a waiting signal is delivered again, and how long after it lands a delivery is
#: taken for one of those (seconds).
RETRY_S = 0.02
LATE_S = 0.5

#: What the driver says (on stderr) when it is stopped where no phase says it.
INTERRUPTED = "interrupted; run the same command again (or add --resume) to continue"
#: ... and when it is stopped before it wrote anything (opening its stores, joining Ray): what it
#: made is removed (a new study's --resume would find no study; one that existed is as it was).
INTERRUPTED_EARLY = "interrupted before this run wrote anything; run the same command again"


def _main_thread() -> bool:
    """Signal handlers can only be set in the main thread (tests call the driver from others)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """In the main thread, until Ray is up: SIGINT and SIGTERM raise KeyboardInterrupt (once the
    import lock is free: see the module), even where SIGINT was inherited as ignored; the
    handlers found are put back on leaving (the driver run in a test's process leaves it as it
    was). The outermost forgets an earlier study's signal."""
    if not _main_thread():
        yield
        return
    if not _DEPTH:
        _STOPPED.clear()
        _LEAVING.clear()
        _WATCHING.clear()
        _WRITTEN.clear()
        _ON_ABORT.clear()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, _raise)
    signal.signal(signal.SIGTERM, _raise)
    _DEPTH.append(1)
    try:
        noted = startup.take_noted()  # a Ctrl-C while the command started, SIGINT ignored
        if noted is not None:
            _STOPPED["by"] = noted
            raise KeyboardInterrupt
        yield
    finally:
        _DEPTH.pop()
        _PENDING.clear()
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


def defer(cluster: str | None = None) -> None:
    """In the main thread, once Ray is up: SIGINT and SIGTERM note that the study is to stop
    (`stopping`); the phases stop at their next probe. The Ray the driver is on is watched
    from now on: its local Ray's GCS, or the GCS of the cluster it joined at `cluster` (the
    address as the user gave it, for the message)."""
    if _main_thread():
        signal.signal(signal.SIGINT, _note)
        signal.signal(signal.SIGTERM, _note)
    _PENDING.clear()  # noted already: the phases see it (`stopping`)
    if _WATCHING:
        return
    gcs = _local_gcs()
    head = _joined_gcs() if cluster else None
    if gcs is None and head is None:
        return
    _WATCHING.append(True)
    watch = threading.Thread(
        target=_watch_local_ray if gcs is not None else _watch_cluster,
        args=(gcs,) if gcs is not None else (head, cluster),
        name="autotune-ray-watch",
        daemon=True,
    )
    watch.start()


def _raise(signum: int, _frame: FrameType | None) -> None:
    _STOPPED["by"] = signum
    if _imp.lock_held():  # see the module: raised here, it could leave the import lock taken
        if "by" not in _PENDING:
            _PENDING["by"] = signum
            threading.Thread(target=_deliver_again, name="autotune-signal", daemon=True).start()
        return
    if _PENDING.pop("by", None) is not None:
        # the waiting signal lands now; one more delivery may be on its way: not a new signal
        _PENDING["late_until"] = time.monotonic() + LATE_S
    elif time.monotonic() < _PENDING.get("late_until", 0.0):
        return
    raise KeyboardInterrupt


def _deliver_again() -> None:
    """The waiting signal, to the main thread again (its handler runs there, `_raise`), until
    it was raised or the handlers changed (`handled` left, `defer`)."""
    while True:
        time.sleep(RETRY_S)
        signum = _PENDING.get("by")
        if signum is None:
            return
        _thread.interrupt_main(signal.Signals(int(signum)))


def _note(signum: int, frame: FrameType | None) -> None:
    """The study is to stop: each phase stops at its next look (`stopping`)."""
    _STOPPED.setdefault("by", signum)


def on_abort(fn: Callable[[], None]) -> None:
    """Run `fn` (in a thread of its own, at most `ABORT_S`) if the driver is ended at once
    because its Ray went away (`_watch_local_ray`, `_watch_cluster`): what an orderly stop would
    have done that cannot wait for the main thread, which is stuck in Ray's code then."""
    _ON_ABORT.append(fn)


def _abort_hooks() -> None:
    for fn in list(_ON_ABORT):
        done = threading.Thread(target=_quiet(fn), name="autotune-abort", daemon=True)
        done.start()
        done.join(ABORT_S)


def _quiet(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with contextlib.suppress(Exception):  # the process ends next: nothing to say it to
            fn()

    return run


def written() -> None:
    """The study is written (in its storage, with its MLflow run): a stop now keeps it."""
    _WRITTEN.append(True)


def interrupted_text() -> str:
    """The "interrupted" line for a stop where no phase says it: the same command continues a
    study that is written; before that, it starts it (--resume is not advised)."""
    return INTERRUPTED if _WRITTEN else INTERRUPTED_EARLY


def leaving() -> None:
    """The driver is ending its own Ray: its processes ending now are not the signal's doing."""
    _LEAVING.append(True)


#: How a local Ray process that a SIGTERM ended exits: killed by it, or its clean exit on it (0:
#: the raylet shuts down on a SIGTERM, and a process group's reaches it before the driver's
#: handler runs if the driver waits in Ray's C++ code).
_TERMED = frozenset({-signal.SIGTERM, 0})


def _watch_local_ray(gcs: tuple[Any, str, Any]) -> None:
    """While the driver's local Ray runs: its control process (GCS: the Popen and its address)
    ending, or no longer answering on its port, before the driver ends Ray (`leaving`) leaves
    the driver inside Ray calls that wait 60 s for it and then end the process (status 1, no
    summary). A SIGTERM sent to the driver's whole process group (a batch scheduler cancelling
    the job, `kill -TERM -PGID`) does that: the GCS shuts its server down (and may hang there),
    and the driver's own handler does not run while its thread waits in Ray's C++ code. So the
    driver says what happened and exits at once: 143 when a SIGTERM stopped Ray (the GCS stopped
    answering, or it or the raylet ended as a SIGTERM ends them: killed by it, or status 0, the
    raylet's clean exit on one; or the driver noted one itself), else 1. What finished is on
    disk and in Optuna; `--resume` carries on (and logs to MLflow what was not logged yet). The
    node's raylet is watched too: the GCS may outlive the SIGTERM (its server still answering)
    while the raylet ended, and Tune's clean-up then waited for ever on the raylet (a placement
    group removed)."""
    proc, address, raylet = gcs
    refused = 0
    while not _LEAVING:
        code = proc.poll()
        refused = refused + 1 if code is None and _refuses(address) else 0
        ended = raylet.poll() if raylet is not None and code is None and refused < 2 else None
        if (code is not None or refused >= 2 or ended is not None) and not _LEAVING:
            termed = (
                (code is None and ended is None)
                or bool({code, ended} & _TERMED)
                or _STOPPED.get("by") == signal.SIGTERM
            )
            what = "control process (GCS)" if ended is None else "node manager (raylet)"
            why = (
                "the local Ray was stopped by a SIGTERM (one sent to the whole process group "
                "reaches Ray's own processes too)"
                if termed
                else f"the local Ray's {what} ended (status {code if ended is None else ended})"
            )
            sys.stdout.flush()
            sys.stderr.write(
                f"autotune: interrupted: {why}, so no summary; what finished is kept: run the "
                "same command again (or add --resume) to continue\n"
            )
            sys.stderr.flush()
            _abort_hooks()
            os._exit(128 + signal.SIGTERM if termed else 1)
        time.sleep(0.5)


def _watch_cluster(gcs: str, shown: str) -> None:
    """While the driver is joined to a cluster: its head's GCS (at `gcs`) refusing connections
    (the head's processes ended: the head stopped, crashed or was killed) leaves the driver
    inside Ray calls that wait 60 s for it and then end the process with Ray's own line, "Failed
    to connect to GCS within 60 seconds" (status 1, no summary, no hint). So the driver says
    what happened and exits at once (status 1); what finished is on disk and in Optuna, and
    `--resume` carries on once the cluster is back. A head that does not answer at all (its
    machine gone from the network) is not told from a slow one here: Ray's 60 s decide."""
    refused = 0
    while not _LEAVING:
        refused = refused + 1 if _refuses(gcs) else 0
        if refused >= 2 and not _LEAVING:
            sys.stdout.flush()
            sys.stderr.write(
                f"autotune: error: lost the Ray cluster at {shown}: its head (GCS {gcs}) "
                "refuses connections, so no summary; what finished is kept: once the cluster "
                "is back, run the same command with --resume to continue\n"
            )
            sys.stderr.flush()
            _abort_hooks()
            os._exit(1)
        time.sleep(0.5)


def _joined_gcs() -> str | None:
    """The GCS address of the cluster this driver joined (as Ray resolved it); None when Ray's
    private layout is not the one known here."""
    try:
        from ray._private import worker as ray_worker

        node = ray_worker._global_node
        return str(node.gcs_address) if node is not None and node.gcs_address else None
    except Exception:
        return None


def _refuses(address: str) -> bool:
    """Whether the GCS at host:port refuses a connection (its server stopped); a slow answer or
    any other error is no refusal."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2.0):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False


def _local_gcs() -> tuple[Any, str, Any] | None:
    """The local Ray's GCS process (a Popen), its address and the raylet's process (a Popen;
    None when not found), when this driver started Ray; None otherwise (a cluster's lives
    elsewhere) or when Ray's private layout is not the one known here."""
    try:
        from ray._private import ray_constants
        from ray._private import worker as ray_worker

        node = ray_worker._global_node
        infos = node.all_processes.get(ray_constants.PROCESS_TYPE_GCS_SERVER) if node else None
        if not infos:
            return None
        raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
        raylet = raylets[0].process if raylets else None
        return infos[0].process, str(node.gcs_address), raylet
    except Exception:
        return None


def stopping() -> bool:
    """Whether a signal asked the study to stop."""
    return "by" in _STOPPED


def local_ray_gone(wait_s: float = 0.0) -> bool:
    """Whether the local Ray this driver started has lost its control process (GCS): ended, or
    refusing connections. A SIGTERM to the whole process group ends it; `ray.shutdown()` then
    waits ~8 s for a GCS that will not answer (measured, Ray 2.60) before it returns, after the
    study's summary is printed. When gone, its raylet is given `wait_s` to end too (its agents
    are orphans, `session.end_gone_ray`, only then). False for a cluster (its GCS is not this
    driver's) and when Ray's private layout is not the one known here."""
    gcs = _local_gcs()
    if gcs is None:
        return False
    proc, address, raylet = gcs
    if proc.poll() is None and not _refuses(address):
        return False
    if raylet is not None:
        with contextlib.suppress(Exception):  # still running after wait_s: left as it is
            raylet.wait(wait_s)
    return True


def exit_status() -> int:
    """A stopped study's exit status, as a shell reports a process that the signal ended: 130
    for SIGINT (also when none was noted: a KeyboardInterrupt), 143 for SIGTERM."""
    return 128 + _STOPPED.get("by", signal.SIGINT)
