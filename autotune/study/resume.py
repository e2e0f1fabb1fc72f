"""A study started again: trials left running by a driver that died are told from their record
or run again, and finished trials without an MLflow run are logged again.

Optuna's storage and trials/NNNN.json are the truth; MLflow is brought in line with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
