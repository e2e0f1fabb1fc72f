"""The study's Ray session and resources: a quiet local Ray or a cluster's, the resources and
concurrency of the trials, and the lock that allows one driver per study folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import ClusterError, StudyError
from autotune.study.folder import lock_file, ray_dir
from autotune.study.storage import check_tcp


def ray_env() -> None:
    """Settings for a quiet, local-friendly Ray: no usage stats, no Tune callback loggers, the
    classic output, no checkpoint-sync warnings."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "1e9")


def check_ray_address(address: str) -> None:
    check_tcp(
        address if "://" in address else f"ray://{address}",
        what="the Ray cluster",
        hint="start it with `ray start --head`, or pass the head's address (host:6379) to "
        "--address / RAY_ADDRESS",
    )


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
        try:
            yield ray
        finally:
            started.stop()
        return
    ray = init_ray(address, study_dir, cpus)
    try:
        yield ray
    finally:
        ray.shutdown()


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
                "`ray start --head` or fix --address / RAY_ADDRESS"
            ) from e
        return ray
    # A local Ray without a token prompt, with its files inside the study folder when the
    # path is short enough for its unix sockets (107 bytes), else in a short temp folder.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp = ray_dir(study_dir)
    if len(str(temp.resolve())) > 40:  # Ray appends up to 64 bytes to it
        temp = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
    temp.mkdir(parents=True, exist_ok=True)
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
    (`probe.world_size` N) gets at least N GPUs, or N cores and N threads shared out among its
    ranks.
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
        threads = space.probe.threads or int(b.cpus_per_trial or (1 if cpus <= 4 else 2))
        threads = max(threads, world)  # the probe's threads are shared out among its ranks
        per_cpu = max(b.cpus_per_trial or float(threads), float(world))
        usable = cpus - 1 if cpus <= 4 else cpus
        conc = max(1, int(usable // per_cpu))
        resources = {"cpu": per_cpu}
    if b.concurrency:
        conc = b.concurrency
    return conc, resources, threads


@contextlib.contextmanager
def driver_lock(study_dir: Path) -> Iterator[None]:
    """One driver per study folder (released by the kernel if the driver dies).

    Taken before any store is created, so that a second driver meets this lock, not a race on
    the stores' schema. Folders made for the lock are removed again if the study fails before
    writing anything else in them."""
    made = [d for d in (study_dir, *study_dir.parents) if not d.exists()]
    study_dir.mkdir(parents=True, exist_ok=True)
    path = lock_file(study_dir)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
            yield
        except BaseException:
            if made and [p.name for p in study_dir.iterdir()] == [path.name]:
                path.unlink()
                for d in made:
                    with contextlib.suppress(OSError):
                        d.rmdir()
            raise
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
