"""`run(options)`: one session of a study, from the service checks to the summary."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import fingerprint as fpm
from autotune import space as sp
from autotune import tracking
from autotune.errors import SpaceError, StudyError, TrialsFailed, WorkloadError
from autotune.probe.steps import device_problem
from autotune.probe.workload import resolve
from autotune.study import attrs as ua
from autotune.study import clip_seed, folder, signals
from autotune.study.adapter import run_trials
from autotune.study.confirm import confirm_phase, to_confirm
from autotune.study.failures import BaselineFailed, baseline_stop, every_trial_failed, failed_trials
from autotune.study.fits import check_trial_fits, cluster_nodes, local_node
from autotune.study.importance import importances
from autotune.study.opening import check_study, open_study
from autotune.study.options import StudyOptions, StudyResult, study_dir_for
from autotune.study.ray_start import RayStart
from autotune.study.records import count_finished, read_outcome
from autotune.study.resume import reconcile, stale_trials
from autotune.study.rung_async import rung_async
from autotune.study.rung_phase import rejudge_screen, rung_phase
from autotune.study.rungs import pending as rungs_pending
from autotune.study.session import check_ray_address, driver_lock, ray_session
from autotune.study.storage import (
    check_folder_storage,
    check_resumable,
    check_storage,
    connection_kept,
    open_storage,
    sqlite_file,
    storage_url,
)
from autotune.study.summary import summarize
from autotune.study.timeline import mark
from autotune.study.verification import seeds_kept, to_verify, verify_phase
from autotune.study.writer import MlflowWriter
from autotune.study.yardstick import yardstick_phase
from autotune.tracking.connection import redact


def run(opts: StudyOptions) -> StudyResult:
    """Run (or continue) the study described by `opts.space`; return its summary."""
    import optuna

    mark("driver")
    space = opts.space
    study_dir = (opts.study_dir or study_dir_for(space.name)).resolve()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Every service is checked before anything is written (a study folder that cannot be made,
    # an unreachable store, database or Ray cluster, a --resume of no study: nothing is made).
    # The stores are opened under the study lock (a second driver stops there); a failure
    # before the study is written removes what the run made (`Made`).
    url = storage_url(opts, study_dir)
    say = (lambda _t: None) if opts.quiet else print
    uri, said = folder.tracking_uri(opts.tracking_uri, study_dir, space.name)  # its own store
    if said:
        say(said)
    _check_services(opts, url, uri, study_dir)
    mark("services checked")
    with (
        signals.handled(),  # Ctrl-C and SIGTERM stop the study, until Ray is shut down
        driver_lock(study_dir) as made,
        contextlib.ExitStack() as ray_start,  # Ray's start, once the study is not refused
        connection_kept(url, lambda: made.kept),  # its server lost mid-study: one line
    ):
        fp = fpm.collect()
        cond = sp.condition_on(space, fp)
        mark("fingerprint")
        for name, why in cond.dropped.items():
            say(f"dropped knob {name}: {why}")
        opts = replace(opts, space=(space := baseline_alone(space, cond, say)))
        # A store file this run makes is removed again if the study fails before it is written
        # (`made.keep`), with the study folder, the lock and Ray's session folder.
        made.note(sqlite_file(url), "studies")
        storage = open_storage(url)
        mark("optuna storage")
        # What would refuse the study (nothing is written yet), asked before Ray starts and
        # MLflow's store opens: a refusal waits for neither (both cost seconds of CPU).
        before = check_study(opts, storage, study_dir if opts.storage else None, study_dir)
        # Ray starts in a thread while MLflow is imported and its store opened; not at all for
        # a study that has nothing left to run (a --resume of a finished one: its summary).
        early = None
        if before is None or work_left(before, space):
            early = _start_ray(ray_start, opts, study_dir)
        made.note(tracking.sqlite_path(uri) if uri.startswith("sqlite") else None, "runs")
        client = tracking.connect(uri)
        mark("mlflow store")
        if early is not None:
            _ray_up(opts, early)
        # its home checked (a shared --storage) and `check_study` asked again: another folder's
        # driver, not under our lock, may have made it meanwhile; the default storage is ours
        study = open_study(opts, storage, cond, study_dir if opts.storage else None, study_dir)
        stop_if_baseline_failed(study, study_dir, space.name)
        mark("optuna study")
        logger = _study_run(opts, study, client, cond, url, uri, fp, study_dir)
        signals.on_abort(logger.end_killed)  # ended at once (its Ray gone): no run left RUNNING
        made.keep()  # the study and its MLflow run exist: what follows is kept
        signals.written()  # a stop now says --resume carries on
        mark("mlflow run")
        reconcile(study, study_dir, logger)
        _write_study_json(study_dir, space.name, url, uri, logger)

        rerun = stale_trials(study, study_dir, logger)
        finished = count_finished(study)
        planned = max(0, space.budget.trials - finished)
        _announce(say, space, finished, planned, len(rerun), url, uri)
        if kept := seeds_kept(study, space):  # verify.seeds changed on a resume
            say(f"  warning: {kept}")
        mark("resume checked")
        interrupted, failure = False, None
        if work_left(study, space):
            if early is None:  # work found once the study was opened after all: Ray starts now
                _ray_up(opts, early := _start_ray(ray_start, opts, study_dir))
            with ray_session(opts.address, study_dir, started=early) as ray:
                mark("ray started")
                args = (opts, study, cond, logger, study_dir, ray, say, planned, rerun, finished)
                interrupted, failure = _phases(*args)
            mark("ray stopped")  # its shutdown goes on in its thread (`early.close` waits)
        elif early is not None:
            early.stop()
        summary = summarize(study, space, study_dir, cond.dropped)
        mark("summary")
        found = importances(study, summary)
        mark("importances")
        logger.summary(summary, study, found)
        mark("summary logged")
        if failure is None and not interrupted:
            failure = every_trial_failed(summary["counts"], summary["failures"])
    mark("driver done")
    return StudyResult(
        name=space.name,
        study_dir=study_dir,
        storage=url,
        tracking_uri=uri,
        summary=summary,
        interrupted=interrupted and failure is None,
        failure=failure,
    )


def work_left(study: Any, space: sp.Space) -> bool:
    """Whether the stored `study` has anything left to run for `space`: trials short of its
    budget, or rungs, a verification or a confirmation still to do."""
    if space.budget.trials > count_finished(study):
        return True
    later = (rungs_pending, to_verify, to_confirm)  # each asked only if those before say no
    return any(work(study, space) for work in later)


def _start_ray(stack: contextlib.ExitStack, opts: StudyOptions, study_dir: Path) -> RayStart:
    """Ray's start in its thread (`RayStart`), closed (shut down) when `stack` ends."""
    return stack.enter_context(contextlib.closing(RayStart(opts.address, study_dir)))


def _ray_up(opts: StudyOptions, early: RayStart) -> None:
    """Wait for Ray's start (`early`). Ray must be up (the cluster joined) before the study is
    written: a start or a join that fails stops the study here, and the driver's `made` removes
    what the run made (the folder, the stores' new files) instead of leaving a study with an
    MLflow run stuck RUNNING. On a cluster, its devices and nodes are checked against the
    space."""
    ray = early.wait()
    cluster = _cluster_address(opts)  # a local Ray is this machine's: checked up front
    signals.defer(cluster)  # Ray is up: a signal now stops each phase at its next probe
    mark("ray up")
    if cluster is not None:
        space = opts.space
        check_cluster_device(space, ray.cluster_resources(), cluster)
        check_trial_fits(space, cluster_nodes(ray), f"the Ray cluster at {cluster}")


def _phases(
    opts: StudyOptions, study: Any, cond: sp.Conditioned, logger: Any, study_dir: Path, ray: Any,
    say: Any, planned: int, rerun: list[Any], finished: int,
) -> tuple[bool, str | None]:  # fmt: skip
    """The screen (the baseline first with `clip_norm: auto`), the yardstick, the rungs, the
    verification and its confirmation, each only if the one before was not interrupted.
    Returns (interrupted, why the study failed: the baseline did, else None). Each phase stops
    at a signal (Ctrl-C or SIGTERM: `signals`) and says so itself, or here before the first."""
    if signals.stopping():
        print(signals.INTERRUPTED, file=sys.stderr)
        return True, None
    interrupted, failure = False, None
    try:
        if planned > 0:  # `clip_norm: auto`: the baseline first, then the range
            run = (opts, study, cond, logger, study_dir, ray, say)
            interrupted, planned, rerun, finished = _auto_clip(*run, planned, rerun, finished)
        if planned > 0 and not interrupted:
            args = (opts, study, cond.searched, planned, rerun, logger, study_dir, finished, ray)
            interrupted = run_trials(*args)
    except BaselineFailed as e:  # nothing is judged without it: the study stops
        interrupted, failure = True, str(e)
    mark("screen")
    if not interrupted:  # the baseline's other seeds: the screen's yardstick
        interrupted = yardstick_phase(opts, study, study_dir, ray, logger)
    if not interrupted:  # the sampler learnt from the screen; the rungs decide
        rejudge_screen(study, opts.space)
        logger.screen_verdicts(study)
        rungs = rung_async if opts.space.rungs.promotion == "async" else rung_phase
        interrupted = rungs(opts, study, logger, study_dir, ray)
    mark("rungs")
    if not interrupted:  # then a `better` chosen among several, judged again with fresh seeds
        at = (opts, study, logger, study_dir, ray)
        interrupted = verify_phase(*at) or confirm_phase(*at)
    mark("verification")
    return interrupted, failure


def baseline_alone(space: sp.Space, cond: sp.Conditioned, say: Callable[[str], None]) -> sp.Space:
    """Nothing to search (every knob fixed, or dropped here): the baseline alone, unverified.
    Its other trials were copies of it, verified against it (12 probes for one, in a review)."""
    if cond.searched:
        return space
    say(
        f"nothing to search: the baseline alone runs (not {space.budget.trials} copies of it), "
        "unverified; `autotune probe` runs one configuration, `autotune repro` over seeds"
    )
    verify = space.verify.model_copy(update={"top_k": 0})
    return replace(space, verify=verify, budget=space.budget.model_copy(update={"trials": 1}))


def stop_if_baseline_failed(study: Any, study_dir: Path, name: str) -> None:
    """A study whose baseline failed in an earlier session is not continued: its trials would
    be judged against nothing. TrialsFailed (exit status 1) says how to start it afresh."""
    row = next((r for r in failed_trials(study) if r["baseline"]), None)
    if row is not None:
        raise TrialsFailed(baseline_stop(row, study_dir, name))


def _auto_clip(
    opts: StudyOptions, study: Any, cond: sp.Conditioned, logger: Any, study_dir: Path, ray: Any,
    say: Any, planned: int, rerun: list[Any], finished: int,
) -> tuple[bool, int, list[Any], int]:  # fmt: skip
    """With `clip_norm: auto`, run the baseline alone first (unless it has run), then seed the
    searched clip_norm from its gradient norms (`clip_seed`), saying what was measured.
    Returns (interrupted, the trials still planned, the stale ones to re-run, finished)."""
    if not clip_seed.pending(cond.searched):
        return False, planned, rerun, finished
    info = clip_seed.seed(study, study_dir, cond.searched)
    if info is None and read_outcome(study_dir, 0) is None:
        base = [t for t in rerun if ua.is_baseline(t)]
        if run_trials(opts, study, cond.searched, 1, base, logger, study_dir, finished, ray):
            return True, planned, rerun, finished
        rerun = [t for t in rerun if not ua.is_baseline(t)]
        planned, finished = planned - 1, finished + 1
        info = clip_seed.seed(study, study_dir, cond.searched)
    say(
        clip_seed.text(info)
        if info
        else "clip_norm: auto: the baseline left no finite positive gradient norm (none, or all "
        "zero: no gradient reaches the parameters); clip_norm is "
        "searched in the placeholder range [0.05, 5] (log)"
    )
    return False, planned, rerun, finished


def _check_services(opts: StudyOptions, url: str, uri: str, study_dir: Path) -> None:
    """What can be checked before anything is made: the study folder can be made; the Optuna
    storage is a database SQLAlchemy knows that answers, or an SQLite file whose folder is
    there (with --resume: holds the study); the tracking store answers (or its SQLite folder
    can be made); the Ray cluster answers; the workload is found."""
    problem = tracking.folder_problem(study_dir)
    if problem is not None:
        raise StudyError(f"cannot make the study folder {study_dir}: {problem}; fix --study-dir")
    if not opts.storage:  # a study.json naming another storage: pass it, not this folder's
        check_folder_storage(url, study_dir)
    check_storage(url, study_dir)
    if opts.resume:
        check_resumable(url, opts.space.name)
    tracking.check_uri(uri)
    address = _cluster_address(opts)
    if address and address != "auto":
        check_ray_address(address)
    check_workload(opts.space)
    if address is None:  # the trials run on a local Ray: this machine's devices
        check_device(opts.space)
        check_trial_fits(opts.space, [local_node(opts.space)], "this machine")


def _cluster_address(opts: StudyOptions) -> str | None:
    """The Ray cluster the study joins (--address, else $RAY_ADDRESS); None: a local Ray."""
    return opts.address or os.environ.get("RAY_ADDRESS") or None


def _study_run(
    opts: StudyOptions, study: Any, client: Any, cond: sp.Conditioned, url: str, uri: str,
    fp: dict[str, Any], study_dir: Path,
) -> MlflowWriter:  # fmt: skip
    """The study's MLflow experiment and parent run (made or found), noted in the study; the
    writer that logs to them."""
    space = opts.space
    experiment_id = tracking.ensure_experiment(client, space.name)
    before = study.user_attrs.get(ua.MLFLOW) or {}  # a resumed study's own run
    parent = tracking.ensure_study_run(
        client,
        experiment_id,
        space.name,
        space_yaml=sp.dump(space),
        params=_study_params(space, cond, url),
        tags={tracking.TAG_DRIVER_FP: str(fp.get("hash")), **opts.extra_tags},
        run_id=before.get("parent_run_id") if isinstance(before, dict) else None,
    )
    # Redacted: anyone who can read the Optuna storage reads its attributes (optuna-dashboard);
    # the readers match it to the URI the user gives (`tracking.unredacted`).
    record = {"uri": redact(uri), "experiment_id": experiment_id, "parent_run_id": parent}
    study.set_user_attr(ua.MLFLOW, record)
    return MlflowWriter(client, experiment_id, parent, space.name, study_dir)


def _write_study_json(study_dir: Path, name: str, url: str, uri: str, logger: MlflowWriter) -> None:
    """study.json: where the study's stores are (how `find_study` finds it by its folder), as
    given, passwords included (so that `show`, `export` and `--resume` from the folder reach
    them): readable by its owner alone."""
    record = folder.meta_record(
        study_dir,
        name,
        url,
        tracking_uri=uri,
        experiment_id=logger.experiment_id,
        parent_run_id=logger.parent,
    )
    folder.write_json(folder.study_json(study_dir), record, indent=2, private=True)


def _announce(
    say: Callable[[str], None],
    space: sp.Space,
    finished: int,
    planned: int,
    reruns: int,
    url: str,
    uri: str,
) -> None:
    if planned == 0 and finished > space.budget.trials:  # budget.trials lowered on a resume
        say(f"study {space.name}: {finished} trials done, the budget is {space.budget.trials}")
        return
    if planned == 0:
        say(f"study {space.name}: all {space.budget.trials} trials are done")
        return
    say(
        f"study {space.name}: {finished} of {space.budget.trials} trials done; "
        f"running {planned}" + (f" ({reruns} interrupted earlier)" if reruns else "")
    )
    if space.budget.target_steps is None:
        say(
            f"  no budget.target_steps: decided at the probe length ({space.probe.steps} steps); "
            "set it to the length you train"
        )
    for line in sp.schedule_warnings(space) + sp.env_warnings(space):
        say(f"  warning: {line}")
    say(f"  optuna storage {redact(url)}")
    say(f"  mlflow {redact(uri)} (experiment {space.name})")


def check_workload(space: sp.Space) -> None:
    """Resolve the space's workload once on the driver: a wrong name fails before any trial."""
    if space.workload.script is not None:
        check_script(space)
        return
    try:
        resolve(space.workload.name, space.workload.size)
    except WorkloadError as e:
        raise WorkloadError(f"{space.source}: workload: {e}") from e


def check_device(space: sp.Space) -> None:
    """A `probe.device` that asks for a GPU (cuda, cuda:N) on this machine, where torch sees
    none, is refused naming the space file and the key: every probe would raise at its first
    step (the baseline's, so the study would stop with a folder made for nothing). Run where the
    probes run: `autotune check` and `probe`, and a study on a local Ray; a study on a cluster
    asks the cluster (`check_cluster_device`), whose driver may have no GPU of its own."""
    problem = device_problem(space.probe.device)
    if problem is not None:
        raise SpaceError(f"{space.source}: probe.device: {problem}")


def check_cluster_device(space: sp.Space, resources: Mapping[str, float], address: str) -> None:
    """On a cluster, a `probe.device` that asks for a GPU where the cluster has none (its Ray
    resources, which place the trials: `session.plan_resources`, list no GPU) is refused, as
    `check_device` refuses it on this machine (the driver itself may have no GPU)."""
    device = space.probe.device
    if device.startswith("cuda") and not float(resources.get("GPU", 0) or 0) > 0:
        raise SpaceError(
            f"{space.source}: probe.device: {device!r} asks for a GPU, but the Ray cluster at "
            f"{address} has none (its resources list no GPU); set probe.device to cpu or auto, "
            "or join a cluster with GPU nodes"
        )


def check_script(space: sp.Space) -> None:
    """A training script is compiled here, never run: a syntax error fails before any trial;
    what a script cannot do yet (DDP, an OOM retry, a scaling measurement) is refused."""
    p, path = space.probe, str(space.workload.script)
    for key, on in (
        ("world_size", p.world_size > 1),
        ("oom_retry", p.oom_retry),
        ("measure_scaling", p.measure_scaling),
    ):
        if on:
            raise SpaceError(
                f"{space.source}: probe.{key}: not available with a workload script (yet)"
            )
    try:
        compile(Path(path).read_bytes(), path, "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes, on some Pythons
        line = getattr(e, "lineno", None)
        at = f"{Path(path).name}:{line}" if line else f"{path}: not Python source"
        raise WorkloadError(f"{at}: {getattr(e, 'msg', None) or e}") from None
    except OSError as e:
        raise WorkloadError(f"{space.source}: workload.script: {path}: {e.strerror}") from None


def _study_params(space: sp.Space, cond: sp.Conditioned, url: str) -> dict[str, Any]:
    return {
        "workload": space.workload.name,
        "size": space.workload.size,
        "sampler": space.sampler.name,
        "sampler_seed": space.sampler.seed,
        "trials": space.budget.trials,
        "steps": space.probe.steps,
        "batch": space.probe.samples_per_step,
        "target_steps": space.budget.target_steps,
        "precision": space.probe.precision,
        "seed": space.probe.seed,
        "objectives": ", ".join(f"{o.direction} {o.metric}" for o in space.objectives),
        "constraints": ", ".join(c.label for c in space.constraints),
        "searched": ", ".join(cond.searched) or "-",
        "dropped": ", ".join(cond.dropped) or "-",
        "optuna_storage": redact(url),
    }
