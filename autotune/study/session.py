"""The study's Ray session and resources: a quiet local Ray or a cluster's, the resources and
concurrency of the trials, and the lock that allows one driver per study folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import shutil
import socket
import sqlite3
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import ClusterError, StudyError
from autotune.process.orphans import end_orphans
from autotune.sqlite_read import read_only
from autotune.study import signals
from autotune.study.folder import lock_file, ray_dir
from autotune.study.storage import check_tcp
from autotune.tracking.connection import make_folder

WORKER_NICENESS = "RAY_worker_niceness"  # a local Ray's workers (and their probes) run at it


def ray_env() -> None:
    """Settings for a quiet, local-friendly Ray: no usage stats."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


AUTH_MODE = "RAY_AUTH_MODE"


def auth_hint() -> str:
    """What to check when a cluster that answers cannot be joined and this driver does not use
    Ray's token authentication: Ray 2.59 and later start a cluster with it on (`ray start`
    prints "Token authentication is enabled"), and a driver without the token is refused
    (InvalidAuthToken in Ray's log lines above the error)."""
    if os.environ.get(AUTH_MODE, "").strip().lower() == "token":
        return (
            " (this driver uses Ray's token authentication, RAY_AUTH_MODE=token: its token, "
            "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, must be the cluster's)"
        )
    return (
        "; if Ray's log above says InvalidAuthToken, the cluster uses Ray's token "
        "authentication (on by default from Ray 2.59): run the study with RAY_AUTH_MODE=token "
        "and the cluster's token (~/.ray/auth_token on the head, or RAY_AUTH_TOKEN), or start "
        "every node with RAY_AUTH_MODE=disabled on a network you trust (README, Scaling out)"
    )


_RAY_HINT = (
    "start it with `ray start --head`, or pass the head's address (host:6379) to --address / "
    "RAY_ADDRESS"
)
#: HTTP/2's client connection preface and an empty SETTINGS frame: what a gRPC client (Ray's)
#: sends first; an HTTP/2 server (a Ray GCS) answers with a SETTINGS frame of its own at once.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_WAIT_S = 10.0  # a GCS answers in milliseconds; a busy machine is given seconds


def check_ray_address(address: str) -> None:
    """The cluster's address answers, and as Ray's GCS does (gRPC: HTTP/2). A port that
    answers otherwise (a database's, a web server's) or says nothing was joined by Ray for
    minutes, its "Failed to connect to GCS" repeated, never giving up: it is refused here in one
    line naming it (ClusterError), before anything is made. A GCS with TLS (RAY_USE_TLS) does
    not speak plain HTTP/2: its address is only checked to answer."""
    check_tcp(address, what="the Ray cluster", hint=_RAY_HINT)  # named as given, not ray://
    if os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true"):
        return
    url = address if "://" in address else f"ray://{address}"  # parsed as a URL, not shown
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if parsed.port is None:
        return
    answer = http2_answer(parsed.hostname or "127.0.0.1", parsed.port)
    if answer is True:
        return
    said = (
        f"its port accepts connections but says nothing within {HTTP2_WAIT_S:.0f} s"
        if answer is None
        else "its port answers, but not as Ray does (no Ray GCS listens there: another "
        "service's port?)"
    )
    raise ClusterError(f"cannot join the Ray cluster at {address}: {said}; {_RAY_HINT}")


def http2_answer(host: str, port: int, wait_s: float = HTTP2_WAIT_S) -> bool | None:
    """Whether the server at host:port answers a gRPC client's first bytes as an HTTP/2 server
    does (a SETTINGS frame first); None when it says nothing within `wait_s`. A connection
    that fails is False (`check_tcp` has found it answering just before)."""
    head = b""
    try:
        with socket.create_connection((host, port), timeout=3.0) as conn:
            conn.sendall(_HTTP2_HELLO)
            conn.settimeout(wait_s)
            while len(head) < 9:  # a frame's header: length (3), type (1), flags, stream id
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except TimeoutError:
        return None if not head else False
    except OSError:
        return False
    return len(head) == 9 and head[3] == 4 and not head[4] & 1  # SETTINGS, not an ACK


@contextlib.contextmanager
def ray_session(
    address: str | None, study_dir: Path, cpus: int | None = None, started: Any = None
) -> Iterator[Any]:
    """Join the cluster at `address` (or $RAY_ADDRESS), else start a local Ray for this study;
    shut it down on leaving. `started`: a `ray_start.RayStart` already starting it (the driver
    starts Ray while it opens its stores): waited for here, and shut down in its own thread on
    leaving (the driver's next steps do not wait for Ray's shutdown; `RayStart.close` does)."""
    if started is not None:
        ray = started.wait()
        # not printed until Ray is shut down (`RayStart` turns them back on then): a worker's
        # death is published a moment after its task failed, past the last phase of a study
        raylet_lines(False)
        try:
            yield ray
        finally:
            # A Ray handle freed in this thread while Ray shuts down in its own makes Ray end
            # the process (exit status 1, "The core worker has already been shutdown"): the
            # handles left in reference cycles are freed now, while Ray is up. On a cluster
            # the shutdown is only a disconnect: it is waited for, so nothing races it.
            gc.collect()
            if address or os.environ.get("RAY_ADDRESS"):
                started.close()
            else:
                started.stop()
        return
    ray = init_ray(address, study_dir, cpus)
    try:
        with _no_raylet_lines():
            yield ray
    finally:
        signals.leaving()
        ray.shutdown()


@contextlib.contextmanager
def _no_raylet_lines() -> Iterator[None]:
    """While the study's phases run, the raylet's error messages are not printed
    (`raylet_lines`)."""
    before = raylet_lines(False)
    try:
        yield
    finally:
        raylet_lines(before)


def raylet_lines(on: bool) -> bool:
    """Turn the printing of the raylet's error messages on or off; whether it was on. The
    driver's Ray thread prints each on stdout ("(raylet) A worker died or was killed ...")
    beside autotune's own line for the probe that failed (`worker_died`). Ray's switch for its
    worker-log printing (what it turns off at a breakpoint) is the only one for them; with
    `log_to_driver` off nothing else is printed through it (no output of the user's)."""
    from ray._private import worker

    before = bool(worker._worker_logs_enabled)
    worker._worker_logs_enabled = on
    return before


def ray_temp(study_dir: Path) -> Path:
    """The folder a local Ray started for the study keeps its files in: the study folder's own
    when the path is short enough for Ray's unix sockets (107 bytes; Ray appends up to 64 bytes
    to it), else a short temp folder shared by this user's studies."""
    temp = ray_dir(study_dir)
    if len(str(temp.resolve())) > 40:
        temp = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
    return temp


def end_gone_ray(study_dir: Path) -> None:
    """What is left of a local Ray whose control process ended under the driver (a SIGTERM to
    the whole process group): its raylet's agents, which outlive it (`end_orphans`)."""
    with contextlib.suppress(OSError):
        end_orphans(ray_temp(study_dir))


def init_ray(address: str | None, study_dir: Path, cpus: int | None = None) -> Any:
    """`ray`, connected: to the cluster at `address` (or $RAY_ADDRESS; ClusterError when it
    cannot be joined), else to a local Ray started for this study."""
    ray_env()
    address = address or os.environ.get("RAY_ADDRESS") or None
    import ray

    kwargs: dict[str, Any] = {
        "log_to_driver": False,
        "logging_level": logging.WARNING,
        "include_dashboard": False,
    }
    if address:  # run() has already checked that a host:port address answers
        try:
            ray.init(address=address, **kwargs)
        except Exception as e:
            raise ClusterError(
                f"cannot join the Ray cluster at {address}: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}; start it with "
                f"`ray start --head` or fix --address / RAY_ADDRESS{auth_hint()}"
            ) from e
        return ray
    # A local Ray without a token prompt, its files in `ray_temp`.
    os.environ.setdefault(AUTH_MODE, "disabled")
    # Ray runs its workers at nice 15 (its `worker_niceness`), and a probe forked there
    # inherits it: on a busy machine the probes then get a fraction of a core and their
    # throughput, the objective, measures the machine's load. A probe runs at the priority the
    # user's training would (the raylet keeps its own); set RAY_worker_niceness to change it.
    os.environ.setdefault(WORKER_NICENESS, "0")
    temp = ray_temp(study_dir)
    temp.mkdir(parents=True, exist_ok=True)
    ended = end_orphans(temp)  # what a killed driver's Ray left there
    if ended:
        print(
            f"autotune: ended {len(ended)} Ray process(es) that a killed driver left running in "
            f"{temp} (pids {', '.join(map(str, ended))})",
            file=sys.stderr,
        )
    ray.init(num_cpus=cpus or os.cpu_count() or 1, _temp_dir=str(temp.resolve()), **kwargs)
    return ray


def plan_resources(
    space: sp.Space, cluster: Mapping[str, float]
) -> tuple[int, dict[str, float], int | None]:
    """Concurrency, per-trial Ray resources and CPU threads per probe.

    On GPUs: one GPU per trial (budget.gpus_per_trial), as many at once as the cluster has. On
    CPUs: throughput is an objective, so trials must not share cores: each trial gets
    `threads` whole CPUs (1 on machines of up to 4 cores, else 2) and runs that many torch
    threads; concurrency = CPUs // threads, less one core kept for the driver and Ray on
    machines of up to 4 cores (on 2 cores: one trial at a time, one thread). A DDP probe
    (`probe.world_size` N) gets at least N GPUs, or N cores and a multiple of N threads shared
    out evenly among its ranks.
    """
    gpus = float(cluster.get("GPU", 0))
    cpus = float(cluster.get("CPU", os.cpu_count() or 1))
    b = space.budget
    world = space.probe.world_size  # a DDP probe is that many processes: one GPU / core each
    on_gpu = gpus > 0 and space.probe.device != "cpu" and b.gpus_per_trial > 0
    if on_gpu:
        per_cpu = max(b.cpus_per_trial or 1.0, float(world))
        per_gpu = max(b.gpus_per_trial, float(world))
        conc = max(1, int(gpus // per_gpu))
        resources = {"cpu": per_cpu, "gpu": per_gpu}
        threads = space.probe.threads
    else:
        threads = space.probe.threads or _auto_threads(b.cpus_per_trial, cpus, world)
        per_cpu = max(b.cpus_per_trial or float(threads), float(world))
        usable = cpus - 1 if cpus <= 4 else cpus
        conc = max(1, int(usable // per_cpu))
        resources = {"cpu": per_cpu}
    if b.concurrency:
        conc = b.concurrency
    return conc, resources, threads


def _auto_threads(cpus_per_trial: float | None, cpus: float, world: int) -> int:
    """A trial's threads where probe.threads is unset: budget.cpus_per_trial, else 1 on
    machines of up to 4 cores and 2 above; for a DDP probe a multiple of its ranks (they share
    the threads out evenly, one at least each), so the count planned is the count that runs.
    A probe.threads that is not such a multiple is refused (`fits.check_trial_fits`)."""
    threads = int(cpus_per_trial or (1 if cpus <= 4 else 2))
    return max(world, threads // world * world)


class Made:
    """What a driver makes before it has written anything of its study (its folder, the lock,
    Ray's session folder, a new store file): `undo` removes it again when the study fails before
    `keep` (called once the study and its MLflow run exist)."""

    def __init__(self) -> None:
        self.kept = False
        # Made by this run, in order: (path, removed whole, a store's table that must be empty).
        # The folders above a path are only removed while empty (another study may use them).
        self._new: list[tuple[Path, bool, str | None]] = []
        self._entries: dict[Path, set[str]] = {}  # folders that were there: their entries then

    def note(self, path: Path | None, table: str | None = None) -> None:
        """`path` (a file or folder) is about to be made, with any folder above it that is
        missing. A folder that is there already: what is made in it. `table`: a store file,
        removed only while that table of it is empty (another study may have begun to use it)."""
        if path is None:
            return
        path = path.absolute()
        if _there(path):
            if path.is_dir() and path not in self._entries:
                self._entries[path] = set(os.listdir(path))
            return
        above = [p for p in path.parents if not _there(p)][::-1]
        self._new += [(p, False, None) for p in above] + [(path, True, table)]

    def keep(self) -> None:
        self.kept = True

    def undo(self) -> None:
        for folder, before in self._entries.items():
            with contextlib.suppress(OSError):
                for name in set(os.listdir(folder)) - before:
                    _remove(folder / name)
        for path, whole, table in reversed(self._new):
            if not whole:
                with contextlib.suppress(OSError):
                    path.rmdir()
            elif table is None or _empty_table(path, table):
                _remove(path)
                for suffix in ("-journal", "-wal", "-shm") if table else ():
                    _remove(path.with_name(path.name + suffix))


def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _empty_table(path: Path, table: str) -> bool:
    """Whether the SQLite file at `path` has `table` with no row (read only)."""
    try:
        with contextlib.closing(read_only(path)) as db:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0
    except (sqlite3.Error, OSError, ValueError):
        return False


def _lock_now(fd: int) -> None:
    """The driver's lock on `fd`, exclusive; OSError when another driver holds it. A reader
    (`driver_running`, from `autotune show`) holds it shared for an instant: that is waited
    out (up to 1 s), not taken for a driver."""
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.05)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def driver_running(study_dir: Path) -> str | None:
    """Who runs the study in `study_dir` now: the driver lock's note (`pid N on HOST`) while a
    driver holds it, else None (no lock file, or nobody holds it). Read only: the lock file is
    neither made nor changed, and its lock is held (shared) only for the instant of the test.
    The lock is the kernel's, so a driver on another machine over a network folder may not
    show."""
    path = lock_file(study_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            note = os.read(fd, 200).decode(errors="replace").strip()
            return note or "unknown pid"
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def driver_lock(study_dir: Path) -> Iterator[Made]:
    """One driver per study folder (released by the kernel if the driver dies).

    Taken before any store is created, so that a second driver meets this lock, not a race on
    the stores' schema. Yields the `Made` of this run: the folders made for the lock, the lock
    and Ray's session folder to begin with; what it notes is removed again if the study fails
    before `Made.keep`. A folder that cannot be made is a StudyError naming it."""
    made = Made()
    made.note(study_dir)
    made.note(lock_file(study_dir))
    made.note(ray_dir(study_dir))
    try:
        make_folder(study_dir)
    except OSError as e:
        raise StudyError(
            f"cannot make the study folder {study_dir}: {e.strerror or e}; fix --study-dir"
        ) from None
    path = lock_file(study_dir)
    with open(path, "a+") as f:
        try:
            _lock_now(f.fileno())
        except OSError:
            f.seek(0)
            raise StudyError(
                f"study folder {study_dir} is in use by another autotune driver "
                f"({f.read().strip() or 'unknown pid'}); wait for it or stop it"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}")
        f.flush()
        try:
            yield made
        except BaseException:
            if not made.kept:
                made.undo()
            raise
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
