"""A study started again: trials left running by a driver that died are told from their record
or run again, and finished trials, rung probes, verifications and a confirmation without an
MLflow run (the store was down when they finished, or the driver died first) are logged again.

Optuna's storage and trials/NNNN.json are the truth; MLflow is brought in line with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune import tracking
from autotune.study import attrs as ua
from autotune.study.folder import read_json, read_rung_record, verify_path
from autotune.study.records import read_outcome, tell
from autotune.study.writer import MlflowWriter


def stale_trials(study: Any, study_dir: Path, logger: MlflowWriter) -> list[Any]:
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


def reconcile(study: Any, study_dir: Path, logger: MlflowWriter) -> None:
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
    _rung_runs(study, study_dir, logger)
    _verification_runs(study, study_dir, logger)
    _confirmation_runs(study, study_dir, logger)


def _rung_runs(study: Any, study_dir: Path, logger: MlflowWriter) -> None:
    """Log every rung probe the study recorded whose run is missing (queued behind the trials:
    a rung run is nested under its trial's)."""
    rows = study.user_attrs.get(ua.RUNGS) or []
    if not rows:
        return
    logged = logger.logged_rungs()
    for row in rows:
        steps = int(row["steps"])
        for n in row.get("numbers") or []:
            record = read_rung_record(study_dir, int(n), int(row["rung"]), steps)
            if record is not None and (int(n), steps) not in logged:
                logger.log_rung(record)


def _verification_runs(study: Any, study_dir: Path, logger: MlflowWriter) -> None:
    """Log every verification the study stored without a run (`run_id` None: MLflow failed
    then), from its stored result and its seeds' files; the run's id is stored with it."""
    for key, res in list(study.user_attrs.items()):
        number = ua.verified_of(key)
        if number is None or not isinstance(res, dict) or res.get("run_id"):
            continue
        run_id = logger.seed_runs(number, res, _seed_records(study_dir, number, res))
        if run_id is not None:
            study.set_user_attr(key, {**res, "run_id": run_id})


def _confirmation_runs(study: Any, study_dir: Path, logger: MlflowWriter) -> None:
    """Log each side of the stored confirmation (`attrs.CONFIRMED`: the pick's and the
    baseline's every seed) that has no run, as `confirm.confirm_phase` logs it; the runs' ids
    are stored with it."""
    conf = study.user_attrs.get(ua.CONFIRMED)
    if not isinstance(conf, dict) or not isinstance(conf.get("run_ids"), dict):
        return
    ids = dict(conf["run_ids"])
    sides = (
        (conf.get("number"), conf.get("pick")),
        (conf.get("baseline"), conf.get("baseline_result")),
    )
    for number, res in sides:
        if not isinstance(number, int) or not isinstance(res, dict) or ids.get(str(number)):
            continue
        tags = {tracking.TAG_CONFIRMATION: "true"}
        runs = _seed_records(study_dir, number, res)
        ids[str(number)] = logger.seed_runs(number, res, runs, f"confirm-{number:04d}", tags)
    if ids != conf["run_ids"]:
        study.set_user_attr(ua.CONFIRMED, {**conf, "run_ids": ids})


def _seed_records(study_dir: Path, number: int, res: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of trial `number`'s seeds in a stored result `res` (its `seeds` at its
    `steps`) that can be read back."""
    steps = res.get("steps")
    if not isinstance(steps, int):
        return []
    runs = [
        read_json(verify_path(study_dir, number, int(seed), steps))
        for seed in res.get("seeds") or []
        if isinstance(seed, int)
    ]
    return [r for r in runs if r is not None]
