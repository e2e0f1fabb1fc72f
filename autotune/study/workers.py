"""The worker side of a study: what runs a probe on a Ray worker, the driver's loop that hands
probes to the workers, and the record of a probe whose worker failed it.

Every probe of a study runs the same way on its worker (`run_probe`): one process of its own
(`autotune.process.launcher.run_trial_process`) with the trial's environment knobs, the CPU
threads `session.plan_resources` gives it and a time limit, its record tagged with the Ray node
that ran it (where its state is kept, for a rung to continue it).

Every phase runs `probe_task` as plain Ray tasks through `run_jobs` (a list: the baseline's
yardstick seeds, the verification, the confirmation) or `run_feed` (asked for the next job
whenever a worker is free: the screen, whose next trial Optuna is asked for then, and the rungs'
asynchronous promotion): as many at once as `plan_resources` allows, each with its resources, a
rung's on the node that holds its state when that node has room; a task whose worker died (node
lost, worker killed) is a failed probe (`worker_died`), not a failed study. On CPU workers the
probes are forked by the worker's zygote (Ray keeps a task's worker for the next task, the
zygote with it: `zygote_pays`), with a script's preload (`trial_process_env`).

Two records of a worker's failure, the same for the screen, the rungs, the yardstick and the
verification: `worker_error`, autotune's side of the probe raised on the worker
(`probe_on_worker`, which every Ray task runs, catches it: its exception named,
its traceback kept), and `worker_died`, the worker never returned.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune import space as sp
from autotune.probe import ProbeConfig
from autotune.probe.outcome import Outcome
from autotune.process.launcher import run_trial_process
from autotune.process.zygote import script_preload_env
from autotune.study import signals
from autotune.study.session import plan_resources
from autotune.study.timeline import mark

#: The cause of a probe whose Ray worker never returned (node lost, worker killed).
WORKER_DIED = "worker_died"
#: The cause of a trial whose process the Ray worker could not run or watch.
WORKER_ERROR = "worker_error"


#: How often a wait for probes looks whether a signal asked the study to stop (seconds).
STOP_POLL_S = 0.25


def trial_process_env(space: sp.Space) -> dict[str, str]:
    """autotune's own variables for a probe's process (not knobs, never recorded): for a
    training script, the modules its worker's zygote imports once (`PRELOAD_ENV`): the trial
    API and the space's `workload.preload`; nothing for a built-in workload."""
    if space.workload.script is None:
        return {}
    return script_preload_env(space.workload.preload)


def run_probe(
    probe: Mapping[str, Any],
    env: Mapping[str, str],
    timeout_s: float,
    threads: int | None,
    *,
    spare: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One probe in a process of its own on this worker (see `run_trial_process`): `probe` the
    `ProbeConfig` as a dict, `env` its environment knobs, `extra_env` autotune's own variables;
    `spare`: forked by this worker's zygote."""
    return run_trial_process(
        probe, env, timeout_s=timeout_s, threads=threads, spare=spare, extra_env=extra_env
    )


def tag_node(out: dict[str, Any]) -> dict[str, Any]:
    """`out` with `ray_node`, the id of the Ray node this runs on (none outside Ray)."""
    with contextlib.suppress(Exception):
        import ray

        out["ray_node"] = ray.get_runtime_context().get_node_id()
    return out


def probe_on_worker(
    probe: Mapping[str, Any],
    env: Mapping[str, str],
    timeout_s: float,
    threads: int | None,
    *,
    spare: bool = False,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`run_probe` as every Ray task of a study runs it (screen, rungs, verification): what
    raises on the worker (autotune's side of the probe) is a failed probe, cause
    `worker_error`, not an exception for Ray to carry back (which the driver could not tell
    from a dead worker)."""
    try:
        out = run_probe(probe, env, timeout_s, threads, spare=spare, extra_env=extra_env)
    except Exception as e:  # autotune's side of the probe broke: a failed probe with its cause
        out = worker_error(e)
    return out


def probe_task(
    probe: dict[str, Any],
    env: dict[str, str],
    timeout_s: float,
    threads: int | None,
    spare: bool = False,
    extra_env: dict[str, str] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """A Ray task: one probe (a screen trial's, a rung's, a yardstick seed's, a verification
    seed's) in a process of its own on a worker, forked by the worker's zygote when `spare`
    (`probe_on_worker`: an error here is `worker_error`); only a task that never returns reaches
    the driver as a dead worker (`collect`). `label`: the study's timeline marks when it is on
    its worker and when it reports (`timeline`: a screen trial's)."""
    if label:
        mark(f"{label} on its worker")
    out = tag_node(
        probe_on_worker(probe, env, timeout_s, threads, spare=spare, extra_env=extra_env)
    )
    if label:
        mark(f"{label} reported")
    return out


def worker_error(e: BaseException) -> dict[str, Any]:
    """The record of a trial whose process could not be run or watched on its Ray worker:
    cause `worker_error`, the exception's type and message, and the traceback's tail."""
    import traceback

    first = (str(e).splitlines() or [""])[0][:500]
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return {
        "outcome": Outcome.FAILED.value,
        "cause": WORKER_ERROR,
        "error": f"{type(e).__name__}: {first}" if first else type(e).__name__,
        "log_tail": tb[-4000:],
        "summary": None,
        "fingerprint": None,
        "node": socket.gethostname(),
    }


def worker_died(error: str) -> dict[str, Any]:
    """The record of a probe whose Ray worker never returned it (node lost, worker killed):
    failed, cause `worker_died`, `error` what Ray said; no summary."""
    return {"outcome": Outcome.FAILED.value, "cause": WORKER_DIED, "error": error, "summary": None}


def collect(ray: Any, ref: Any) -> dict[str, Any]:
    """A finished task's record: what the probe returned, or `worker_died` with Ray's error."""
    try:
        out: dict[str, Any] = ray.get(ref)
        return out
    except Exception as e:  # the worker died: a failed probe, not a failed study
        return worker_died(f"{type(e).__name__}: {str(e)[:500]}")


@dataclass(frozen=True, eq=False)
class ProbeJob:
    """One probe for `run_jobs`: `key` the caller's (what `done` is told), `probe` its config,
    `env` its environment knobs, `node` the Ray node to prefer (where its state is; soft),
    `timeout_s` its own time limit (None: the one `run_jobs` or `run_feed` is given), `label`
    its name in the study's timeline (`probe_task`)."""

    key: Any
    probe: ProbeConfig
    env: Mapping[str, str]
    node: str | None = None
    timeout_s: float | None = None
    label: str | None = None


def run_jobs(
    space: sp.Space,
    ray: Any,
    jobs: Sequence[ProbeJob],
    timeout_s: float,
    done: Callable[[ProbeJob, dict[str, Any], float], None],
    interrupted: Callable[[float], str],
    spare: bool | None = None,
) -> bool:
    """Run `jobs` as Ray tasks (`probe_task`), in order, as many at once as `plan_resources`
    allows (`run_feed`). `spare` (None: `zygote_pays`): each probe forked by its worker's zygote,
    as the screen's."""
    if not jobs:
        return True
    queue = list(jobs)
    return run_feed(
        space, ray, lambda: queue.pop(0) if queue else None, timeout_s, done, interrupted, spare
    )


def run_feed(
    space: sp.Space,
    ray: Any,
    feed: Callable[[], ProbeJob | None],
    timeout_s: float,
    done: Callable[[ProbeJob, dict[str, Any], float], None],
    interrupted: Callable[[float], str],
    spare: bool | None = None,
    stop: Callable[[], bool] | None = None,
) -> bool:
    """Run the jobs `feed` hands out as Ray tasks (`probe_task`), as many at once as
    `plan_resources` allows: whenever a worker is free `feed()` is asked for the next (None:
    nothing now; asked again when a job finishes), until it has none and none is running. Call
    `done(job, record, seconds since it was handed to Ray)` as each finishes (`collect`): the
    time its line shows, as a screen trial's shows its own (not the phase's, which grew line by
    line); a job's time
    limit is its `timeout_s`, else `timeout_s`. False when interrupted: the tasks in flight are
    cancelled and `interrupted(seconds)` printed to stderr. `stop()` true (the screen's baseline
    failed): the tasks in flight are cancelled and it returns True."""
    conc, resources, threads = plan_resources(space, ray.cluster_resources())
    gpus = resources.get("gpu", 0.0)
    # A task whose worker died is a failed probe, not one Ray runs again (its default: 3 times)
    cpus = resources.get("cpu", 1.0)
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(probe_task)
    fork = zygote_pays(gpus) if spare is None else spare
    extra = trial_process_env(space)
    inflight: dict[Any, ProbeJob] = {}
    handed: dict[Any, float] = {}  # when each was handed to Ray (`time.monotonic`)
    started = time.monotonic()
    try:
        while True:
            if signals.stopping():  # SIGINT or SIGTERM, noted by the driver's handler
                raise KeyboardInterrupt
            if stop is not None and stop():
                _cancel(ray, inflight)
                return True
            while len(inflight) < conc:
                job = feed()
                if job is None:
                    break
                limit = timeout_s if job.timeout_s is None else job.timeout_s
                task = on_node(remote, job.node)
                args = (job.probe.to_dict(), dict(job.env), limit, threads, fork, extra, job.label)
                ref = task.remote(*args)
                inflight[ref], handed[ref] = job, time.monotonic()
            if not inflight:
                return True
            # Woken now and then to see whether the study is to stop (`signals`).
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=STOP_POLL_S)
            for ref in ready:
                record = collect(ray, ref)
                if signals.stopping() and record.get("cause") == WORKER_DIED:
                    continue  # the signal's doing (sent to the whole group): not run, not failed
                done(inflight.pop(ref), record, time.monotonic() - handed.pop(ref))
    except KeyboardInterrupt:
        _cancel(ray, inflight)
        print(interrupted(time.monotonic() - started), file=sys.stderr)
        return False


def _cancel(ray: Any, inflight: Mapping[Any, ProbeJob]) -> None:
    """Cancel the tasks in flight (their workers, with their probes, are ended)."""
    for ref in inflight:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)


def zygote_pays(gpus: float) -> bool:
    """Whether a task's probe is forked by its worker's zygote: on CPU workers, which Ray keeps
    for the next task (the zygote's imports are paid once per worker and environment); not for
    a task that holds a GPU, whose worker Ray ends after one task
    (`max_calls=1`, its default for GPU tasks), the zygote with it: the zygote's imports would
    be on every probe's path, as a fresh process's are."""
    return gpus <= 0


def on_node(remote: Any, node: str | None) -> Any:
    """`remote`, asked to run on `node` (where its state is) when that node has room; else
    elsewhere at once (it then starts over), rather than waiting for that node."""
    if not node:
        return remote
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    where = NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
    return remote.options(scheduling_strategy=where)
