"""A study started again: trials left running by a driver that died are told from their record
or run again, and finished trials, rung probes and verifications without an MLflow run (the
store was down when they finished, or the driver died first) are logged again.

Optuna's storage and trials/NNNN.json are the truth; MLflow is brought in line with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
        steps = res.get("steps")
        runs = [
            read_json(verify_path(study_dir, number, int(seed), int(steps)))
            for seed in res.get("seeds") or []
            if isinstance(seed, int) and isinstance(steps, int)
        ]
        run_id = logger.seed_runs(number, res, [r for r in runs if r is not None])
        if run_id is not None:
            study.set_user_attr(key, {**res, "run_id": run_id})
