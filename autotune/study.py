"""The study: Optuna decides, Ray Tune runs the probes, the driver records every trial in MLflow.

`run(options)` is the whole job. Optuna owns the search state in an RDB storage (an SQLite file in
the study folder by default), so a study survives the driver and resumes: trials that were
running when the driver died are run again under the same Optuna trial number, and a trial that
finished is never run twice. Ray Tune schedules the trials; each trial starts a fresh probe
process (`python -m autotune.probe`) whose environment holds the trial's environment knobs
before torch starts, and which is killed when it outlives its time limit. The driver is the
only writer to MLflow.

Outcomes: `complete` (feasible or not by the constraints), `diverged` (a measured, infeasible
result the sampler learns from), `oom` (infeasible: tells the sampler that region does not
fit), `failed` (an exception, a timeout, a crash, a killed process: recorded with its cause and
the tail of its log; Optuna state FAIL).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import math
import os
import queue
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import ClusterError, StudyError
from autotune.pick import dominates
from autotune.probe import ProbeConfig
from autotune.process.launcher import run_trial_process

STUDIES_DIR = "autotune-studies"
PENALTY = 1e12  # objective value told to Optuna for a non-finite metric of an infeasible trial


@dataclass
class WarmStart:
    """Configurations from an earlier study or a recipe, tried first (after the baseline)."""

    ref: str  # what the user named: a study or a recipe file
    configs: list[dict[str, Any]]  # each {"knobs": {...}, "env": {...}, "label": str}
    fp_hash: str | None = None  # the hardware they were found on
    objectives: list[dict[str, Any]] = field(default_factory=list)
    best: list[float] | None = None  # the source's best (picked) values, for "matched at"


@dataclass
class StudyOptions:
    """What `autotune study` was asked for."""

    space: sp.Space
    study_dir: Path | None = None  # default ./autotune-studies/<name>
    storage: str | None = None  # Optuna RDB URL; default sqlite in the study folder
    tracking_uri: str | None = None
    address: str | None = None  # Ray cluster; default $RAY_ADDRESS, else a local Ray
    resume: bool = False  # insist that the study exists
    quiet: bool = False
    warm_start: WarmStart | None = None  # configurations of an earlier study to try first
    extra_tags: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Paths and storage
# ---------------------------------------------------------------------------------------------


def study_dir_for(name: str, base: Path | None = None) -> Path:
    return (base or Path.cwd()) / STUDIES_DIR / name


def storage_url(opts: StudyOptions, study_dir: Path) -> str:
    if opts.storage:
        return opts.storage
    return f"sqlite:///{(study_dir / 'optuna.db').resolve()}"


def open_storage(url: str) -> Any:
    """An Optuna RDB storage, failing fast with the URL when it cannot be reached."""
    import optuna

    if url.startswith(("postgresql", "mysql")):
        _check_tcp(url, what="the Optuna storage", hint="start the database or fix --storage")
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except Exception as e:
        raise StudyError(
            f"cannot open the Optuna storage {_redact(url)}: "
            f"{type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 5}, "pool_pre_ping": True}
    return {}


def _redact(url: str) -> str:
    """Hide a password in a database URL."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        user = cred.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def _check_tcp(url: str, *, what: str, hint: str) -> None:
    from urllib.parse import urlparse

    parsed = urlparse(url if "://" in url else f"tcp://{url}")
    host, port = parsed.hostname or "127.0.0.1", parsed.port
    if port is None:
        return
    try:
        with socket.create_connection((host, port), timeout=3):
            pass
    except OSError as e:
        raise ClusterError(
            f"cannot reach {what} at {host}:{port} ({_redact(url)}): {e.strerror or e}; {hint}"
        ) from e


# ---------------------------------------------------------------------------------------------
# Trials: knobs, values, constraints
# ---------------------------------------------------------------------------------------------


def directions(space: sp.Space) -> list[str]:
    return [o.direction for o in space.objectives]


def values_of(space: sp.Space, metrics: Mapping[str, Any]) -> list[float]:
    """Objective values; a missing or non-finite metric becomes the worst value (PENALTY)."""
    out = []
    for o in space.objectives:
        v = metrics.get(o.metric)
        if v is None or not math.isfinite(float(v)):
            v = PENALTY if o.direction == "minimize" else -PENALTY
        out.append(float(v))
    return out


def constraints_of(space: sp.Space, outcome: str, metrics: Mapping[str, Any]) -> list[float]:
    """Optuna constraint values (<= 0 is feasible): not diverged/oom, then each space constraint."""
    out = [1.0 if outcome in ("diverged", "oom") else 0.0]
    for c in space.constraints:
        v = metrics.get(c.metric)
        if v is None or not math.isfinite(float(v)):
            out.append(1.0)
        elif c.op == ">=":
            out.append(float(c.value - v))
        else:
            out.append(float(v - c.value))
    return out


def constraint_names(space: sp.Space) -> list[str]:
    """Names of the Optuna constraints, in the order of `constraints_of`."""
    return ["not_diverged", *(f"{c.metric} {c.op} {c.value:g}" for c in space.constraints)]


def sampler_seed(seed: int, trials_so_far: int) -> int:
    """The sampler's seed for a driver that finds `trials_so_far` trials in the storage.

    Optuna's samplers draw from a random state seeded once, so a resumed study seeded as at its
    start would draw the same configurations again (TPE's and NSGA-II's random start-up phase
    included). A fresh study keeps the space's seed; a resumed one gets a seed derived from it
    and from how far the study got: still reproducible, never a replay."""
    if trials_so_far == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed % 2**32, trials_so_far]).generate_state(1)[0])


def make_sampler(space: sp.Space, searched: Mapping[str, sp.Domain], trials_so_far: int = 0) -> Any:
    import optuna

    s = space.sampler
    seed = sampler_seed(s.seed, trials_so_far)
    if s.name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=s.n_startup_trials,
            multivariate=True,
        )
    if s.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    grid = {name: d.grid(space.knob_kind(name), s.grid_points) for name, d in searched.items()}
    return optuna.samplers.GridSampler(grid, seed=seed)


def suggest(trial: Any, space: sp.Space, searched: Mapping[str, sp.Domain]) -> dict[str, Any]:
    """Ask Optuna for a value of every searched knob."""
    params: dict[str, Any] = {}
    for name, d in searched.items():
        if d.is_choice:
            params[name] = trial.suggest_categorical(name, list(d.choices))
        elif space.knob_kind(name) == "int":
            assert d.low is not None and d.high is not None
            params[name] = trial.suggest_int(
                name, int(d.low), int(d.high), step=int(d.step or 1), log=d.log
            )
        else:
            assert d.low is not None and d.high is not None
            params[name] = trial.suggest_float(
                name, float(d.low), float(d.high), log=d.log, step=d.step
            )
    return params


def trial_setup(
    space: sp.Space, params: Mapping[str, Any], baseline: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    """The knobs and environment of one trial."""
    if baseline:
        return space.baseline_knobs(), space.baseline_env()
    knobs = space.fixed_knobs()
    env = space.fixed_env()
    for name, value in params.items():
        if name in sp.KNOBS:
            knobs[name] = value
        else:
            env[name] = str(value)
    return knobs, env


# ---------------------------------------------------------------------------------------------
# The trial (runs on a Ray worker, possibly on another node)
# ---------------------------------------------------------------------------------------------


def trainable(config: dict[str, Any]) -> None:
    """The Ray Tune function trainable: one trial = one fresh probe process (see launcher)."""
    from ray import tune

    try:
        out = run_trial_process(
            config["probe"],
            config["env"],
            timeout_s=config["timeout_s"],
            threads=config.get("threads"),
            spare=True,
        )
    except Exception as e:  # autotune's side of the trial broke: a failed trial with its cause
        out = worker_error(e)
    out["number"] = config["number"]
    with contextlib.suppress(Exception):
        import ray

        out["ray_node"] = ray.get_runtime_context().get_node_id()
    # One report, as a JSON string so that Tune does not flatten the step series into columns.
    tune.report({"autotune_done": 1, "autotune_payload": json.dumps(out, default=str)})


def worker_error(e: BaseException) -> dict[str, Any]:
    """The record of a trial whose process could not be run or watched on its Ray worker:
    cause `worker_error`, the exception's type and message, and the traceback's tail."""
    import traceback

    first = (str(e).splitlines() or [""])[0][:500]
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return {
        "outcome": "failed",
        "cause": "worker_error",
        "error": f"{type(e).__name__}: {first}" if first else type(e).__name__,
        "log_tail": tb[-4000:],
        "summary": None,
        "fingerprint": None,
        "node": socket.gethostname(),
    }


# ---------------------------------------------------------------------------------------------
# The searcher: Optuna ask/tell behind Ray Tune's Searcher interface
# ---------------------------------------------------------------------------------------------


def _searcher_class() -> type:
    from ray.tune.search import Searcher

    class OptunaAskTell(Searcher):
        """Optuna asks; Ray Tune runs; the driver tells. Stale trials are run again first."""

        def __init__(self, driver: _Driver):
            super().__init__()
            self.driver = driver
            self.live: dict[str, int] = {}

        # Optuna's storage is the state to resume from: Tune's own searcher checkpoints and
        # pickles carry nothing (the driver holds locks and database connections).
        def __getstate__(self) -> dict[str, Any]:
            return {}

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.driver = None  # type: ignore[assignment]
            self.live = {}

        def save(self, checkpoint_path: str) -> None:
            pass

        def restore(self, checkpoint_path: str) -> None:
            pass

        def save_to_dir(self, *args: Any, **kwargs: Any) -> None:
            pass

        def suggest(self, trial_id: str) -> dict[str, Any] | None:
            config = self.driver.next_config()
            if config is None:
                return Searcher.FINISHED  # type: ignore[return-value]
            self.live[trial_id] = config["number"]
            return config

        def on_trial_complete(
            self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
        ) -> None:
            number = self.live.pop(trial_id, None)
            if number is None:
                return
            payload = (result or {}).get("autotune_payload")
            if payload is not None:
                self.driver.finish(number, json.loads(payload))
            elif error:
                self.driver.finish(
                    number,
                    {
                        "number": number,
                        "outcome": "failed",
                        "cause": "worker_died",
                        "error": "the Ray worker running this trial died (node lost, or the worker "
                        "was killed)",
                        "log_tail": "",
                        "summary": None,
                        "fingerprint": None,
                    },
                )
            else:
                self.driver.interrupted(number)

    return OptunaAskTell


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


class _Driver:
    """Driver-side state of one `autotune study` session."""

    def __init__(
        self,
        opts: StudyOptions,
        study: Any,
        searched: dict[str, sp.Domain],
        planned: int,
        rerun: list[Any],
        tracking: Any,
        progress: Progress,
        study_dir: Path,
        threads: int | None,
    ):
        self.opts, self.space, self.study = opts, opts.space, study
        self.searched, self.planned, self.rerun = searched, planned, deque(rerun)
        self.tracking, self.progress, self.study_dir = tracking, progress, study_dir
        self.threads = threads
        self.suggested = 0
        self.lock = threading.Lock()

    def next_config(self) -> dict[str, Any] | None:
        import optuna

        with self.lock:
            if self.suggested >= self.planned:
                return None
            self.suggested += 1
            if self.rerun:
                frozen = self.rerun.popleft()
                trial = optuna.trial.Trial(self.study, frozen._trial_id)
                params = dict(frozen.params)
                baseline = bool(frozen.user_attrs.get("autotune.baseline"))
            else:
                trial = self.study.ask()
                baseline = bool(trial.user_attrs.get("autotune.baseline"))
                params = {} if baseline else suggest(trial, self.space, self.searched)
            knobs, env = trial_setup(self.space, params, baseline)
            trial.set_user_attr("autotune.knobs", knobs)
            trial.set_user_attr("autotune.env", env)
            probe = ProbeConfig.from_space(self.space, knobs=knobs, env=env)
            self.progress.started(trial.number)
            return {
                "number": trial.number,
                "probe": probe.to_dict(),
                "env": env,
                "timeout_s": self.space.budget.trial_timeout_s,
                "threads": self.threads,
                "params": params,
                "baseline": baseline,
            }

    def finish(self, number: int, result: dict[str, Any]) -> None:
        """Record one finished trial: file, Optuna tell, MLflow — in that order."""
        with self.lock:
            frozen = self.study._storage.get_trial(
                self.study._storage.get_trial_id_from_study_id_trial_number(
                    self.study._study_id, number
                )
            )
            outcome = complete_outcome(self.space, frozen, result)
            write_outcome(self.study_dir, outcome)
            tell(self.study, frozen, outcome)
            self.tracking.log(outcome)
            self.progress.finished(outcome)

    def interrupted(self, number: int) -> None:
        self.progress.interrupted(number)


def complete_outcome(space: sp.Space, frozen: Any, result: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's full record: what the process returned plus knobs, values and constraints."""
    summary = result.get("summary")
    metrics = dict((summary or {}).get("metrics") or {})
    outcome = dict(result)
    outcome["number"] = frozen.number
    outcome["baseline"] = bool(frozen.user_attrs.get("autotune.baseline"))
    # The probe's knobs have every default resolved (the workload's learning rate included).
    outcome["knobs"] = (summary or {}).get("knobs") or frozen.user_attrs.get("autotune.knobs", {})
    outcome["env"] = frozen.user_attrs.get("autotune.env", {})
    outcome["params"] = dict(frozen.params)
    outcome["source"] = frozen.user_attrs.get("autotune.source")
    if outcome["outcome"] == "failed":
        outcome["values"] = outcome["constraints"] = None
        outcome["feasible"] = False
    else:
        outcome["values"] = values_of(space, metrics)
        outcome["constraints"] = constraints_of(space, outcome["outcome"], metrics)
        outcome["constraint_names"] = constraint_names(space)
        outcome["feasible"] = all(c <= 0 for c in outcome["constraints"])
    return outcome


def write_outcome(study_dir: Path, outcome: Mapping[str, Any]) -> Path:
    """trials/NNNN.json, written atomically: the record MLflow is (re)logged from."""
    folder = study_dir / "trials"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{outcome['number']:04d}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(outcome, default=str))
    os.replace(tmp, path)
    return path


def read_outcome(study_dir: Path, number: int) -> dict[str, Any] | None:
    path = study_dir / "trials" / f"{number:04d}.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, json.JSONDecodeError):
        return None


def tell(study: Any, frozen: Any, outcome: Mapping[str, Any]) -> None:
    """Store the trial's record as user attributes, then tell Optuna."""
    import optuna

    storage, tid = study._storage, frozen._trial_id
    summary = outcome.get("summary") or {}
    attrs = {
        "autotune.outcome": outcome["outcome"],
        "autotune.cause": outcome.get("cause"),
        "autotune.error": (outcome.get("error") or "")[:2000] or None,
        "autotune.metrics": summary.get("metrics") or {},
        "autotune.feasible": bool(outcome.get("feasible")),
        "autotune.fp_hash": (outcome.get("fingerprint") or {}).get("hash"),
        "autotune.node": outcome.get("node"),
        "autotune.ray_node": outcome.get("ray_node"),
        "autotune.wall_s": outcome.get("wall_s"),
        "autotune.effective_batch": summary.get("effective_batch"),
    }
    if outcome.get("knobs"):
        attrs["autotune.knobs"] = outcome["knobs"]
    if outcome.get("constraints") is not None:
        attrs["autotune.constraints"] = outcome["constraints"]
    for key, value in attrs.items():
        storage.set_trial_user_attr(tid, key, value)
    if outcome.get("constraints") is not None:
        # Constrained TPE and NSGA-II read these: a value > 0 makes the trial infeasible.
        trial = optuna.trial.Trial(study, tid)
        names = outcome.get("constraint_names") or [
            f"c{i}" for i in range(len(outcome["constraints"]))
        ]
        for name, value in zip(names, outcome["constraints"], strict=True):
            if f"constraints:{name}" not in frozen.system_attrs:
                trial.set_constraint(name, value)
    try:
        if outcome["outcome"] == "failed":
            study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(frozen.number, values=outcome["values"])
    except (RuntimeError, KeyError):
        # GridSampler.after_trial calls Study.stop() once the grid is used up (a RuntimeError
        # outside study.optimize) and reads a "grid_id" that enqueued trials lack; Optuna
        # stores the trial's state before re-raising, so only a trial still RUNNING failed.
        if storage.get_trial(tid).state == optuna.trial.TrialState.RUNNING:
            raise


# ---------------------------------------------------------------------------------------------
# Progress in the terminal
# ---------------------------------------------------------------------------------------------


class Progress:
    """Live view: trials done, running, failed and diverged, best so far, time left."""

    def __init__(self, space: sp.Space, total: int, done: int, concurrency: int, quiet: bool):
        from rich.console import Console

        self.space, self.total, self.done0 = space, total, done
        self.concurrency, self.quiet = concurrency, quiet
        self.console = Console(stderr=False, highlight=False)
        self.counts = {"complete": 0, "diverged": 0, "oom": 0, "failed": 0}
        self.running: dict[int, float] = {}  # trial number -> when it was handed to Ray
        self.best: dict[str, float] = {}
        self.durations: list[float] = []  # of the trials finished in this session
        self._live: Any = None

    def __enter__(self) -> Progress:
        if not self.quiet and self.console.is_terminal:
            from rich.live import Live

            self._live = Live(
                self._status(),
                console=self.console,
                refresh_per_second=1,
                transient=True,
                get_renderable=self._status,
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def _done(self) -> int:
        return self.done0 + sum(self.counts.values())

    def _status(self) -> str:
        left = self.total - self._done()
        eta = ""
        if left > 0:
            now = time.time()
            secs = eta_s(
                left - len(self.running),
                self.durations,
                [now - t for t in self.running.values()],
                self.concurrency,
            )
            eta = ", estimating time left" if secs is None else f", ~{_fmt_s(secs)} left"
        best = "  ".join(f"best {k} {v:.4g}" for k, v in self.best.items())
        c = self.counts
        return (
            f"[{self._done()}/{self.total}] running {len(self.running)}, "
            f"diverged {c['diverged']}, oom {c['oom']}, failed {c['failed']}{eta}  {best}"
        )

    def say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False, soft_wrap=True)

    def started(self, number: int) -> None:
        self.running[number] = time.time()

    def interrupted(self, number: int) -> None:
        self.running.pop(number, None)

    def finished(self, o: Mapping[str, Any]) -> None:
        # Measured here, from hand-over to record, like the running trials' elapsed time: it
        # includes the scheduling and process start that the probe's own wall_s leaves out.
        t = self.running.pop(o["number"], None)
        self.counts[o["outcome"]] = self.counts.get(o["outcome"], 0) + 1
        if t is not None:
            self.durations.append(time.time() - t)
        elif o.get("wall_s"):
            self.durations.append(float(o["wall_s"]))
        metrics = (o.get("summary") or {}).get("metrics") or {}
        if o.get("feasible"):
            for obj in self.space.objectives:
                v = metrics.get(obj.metric)
                if v is None:
                    continue
                cur = self.best.get(obj.metric)
                better = cur is None or (v < cur if obj.direction == "minimize" else v > cur)
                if better:
                    self.best[obj.metric] = float(v)
        label = "baseline" if o.get("baseline") else "trial"
        what = o["outcome"] + (f" ({o['cause']})" if o.get("cause") else "")
        if not o.get("feasible") and o["outcome"] == "complete":
            what += (
                " (infeasible: "
                + ", ".join(
                    f"{c.metric} {c.op} {c.value:g}"
                    for c, v in zip(
                        self.space.constraints, (o.get("constraints") or [0])[1:], strict=False
                    )
                    if v > 0
                )
                + ")"
            )
        vals = "  ".join(
            f"{obj.metric} {metrics[obj.metric]:.4g}"
            for obj in self.space.objectives
            if metrics.get(obj.metric) is not None
        )
        self.say(
            f"  {label} {o['number']:>3}  {what:<22} {vals}  [{float(o.get('wall_s') or 0):.0f} s]"
        )
        if self._live is None:
            self.say(f"    {self._status()}")


def eta_s(
    unstarted: int, durations: Sequence[float], elapsed: Sequence[float], concurrency: int
) -> float | None:
    """Seconds left in a study: None (still estimating) until a trial has finished.

    Each trial not started takes the mean duration of the finished ones, each running one the
    rest of that mean (nothing once it has run longer); the work is shared by `concurrency`
    slots, and the study cannot end before its longest running trial does. As time passes
    with no trial finishing, the estimate only falls."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    rest = [max(0.0, mean - e) for e in elapsed]
    shared = (max(0, unstarted) * mean + sum(rest)) / max(1, concurrency)
    return max([shared, *rest])


def _fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


# ---------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------


def ray_env() -> None:
    """Settings for a quiet, local-friendly Ray (STACK.md)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "1e9")


def _check_ray_address(address: str) -> None:
    _check_tcp(
        address if "://" in address else f"ray://{address}",
        what="the Ray cluster",
        hint="start it with `ray start --head`, or pass the head's address (host:6379) to "
        "--address / RAY_ADDRESS",
    )


@contextlib.contextmanager
def ray_session(address: str | None, study_dir: Path, cpus: int | None = None) -> Iterator[Any]:
    """Join the cluster at `address` (or $RAY_ADDRESS), else start a local Ray for this study."""
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
    else:
        # A local Ray without a token prompt, with its files inside the study folder when the
        # path is short enough for its unix sockets (107 bytes), else in a short temp folder.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        temp = study_dir / "ray"
        if len(str(temp.resolve())) > 40:  # Ray appends up to 64 bytes to it
            temp = Path(tempfile.gettempdir()) / f"autotune-ray-{os.getuid()}"
        temp.mkdir(parents=True, exist_ok=True)
        ray.init(num_cpus=cpus or os.cpu_count() or 1, _temp_dir=str(temp.resolve()), **kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


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


# ---------------------------------------------------------------------------------------------
# The study
# ---------------------------------------------------------------------------------------------


@dataclass
class StudyResult:
    name: str
    study_dir: Path
    storage: str
    tracking_uri: str
    summary: dict[str, Any]
    interrupted: bool = False


@contextlib.contextmanager
def driver_lock(study_dir: Path) -> Iterator[None]:
    """One driver per study folder (released by the kernel if the driver dies).

    Taken before any store is created, so that a second driver meets this lock, not a race on
    the stores' schema. Folders made for the lock are removed again if the study fails before
    writing anything else in them."""
    made = [d for d in (study_dir, *study_dir.parents) if not d.exists()]
    study_dir.mkdir(parents=True, exist_ok=True)
    path = study_dir / "driver.lock"
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


def run(opts: StudyOptions) -> StudyResult:
    """Run (or continue) the study described by `opts.space`; return its summary."""
    import optuna

    from autotune import fingerprint as fpm
    from autotune import tracking

    space = opts.space
    study_dir = (opts.study_dir or study_dir_for(space.name)).resolve()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Every service is checked before anything is written: an unreachable tracking store,
    # database or Ray cluster stops the study with its address, leaving nothing half-made.
    # The TCP probes come first; the stores are opened (an SQLite one created) only under the
    # study lock, so a second driver of the same study stops at the lock.
    url = storage_url(opts, study_dir)
    if url.startswith(("postgresql", "mysql")):
        _check_tcp(url, what="the Optuna storage", hint="start the database or fix --storage")
    address = opts.address or os.environ.get("RAY_ADDRESS") or None
    if address and address != "auto":
        _check_ray_address(address)
    check_workload(space)
    uri = tracking.resolve_uri(opts.tracking_uri)
    with driver_lock(study_dir):
        client = tracking.connect(uri)
        say = (lambda _t: None) if opts.quiet else print
        fp = fpm.collect()
        arch = (fp.get("devices") or [{}])[0].get("arch")
        cond = sp.condition(space, platform=fp["platform"], arch=arch)
        for name, why in cond.dropped.items():
            say(f"dropped knob {name}: {why}")
        storage = open_storage(url)
        study = _open_study(opts, storage, cond)
        experiment_id = tracking.ensure_experiment(client, space.name)
        parent = tracking.ensure_study_run(
            client,
            experiment_id,
            space.name,
            space_yaml=sp.dump(space),
            params=_study_params(space, cond, url),
            tags={"autotune.fp.driver_hash": str(fp.get("hash")), **opts.extra_tags},
        )
        study.set_user_attr(
            "autotune.mlflow", {"uri": uri, "experiment_id": experiment_id, "parent_run_id": parent}
        )
        logger = _Logger(client, experiment_id, parent, space.name, study_dir)
        reconcile(study, study_dir, logger)
        (study_dir / "study.json").write_text(
            json.dumps(
                {
                    "name": space.name,
                    "storage": url,
                    "tracking_uri": uri,
                    "experiment_id": experiment_id,
                    "parent_run_id": parent,
                },
                indent=2,
            )
        )

        rerun = stale_trials(study, study_dir, space, logger)
        finished = count_finished(study)
        planned = max(0, space.budget.trials - finished)
        interrupted = False
        if planned == 0:
            say(f"study {space.name}: all {space.budget.trials} trials are done")
        else:
            say(
                f"study {space.name}: {finished} of {space.budget.trials} trials done; "
                f"running {planned}" + (f" ({len(rerun)} interrupted earlier)" if rerun else "")
            )
            say(f"  optuna storage {_redact(url)}")
            say(f"  mlflow {_redact(uri)} (experiment {space.name})")
        if planned > 0 or to_verify(study, space):
            with ray_session(opts.address, study_dir) as ray:
                if planned > 0:
                    interrupted = _run_trials(
                        opts, study, cond.searched, planned, rerun, logger, study_dir, finished, ray
                    )
                if not interrupted:
                    interrupted = _verify_phase(opts, study, logger, study_dir, ray)
        summary = summarize(study, space, study_dir, cond.dropped)
        logger.summary(summary, study)
    return StudyResult(
        name=space.name,
        study_dir=study_dir,
        storage=url,
        tracking_uri=uri,
        summary=summary,
        interrupted=interrupted,
    )


def check_workload(space: sp.Space) -> None:
    """Resolve the space's workload once on the driver: a wrong name fails before any trial."""
    from autotune.errors import WorkloadError
    from autotune.workload import resolve

    try:
        resolve(space.workload.name, space.workload.size)
    except WorkloadError as e:
        raise WorkloadError(f"{space.source}: workload: {e}") from e


def _study_params(space: sp.Space, cond: sp.Conditioned, url: str) -> dict[str, Any]:
    return {
        "workload": space.workload.name,
        "size": space.workload.size,
        "sampler": space.sampler.name,
        "sampler_seed": space.sampler.seed,
        "trials": space.budget.trials,
        "steps": space.probe.steps,
        "micro_batch": space.probe.micro_batch,
        "precision": space.probe.precision,
        "seed": space.probe.seed,
        "objectives": ", ".join(f"{o.direction} {o.metric}" for o in space.objectives),
        "constraints": ", ".join(f"{c.metric} {c.op} {c.value:g}" for c in space.constraints),
        "searched": ", ".join(cond.searched) or "-",
        "dropped": ", ".join(cond.dropped) or "-",
        "optuna_storage": _redact(url),
    }


def _open_study(opts: StudyOptions, storage: Any, cond: sp.Conditioned) -> Any:
    import optuna

    space = opts.space
    fingerprint_space = json.dumps(
        {k: v for k, v in space.to_dict().items() if k not in ("budget", "description", "verify")},
        sort_keys=True,
    )
    names = [
        s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)
    ]
    exists = space.name in names
    if opts.resume and not exists:
        raise StudyError(
            f"--resume: no study '{space.name}' in {_redact(storage.url)}; "
            "drop --resume to start it"
        )
    if exists:
        study = optuna.load_study(study_name=space.name, storage=storage)
        before = study.user_attrs.get("autotune.space")
        if before is not None and before != fingerprint_space:
            raise StudyError(
                f"study '{space.name}' already exists in {_redact(storage.url)} with a different "
                "space (knobs, probe, objectives or sampler changed); give the new one another "
                f"name with --set name={space.name}-2, or delete {storage.url}"
            )
        study.sampler = make_sampler(space, cond.searched, len(study.get_trials(deepcopy=False)))
        name_metrics(study, space)
        return study
    study = optuna.create_study(
        study_name=space.name,
        storage=storage,
        sampler=make_sampler(space, cond.searched),
        directions=list(directions(space)),  # type: ignore[arg-type]
    )
    name_metrics(study, space)
    study.set_user_attr("autotune.space", fingerprint_space)
    study.set_user_attr("autotune.space_yaml", sp.dump(space))
    study.set_user_attr("autotune.objectives", [o.model_dump() for o in space.objectives])
    # Trial 0 is always the baseline: PyTorch's defaults for the searched knobs.
    study.enqueue_trial({}, user_attrs={"autotune.baseline": True})
    if opts.warm_start is not None:
        ws = opts.warm_start
        study.set_user_attr(
            "autotune.warm_start",
            {"ref": ws.ref, "fp_hash": ws.fp_hash, "objectives": ws.objectives, "best": ws.best},
        )
        for config in ws.configs:
            params = warm_params(config, cond.searched)
            study.enqueue_trial(
                params,
                user_attrs={
                    "autotune.source": f"warm start: {config.get('label', ws.ref)}",
                    "autotune.source_fp": ws.fp_hash,
                },
            )
    return study


def name_metrics(study: Any, space: sp.Space) -> None:
    """Name the study's objectives after their metrics (optuna-dashboard shows these names,
    else "Objective 0", "Objective 1"); also on a study made before names were set."""
    names = [o.metric for o in space.objectives]
    if study.metric_names != names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental in some Optuna versions
            study.set_metric_names(names)


def warm_params(config: Mapping[str, Any], searched: Mapping[str, sp.Domain]) -> dict[str, Any]:
    """A source configuration as this study's params: only searched knobs, clamped into their
    domains (a choice the domain lacks is left to the sampler)."""
    values = {**(config.get("knobs") or {}), **(config.get("env") or {})}
    out: dict[str, Any] = {}
    for name, dom in searched.items():
        if name not in values or values[name] is None:
            continue
        v = values[name]
        if dom.is_choice:
            match = [c for c in dom.choices if c == v or str(c) == str(v)]
            if match:
                out[name] = match[0]
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        lo, hi = float(dom.low), float(dom.high)  # type: ignore[arg-type]
        x = min(max(x, lo), hi)
        info = sp.KNOBS.get(name)
        is_int = info.kind == "int" if info is not None else isinstance(dom.low, int)
        out[name] = round(x) if is_int else x
    return out


def load_warm_start(ref: str, storage: str | None = None, top: int = 3) -> WarmStart:
    """The configurations to warm-start from: a recipe file's, or an earlier study's best
    `top` candidates (verified ones first, in pick order)."""
    from autotune import pick
    from autotune.recipe import Recipe

    path = Path(ref)
    if path.is_file():
        r = Recipe.load(path)
        objectives = [
            {"metric": m, "direction": a.get("direction", "minimize")}
            for m, a in r.achieved.items()
        ]
        best = [
            float(((a.get("verified") or {}).get("mean")) or a.get("value") or math.nan)
            for a in r.achieved.values()
        ]
        return WarmStart(
            ref=str(path),
            configs=[{"knobs": dict(r.knobs), "env": dict(r.env), "label": f"recipe {path.name}"}],
            fp_hash=r.fingerprint_hash,
            objectives=objectives,
            best=best if objectives else None,
        )
    study, space, _, _ = find_study(ref, storage)
    objectives = [o.model_dump() for o in space.objectives]
    cands = pick.candidates(study)
    if not cands:
        raise StudyError(
            f"--warm-start {ref}: that study has no feasible trial to start from "
            f"({pick.why_none(study)})"
        )
    chosen = pick.pick(cands, objectives, "balanced")
    order = [chosen] + [c for c in pick.ranked(cands, objectives) if c is not chosen]
    hashes = {c.fp_hash for c in order[:top] if c.fp_hash}
    return WarmStart(
        ref=ref,
        configs=[
            {"knobs": c.knobs, "env": c.env, "label": f"{space.name} trial {c.number}"}
            for c in order[:top]
        ],
        fp_hash=", ".join(sorted(hashes)) or None,
        objectives=objectives,
        best=[chosen.value(o["metric"], i) for i, o in enumerate(objectives)],
    )


def count_finished(study: Any) -> int:
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    return len(study.get_trials(deepcopy=False, states=done))


def stale_trials(study: Any, study_dir: Path, space: sp.Space, logger: _Logger) -> list[Any]:
    """Trials left RUNNING by a driver that died: tell the ones whose record was written,
    return the others to be run again under the same number."""
    import optuna

    rerun = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        saved = read_outcome(study_dir, t.number)
        if saved is not None:
            tell(study, t, saved)
            logger.log(saved)
        else:
            rerun.append(t)
    return rerun


def reconcile(study: Any, study_dir: Path, logger: _Logger) -> None:
    """Log to MLflow every finished trial that has no complete child run yet."""
    import optuna

    logged = logger.logged()
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    for t in study.get_trials(deepcopy=False, states=done):
        if t.number in logged:
            continue
        saved = read_outcome(study_dir, t.number)
        if saved is not None:
            logger.log(saved)


class _Logger:
    """The single MLflow writer; a tracking failure is reported, never kills the study.

    Trials are logged by one background thread, in the order they finished, so that logging
    a trial (~1 s for a 1000-step probe's series on SQLite) runs beside the next trial instead
    of before it. Nothing is lost if the driver dies with trials still queued: a trial's record
    is on disk (trials/NNNN.json) and in Optuna before it is queued, and `reconcile` logs every
    finished trial without a complete MLflow run when the study resumes. Every other use of the
    client first waits for the queue to be empty (`drain`), so the client is never used by two
    threads at once.
    """

    def __init__(
        self, client: Any, experiment_id: str, parent: str, study_name: str, study_dir: Path
    ):
        self.client, self.experiment_id, self.parent = client, experiment_id, parent
        self.study_name, self.study_dir = study_name, study_dir
        self._queue: queue.Queue[Mapping[str, Any]] = queue.Queue()
        self._writer: threading.Thread | None = None

    def logged(self) -> set[int]:
        from autotune import tracking

        self.drain()
        return tracking.logged_trials(self.client, self.experiment_id, self.parent)

    def log(self, outcome: Mapping[str, Any]) -> None:
        """Queue a finished trial for logging (see the class)."""
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write, name="autotune-mlflow-writer", daemon=True
            )
            self._writer.start()
        self._queue.put(dict(outcome))

    def drain(self) -> None:
        """Wait until every queued trial is logged (or failed to be, with a warning)."""
        if self._writer is not None:
            self._queue.join()

    def _write(self) -> None:
        while True:
            outcome = self._queue.get()
            try:
                self._log_now(outcome)
            finally:
                self._queue.task_done()

    def _log_now(self, outcome: Mapping[str, Any]) -> None:
        from autotune import tracking

        try:
            tracking.log_trial(
                self.client, self.experiment_id, self.parent, self.study_name, dict(outcome)
            )
        except Exception as e:  # the record is on disk: the next run logs it again
            print(
                f"warning: could not log trial {outcome.get('number')} to MLflow "
                f"({type(e).__name__}: {e}); it will be logged when the study resumes",
                file=sys.stderr,
            )

    def verification(self, number: int, result: Mapping[str, Any], fp: Any) -> str | None:
        from autotune import tracking

        self.drain()
        try:
            return tracking.log_verification(
                self.client,
                self.experiment_id,
                name=f"verify-{number:04d}",
                result=result,
                tags={
                    tracking.TAG_STUDY: self.study_name,
                    tracking.TAG_VERIFIED_TRIAL: str(number),
                },
                parent_run_id=self.parent,
                fingerprint=fp,
            )
        except Exception as e:
            print(
                f"warning: could not log the verification of trial {number} to MLflow "
                f"({type(e).__name__}: {e})",
                file=sys.stderr,
            )
            return None

    def summary(self, summary: dict[str, Any], study: Any) -> None:
        from autotune import tracking

        self.drain()
        outcomes = [
            o
            for o in (
                read_outcome(self.study_dir, t.number) for t in study.get_trials(deepcopy=False)
            )
            if o is not None
        ]
        try:
            tracking.log_study_summary(
                self.client, self.parent, summary, outcomes, importances(study, summary)
            )
        except Exception as e:
            print(
                f"warning: could not log the study summary to MLflow ({type(e).__name__}: {e})",
                file=sys.stderr,
            )


def _trial_name(trial: Any) -> str:
    number = (trial.config or {}).get("number")
    return f"trial-{number:04d}" if isinstance(number, int) else f"trial-{trial.trial_id}"


def _run_trials(
    opts: StudyOptions,
    study: Any,
    searched: dict[str, sp.Domain],
    planned: int,
    rerun: list[Any],
    logger: _Logger,
    study_dir: Path,
    finished: int,
    ray: Any,
) -> bool:
    """Run `planned` trials through Ray Tune. Returns True when interrupted."""
    space = opts.space
    from ray import tune

    conc, resources, threads = plan_resources(space, ray.cluster_resources())
    conc = min(conc, planned)
    progress = Progress(space, space.budget.trials, finished, conc, opts.quiet)
    progress.say(
        f"  {conc} trial(s) at a time, each with {resources}"
        + (f", {threads} CPU thread(s)" if threads else "")
    )
    driver = _Driver(opts, study, searched, planned, rerun, logger, progress, study_dir, threads)
    searcher = _searcher_class()(driver)
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=planned,
            max_concurrent_trials=conc,
            trial_name_creator=_trial_name,
            trial_dirname_creator=_trial_name,
            # One Ray worker serves trial after trial (each probe is still its own process).
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=f"{space.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(study_dir / "tune"),
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
        ),
    )
    # Tune's result files are off (the driver keeps the records): silence its fetch warning.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    # Tune's own resume hint (Tuner.restore) is not how a study resumes: autotune says how.
    logging.getLogger("ray.tune.tune").setLevel(logging.ERROR)
    with progress:
        tuner.fit()
    left = space.budget.trials - count_finished(study)
    if left > 0:  # said even under --quiet: the user must know how to continue
        print(
            f"interrupted: {space.budget.trials - left} of {space.budget.trials} trials "
            "done; run the same command again (or add --resume) to continue",
            file=sys.stderr,
        )
        return True
    return False


# ---------------------------------------------------------------------------------------------
# Verification of the best candidates (see autotune.verify)
# ---------------------------------------------------------------------------------------------


def to_verify(study: Any, space: sp.Space) -> list[Any]:
    """The best `verify.top_k` candidates (by their own values) not yet verified."""
    from autotune import pick

    if space.verify.top_k <= 0:
        return []
    objectives = [o.model_dump() for o in space.objectives]
    cands = pick.candidates(study)
    plain = [dataclasses.replace(c, verified=None) for c in cands]
    top = {c.number for c in pick.ranked(plain, objectives)[: space.verify.top_k]}
    return [c for c in cands if c.number in top and c.verified is None]


def _verify_task(
    probe: dict[str, Any], env: dict[str, str], timeout_s: float, threads: int | None
) -> dict[str, Any]:
    """A Ray task: one verification probe in a fresh process on a worker."""
    out = run_trial_process(probe, env, timeout_s=timeout_s, threads=threads)
    with contextlib.suppress(Exception):
        import ray

        out["ray_node"] = ray.get_runtime_context().get_node_id()
    return out


def _verify_path(study_dir: Path, number: int, seed: int) -> Path:
    return study_dir / "verify" / f"{number:04d}-seed{seed}.json"


def _verify_phase(
    opts: StudyOptions, study: Any, logger: _Logger, study_dir: Path, ray: Any
) -> bool:
    """Re-run the best candidates with other seeds; store the verified numbers in the study and
    MLflow. Returns True when interrupted (what finished is kept: the next run continues)."""
    from autotune import verify as vf

    space = opts.space
    todo = to_verify(study, space)
    if not todo:
        return False
    say = (lambda _t: None) if opts.quiet else print
    conc, resources, threads = plan_resources(space, ray.cluster_resources())
    seeds = vf.seeds_for(space.probe.seed, space.verify.seeds)
    metrics = list(dict.fromkeys([*(o.metric for o in space.objectives), *vf.REPORTED]))
    say(
        f"verifying the best {len(todo)} candidate(s) (trials "
        f"{', '.join(str(c.number) for c in todo)}) with seeds {seeds}"
    )
    remote = ray.remote(num_cpus=resources.get("cpu", 1.0), num_gpus=resources.get("gpu", 0.0))(
        _verify_task
    )
    results: dict[int, list[dict[str, Any]]] = {c.number: [] for c in todo}
    pending: list[tuple[Any, int]] = []
    for c in todo:
        for seed in seeds:
            path = _verify_path(study_dir, c.number, seed)
            if path.is_file():
                results[c.number].append(json.loads(path.read_text()))
            else:
                pending.append((c, seed))
    inflight: dict[Any, tuple[Any, int]] = {}
    started = time.monotonic()
    total = len(todo) * len(seeds)

    def finished(c: Any) -> None:
        runs = sorted(results[c.number], key=lambda r: r["seed"])
        res = vf.summarize_seeds(runs, metrics)
        fp = next((r.get("fingerprint") for r in runs if r.get("fingerprint")), None)
        res["run_id"] = logger.verification(c.number, res, fp)
        study.set_user_attr(f"autotune.verified.{c.number}", res)
        shown = "  ".join(f"{m} {vf.format_interval(res['metrics'].get(m))}" for m in metrics[:2])
        say(f"  verified trial {c.number}: {shown}  diverged {res['diverged_share']:.0%} of seeds")

    for c in todo:
        if len(results[c.number]) == len(seeds):
            finished(c)
    try:
        while pending or inflight:
            while pending and len(inflight) < conc:
                c, seed = pending.pop(0)
                cfg = ProbeConfig.from_space(space, knobs=c.knobs, env=c.env, seed=seed)
                ref = remote.remote(cfg.to_dict(), c.env, space.budget.trial_timeout_s, threads)
                inflight[ref] = (c, seed)
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                c, seed = inflight.pop(ref)
                try:
                    out = ray.get(ref)
                except Exception as e:  # the worker died: a failed seed, not a failed study
                    out = {
                        "outcome": "failed",
                        "cause": "worker_died",
                        "error": f"{type(e).__name__}: {str(e)[:500]}",
                        "summary": None,
                    }
                out.update(seed=seed, number=c.number)
                path = _verify_path(study_dir, c.number, seed)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                slim = dict(out)
                if slim.get("summary"):
                    slim["summary"] = {k: v for k, v in slim["summary"].items() if k != "series"}
                tmp.write_text(json.dumps(slim, default=str))
                os.replace(tmp, path)
                results[c.number].append(slim)
                done = sum(len(v) for v in results.values())
                say(
                    f"  [{done}/{total}] trial {c.number} seed {seed}: {out['outcome']}"
                    + (f" ({out['cause']})" if out.get("cause") else "")
                    + f"  [{_fmt_s(time.monotonic() - started)}]"
                )
                if len(results[c.number]) == len(seeds):
                    finished(c)
    except KeyboardInterrupt:
        for ref in inflight:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        print(
            "interrupted during verification; run the same command again to finish it",
            file=sys.stderr,
        )
        return True
    return False


# ---------------------------------------------------------------------------------------------
# Summary: Pareto front, improvement over the baseline
# ---------------------------------------------------------------------------------------------


def pareto_front(points: Sequence[tuple[int, Sequence[float]]], dirs: Sequence[str]) -> list[int]:
    return [n for n, v in points if not any(dominates(w, v, dirs) for m, w in points if m != n)]


def summarize(
    study: Any,
    space: sp.Space,
    study_dir: Path | None = None,
    dropped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The study's summary from the Optuna storage alone (so `autotune show` can print it)."""
    import optuna

    trials = study.get_trials(deepcopy=False)
    dirs = directions(space)
    counts: dict[str, int] = {"complete": 0, "diverged": 0, "oom": 0, "failed": 0, "running": 0}
    feasible: list[tuple[int, list[float]]] = []
    baseline = None
    info: dict[int, Any] = {}
    for t in trials:
        if t.state == optuna.trial.TrialState.RUNNING:
            counts["running"] += 1
            continue
        outcome = t.user_attrs.get("autotune.outcome", "failed")
        counts[outcome] = counts.get(outcome, 0) + 1
        info[t.number] = t
        if t.user_attrs.get("autotune.baseline"):
            baseline = t
        if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("autotune.feasible"):
            feasible.append((t.number, list(t.values)))
    front = sorted(
        pareto_front(feasible, dirs),
        key=lambda n: info[n].values[0] * (1 if dirs[0] == "minimize" else -1),
    )
    objectives = [o.model_dump() for o in space.objectives]

    def broken(t: Any) -> list[str]:
        """The space constraints a completed trial breaks, with its value."""
        metrics = t.user_attrs.get("autotune.metrics") or {}
        names = constraint_names(space)[1:]
        values = constraints_of(space, "complete", metrics)[1:]
        out = []
        for c, name, v in zip(space.constraints, names, values, strict=True):
            if v > 0:
                got = metrics.get(c.metric)
                out.append(f"{name} (got {got:.3g})" if got is not None else f"{name} (no value)")
        return out

    def row(t: Any) -> dict[str, Any]:
        return {
            "number": t.number,
            "values": list(t.values) if t.values else None,
            "metrics": t.user_attrs.get("autotune.metrics", {}),
            "knobs": t.user_attrs.get("autotune.knobs", {}),
            "params": dict(t.params),
            "outcome": t.user_attrs.get("autotune.outcome"),
            "cause": t.user_attrs.get("autotune.cause"),
            "feasible": bool(t.user_attrs.get("autotune.feasible")),
            "baseline": bool(t.user_attrs.get("autotune.baseline")),
            "broken": broken(t) if t.user_attrs.get("autotune.outcome") == "complete" else [],
        }

    best: dict[str, float] = {}
    improvement: dict[str, Any] = {}
    for i, o in enumerate(space.objectives):
        vals = [v[i] for _, v in feasible]
        if not vals:
            continue
        b = min(vals) if o.direction == "minimize" else max(vals)
        best[o.metric] = b
        base = (
            (baseline.user_attrs.get("autotune.metrics") or {}).get(o.metric) if baseline else None
        )
        change = None
        if base is not None and base != 0 and math.isfinite(base):
            change = 100.0 * (b - base) / abs(base)
        improvement[o.metric] = {"baseline": base, "best": b, "change_pct": change}
    return {
        **_verified_and_pick(study, objectives),
        "study": space.name,
        "objectives": objectives,
        "trials": space.budget.trials,
        "baseline": row(baseline) if baseline is not None else None,
        "pareto": [row(info[n]) for n in front],
        "best": best,
        "improvement": improvement,
        "counts": counts,
        "dropped_knobs": dict(dropped or {}),
        "study_dir": str(study_dir) if study_dir else None,
    }


def _verified_and_pick(study: Any, objectives: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's `verified`, `pick` and `warm_start` parts."""
    import optuna

    from autotune import pick as pk

    cands = pk.candidates(study)
    verified = [
        {
            "number": c.number,
            "diverged_share": c.verified.get("diverged_share"),
            "seeds": c.verified.get("seeds"),
            "metrics": {
                o["metric"]: (c.verified.get("metrics") or {}).get(o["metric"]) for o in objectives
            },
            "run_id": c.verified.get("run_id"),
        }
        for c in pk.ranked(cands, objectives)
        if c.verified
    ]
    out: dict[str, Any] = {"verified": verified, "pick": None, "warm_start": None}
    if cands:
        chosen = pk.pick(cands, objectives, "balanced")
        out["pick"] = {
            "how": "balanced",
            "number": chosen.number,
            "verified": chosen.verified is not None,
            "values": [chosen.value(o["metric"], i) for i, o in enumerate(objectives)],
            "params": chosen.params,
            "knobs": chosen.knobs,
        }
    warm = study.user_attrs.get("autotune.warm_start")
    if warm:
        feasible = [
            (t.number, t.values)
            for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
            if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("autotune.feasible")
        ]
        matched = None
        if warm.get("best") and [o["metric"] for o in warm.get("objectives") or []] == [
            o["metric"] for o in objectives
        ]:
            matched = pk.matched_at(feasible, warm["best"], objectives)
        out["warm_start"] = {**warm, "matched_at": matched}
    return out


def importances(study: Any, summary: Mapping[str, Any]) -> dict[str, dict[str, float]] | None:
    """Parameter importances per objective: Optuna's PED-ANOVA evaluator (which parameters
    matter for reaching the best values). Not fANOVA or mean decrease in impurity: those fit
    random forests with scikit-learn, whose import alone took 2 s at the end of every study."""
    import optuna

    complete = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.params and t.user_attrs.get("autotune.feasible")
    ]
    if len(complete) < 3:
        return None
    out: dict[str, dict[str, float]] = {}
    for i, o in enumerate(summary["objectives"]):
        try:
            with warnings.catch_warnings():
                # It warns that it looks for low target values: a maximised one is negated.
                warnings.simplefilter("ignore", UserWarning)
                out[o["metric"]] = dict(
                    optuna.importance.get_param_importances(
                        study,
                        target=_value_getter(i, o.get("direction", "minimize")),
                        evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                        params=None,
                    )
                )
        except Exception:
            continue
    return out or None


def _value_getter(i: int, direction: str) -> Callable[[Any], float]:
    sign = -1.0 if direction == "maximize" else 1.0
    return lambda t: sign * float(t.values[i])


def format_summary(summary: Mapping[str, Any], *, tracking_uri: str | None = None) -> str:
    """The end-of-study report: counts, baseline vs best, the Pareto front, where to look."""
    lines = []
    c = summary["counts"]
    done = sum(v for k, v in c.items() if k != "running")
    lines.append(
        f"study {summary['study']}: {done}/{summary['trials']} trials — "
        f"{c.get('complete', 0)} complete, {c.get('diverged', 0)} diverged, "
        f"{c.get('oom', 0)} out of memory, {c.get('failed', 0)} failed"
        + (f", {c['running']} interrupted" if c.get("running") else "")
    )
    base = summary.get("baseline")
    objs = summary["objectives"]
    if base is not None:
        state = base["outcome"] + (f" ({base['cause']})" if base.get("cause") else "")
        if base["outcome"] == "complete" and not base["feasible"]:
            broken = base.get("broken") or []
            state += f" (infeasible: breaks {', '.join(broken)})" if broken else " (infeasible)"
        lines.append(f"baseline (trial {base['number']}, PyTorch defaults): {state}")
    for o in objs:
        imp = summary["improvement"].get(o["metric"])
        if not imp:
            continue
        b = imp["baseline"]
        text = f"  {o['metric']:<12} best {imp['best']:.4g}"
        if b is not None:
            text += f"  baseline {b:.4g}"
            if imp["change_pct"] is not None:
                text += f"  ({imp['change_pct']:+.1f}%)"
        lines.append(text)
    if not summary["pareto"]:
        lines.append(
            "no feasible trial: every trial diverged, failed or broke a constraint "
            "(see `autotune show` and the MLflow UI for causes)"
        )
    else:
        lines.append("Pareto front (feasible trials no other trial beats on every objective):")
        header = f"  {'trial':>5}  " + "  ".join(f"{o['metric']:>12}" for o in objs) + "  knobs"
        lines.append(header)
        for r in summary["pareto"]:
            vals = "  ".join(f"{v:>12.4g}" for v in r["values"])
            params = ", ".join(f"{k}={_short(v)}" for k, v in r["params"].items())
            lines.append(f"  {r['number']:>5}  {vals}  {params}")
    if summary.get("verified"):
        from autotune.verify import format_interval

        first = summary["verified"][0]
        lines.append(
            f"verified with seeds {first.get('seeds')} (mean [95% interval] over the seeds that "
            "did not diverge):"
        )
        for v in summary["verified"]:
            vals = "  ".join(
                f"{o['metric']} {format_interval(v['metrics'].get(o['metric']))}" for o in objs
            )
            lines.append(
                f"  trial {v['number']:>4}  {vals}  diverged {v['diverged_share'] or 0:.0%}"
            )
    pick = summary.get("pick")
    if pick:
        lines.append(
            f"pick (balanced: the knee of the front{', verified' if pick['verified'] else ''}): "
            f"trial {pick['number']}  "
            + ", ".join(f"{k}={_short(v)}" for k, v in (pick.get("params") or {}).items())
        )
    warm = summary.get("warm_start")
    if warm:
        text = f"warm start from {warm['ref']}" + (
            f" (tuned on {warm['fp_hash']})" if warm.get("fp_hash") else ""
        )
        if warm.get("matched_at") is not None:
            text += (
                f": matched the source's best at trial {warm['matched_at']} "
                f"({warm['matched_at'] + 1} trials, counting the baseline)"
            )
        elif warm.get("best"):
            text += ": the source's best was not matched (within 5%) in this study"
        lines.append(text)
    for name, why in (summary.get("dropped_knobs") or {}).items():
        lines.append(f"not searched: {name} ({why})")
    lines.append(
        "next: `autotune ui` to browse the trials"
        + (f" ({_redact(tracking_uri)})" if tracking_uri else "")
        + f", `autotune show {summary['study']}` for this summary again"
        + (f", `autotune export {summary['study']} -o recipe.yaml` for the recipe" if pick else "")
    )
    return "\n".join(lines)


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def find_study(ref: str, storage: str | None = None) -> tuple[Any, sp.Space, Path | None, dict]:
    """An existing study by folder, name under ./autotune-studies, or name in --storage."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = Path(ref)
    meta: dict[str, Any] = {}
    study_dir: Path | None = None
    for candidate in (path, study_dir_for(ref)):
        if (candidate / "study.json").is_file():
            study_dir = candidate.resolve()
            meta = json.loads((candidate / "study.json").read_text())
            break
    url = storage or meta.get("storage")
    if url is None:
        raise StudyError(
            f"no study '{ref}': not a study folder, no ./{STUDIES_DIR}/{ref}, and no "
            "--storage given"
        )
    name = meta.get("name", ref)
    st = open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=st)
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(st)]
        raise StudyError(
            f"no study '{name}' in {_redact(url)}; studies there: {', '.join(known) or 'none'}"
        ) from None
    space = sp.loads(study.user_attrs["autotune.space_yaml"], source=f"study {name}")
    meta.setdefault("storage", url)
    return study, space, study_dir, meta
