"""The single MLflow writer of a study: a background thread that logs finished trials in order."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from autotune import tracking
from autotune.errors import one_line
from autotune.study import attrs as ua
from autotune.study.folder import read_rung_record
from autotune.study.records import read_outcome
from autotune.tracking.runs import log_rung
from autotune.tracking.verdicts import set_feasible


@dataclass(frozen=True)
class _Item:
    """One queued write: a finished trial's outcome, a promoted probe's record (a run nested
    under its trial's), or the screen's verdicts judged again ({trial number: feasible})."""

    kind: Literal["trial", "rung", "verdicts"]
    payload: Mapping[Any, Any]


class MlflowWriter:
    """The single MLflow writer; a tracking failure is reported, never kills the study.

    Trials are logged by one background thread, in the order they finished, so that logging
    a trial (~1 s for a 1000-step probe's series on SQLite) runs beside the next trial instead
    of before it. Nothing is lost if the driver dies with trials still queued: a trial's record
    is on disk (trials/NNNN.json) and in Optuna before it is queued, and `resume.reconcile`
    logs every finished trial without a complete MLflow run when the study resumes. Every other
    use of the client first waits for the queue to be empty (`drain`), so the client is never
    used by two threads at once.
    """

    def __init__(
        self, client: Any, experiment_id: str, parent: str, study_name: str, study_dir: Path
    ):
        self.client, self.experiment_id, self.parent = client, experiment_id, parent
        self.study_name, self.study_dir = study_name, study_dir
        self._queue: queue.Queue[_Item] = queue.Queue()
        self._writer: threading.Thread | None = None

    def logged(self) -> set[int]:
        self.drain()
        return tracking.logged_trials(self.client, self.experiment_id, self.parent)

    def logged_rungs(self) -> set[tuple[int, int]]:
        """(trial number, steps) of the rung probes logged under this study's trial runs."""
        self.drain()
        trial_runs = tracking.trial_run_ids(self.client, self.experiment_id, self.parent)
        return tracking.logged_rungs(self.client, self.experiment_id, trial_runs)

    def log(self, outcome: Mapping[str, Any]) -> None:
        """Queue a finished trial for logging (see the class)."""
        self._put(_Item("trial", dict(outcome)))

    def _put(self, item: _Item) -> None:
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._write, name="autotune-mlflow-writer", daemon=True
            )
            self._writer.start()
        self._queue.put(item)

    def drain(self) -> None:
        """Wait until every queued trial is logged (or failed to be, with a warning)."""
        if self._writer is not None:
            self._queue.join()

    def _write(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item.kind == "verdicts":
                    self._set_feasible_now(item.payload)
                elif item.kind == "rung":
                    self._log_rung_now(dict(item.payload))
                else:
                    self._log_now(item.payload)
            finally:
                self._queue.task_done()

    def log_rung(self, record: Mapping[str, Any]) -> None:
        """Queue a promoted probe's record: a run nested under its trial's run (after it)."""
        self._put(_Item("rung", dict(record)))

    def _log_rung_now(self, record: dict[str, Any]) -> None:
        try:
            trial_run = tracking.trial_run_ids(self.client, self.experiment_id, self.parent).get(
                int(record["number"])
            )
            if trial_run is None:
                raise LookupError(f"trial {record['number']} has no MLflow run yet")
            log_rung(self.client, self.experiment_id, trial_run, self.study_name, record)
        except Exception as e:  # the record is on disk: the next run logs it again
            print(
                f"warning: could not log trial {record.get('number')} at {record.get('steps')} "
                f"steps to MLflow ({type(e).__name__}: {one_line(e)}); it will be logged when the "
                "study resumes",
                file=sys.stderr,
            )

    def _log_now(self, outcome: Mapping[str, Any]) -> None:
        try:
            tracking.log_trial(
                self.client, self.experiment_id, self.parent, self.study_name, dict(outcome)
            )
        except Exception as e:  # the record is on disk: the next run logs it again
            print(
                f"warning: could not log trial {outcome.get('number')} to MLflow "
                f"({type(e).__name__}: {one_line(e)}); it will be logged when the study resumes",
                file=sys.stderr,
            )

    def verification(
        self,
        number: int,
        result: Mapping[str, Any],
        fp: Any,
        losses: Mapping[int, Sequence[Any]] | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str | None:
        """Trial `number`'s seeds as a verification run under the study's (`name`, else
        `verify-NNNN`; `tags` beside the study's and the trial's); its id, None when MLflow
        failed (said in one line)."""
        self.drain()
        try:
            return tracking.log_verification(
                self.client,
                self.experiment_id,
                name=name or f"verify-{number:04d}",
                result=result,
                tags={
                    tracking.TAG_STUDY: self.study_name,
                    tracking.TAG_VERIFIED_TRIAL: str(number),
                    **(tags or {}),
                },
                parent_run_id=self.parent,
                fingerprint=fp,
                losses=losses,
            )
        except Exception as e:
            print(
                f"warning: could not log the verification of trial {number} to MLflow "
                f"({type(e).__name__}: {one_line(e)})",
                file=sys.stderr,
            )
            return None

    def screen_verdicts(self, study: Any) -> None:
        """Bring the trial runs' `autotune.feasible` tags in line with the screen's verdicts
        judged again (`attrs.SCREEN_FEASIBLE`): queued after the trials still being logged, so
        the rungs start without waiting for them."""
        verdicts = _verdicts(study)
        if verdicts:  # queued: the last trial's series is still being logged (~1 s)
            self._put(_Item("verdicts", verdicts))

    def _set_feasible_now(self, verdicts: Mapping[int, bool]) -> None:
        try:
            set_feasible(self.client, self.experiment_id, self.parent, dict(verdicts))
        except Exception as e:
            print(
                "warning: could not update the trials' feasibility in MLflow "
                f"({type(e).__name__}: {one_line(e)}); it is updated when the study resumes",
                file=sys.stderr,
            )

    def summary(
        self,
        summary: dict[str, Any],
        study: Any,
        importances: Mapping[str, Mapping[str, float] | str] | None,
    ) -> None:
        """Log the study's summary, its trials' records, the parameter `importances` (the
        driver's, `summary.importances`) and the plots on the study's run: the Pareto and loss
        plots of the records of the length the front was decided at (`_decided_records`)."""
        self.drain()
        verdicts = _verdicts(study)
        outcomes = []
        for t in study.get_trials(deepcopy=False):
            o = read_outcome(self.study_dir, t.number)
            if o is not None:  # the plots show the verdict judged again, as `show` does
                outcomes.append({**o, "feasible": verdicts.get(t.number, o.get("feasible"))})
        try:
            decided = _decided_records(self.study_dir, summary, outcomes)
            tracking.log_study_summary(
                self.client, self.parent, summary, outcomes, importances, decided
            )
        except Exception as e:
            print(
                "warning: could not log the study summary to MLflow "
                f"({type(e).__name__}: {one_line(e)})",
                file=sys.stderr,
            )


def _verdicts(study: Any) -> dict[int, bool]:
    """{trial number: feasible} as judged again after the screen (empty while it screens)."""
    return {int(k): bool(v) for k, v in (study.user_attrs.get(ua.SCREEN_FEASIBLE) or {}).items()}


def _decided_records(
    study_dir: Path, summary: Mapping[str, Any], outcomes: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]] | None:
    """The trials' records at the rung the study decided at (the front's values, of that
    length), for the plots; None when it decided at the screen (the screen's records are)."""
    decided = summary.get("decided") or {}
    rung, steps = int(decided.get("rung") or 0), decided.get("steps")
    if not rung or steps is None:
        return None
    records = [read_rung_record(study_dir, int(o["number"]), rung, int(steps)) for o in outcomes]
    return [r for r in records if r is not None]
