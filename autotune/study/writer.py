"""The single MLflow writer of a study: a background thread that logs finished trials in order."""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from autotune import tracking
from autotune.errors import one_line
from autotune.study import attrs as ua
from autotune.study import signals
from autotune.study.folder import read_rung_record
from autotune.study.records import read_outcome
from autotune.tracking.connection import answers, redact
from autotune.tracking.runs import log_rung
from autotune.tracking.verdicts import set_feasible

_T = TypeVar("_T")

#: Once the store's server stopped answering, how long the writes skip it before it is asked again
#: (one TCP connect): a server that is gone costs the study nothing, one that is back is used.
DOWN_RECHECK_S = 30.0

#: How long a stopping driver (Ctrl-C, SIGTERM) waits for the writes queued before them: what is
#: left then is logged by --resume (every record is on disk), so a stop is never held for long.
STOP_GRACE_S = 10.0

#: How long `end_killed` waits for the write the writer's thread is in (one trial's, ~0.1-1 s on
#: SQLite) before it ends the study's runs: a run that write creates after them stays RUNNING.
END_WAIT_S = 3.0


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

    A store whose server stops answering (killed, hung) is said once; the writes after it are
    skipped and counted until it answers again, and the summary's write says how many were not
    logged (--resume logs them). A stopping driver waits for the queue at most `STOP_GRACE_S`.
    """

    def __init__(
        self, client: Any, experiment_id: str, parent: str, study_name: str, study_dir: Path
    ):
        self.client, self.experiment_id, self.parent = client, experiment_id, parent
        self.study_name, self.study_dir = study_name, study_dir
        self._queue: queue.Queue[_Item] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._uri = str(getattr(client, "tracking_uri", "") or "")
        self._lock = threading.Lock()
        self._down_since: float | None = None  # its server stopped answering (monotonic)
        self._warned = False
        self._skipped = 0  # records not logged this session because the store was down
        self._abandoned = False  # a stop gave up waiting: the client is the writer thread's
        self._writing = threading.Lock()  # held through each write (`_attempt`), either thread's

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
        """Wait until every queued trial is logged (or failed to be, with a warning). Once the
        study is stopping (`signals.stopping`) at most `STOP_GRACE_S` more: then the rest is
        left to --resume, and the writes that follow are skipped (`_skip`), since the writer's
        thread may still hold the client."""
        if self._writer is None:
            return
        done = self._queue.all_tasks_done
        give_up: float | None = None
        with done:
            while self._queue.unfinished_tasks:
                if give_up is None and signals.stopping():
                    give_up = time.monotonic() + STOP_GRACE_S
                if give_up is not None and time.monotonic() >= give_up:
                    self._abandoned = True
                    return
                done.wait(0.25)

    def _write(self) -> None:
        warmed = False
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
            if not warmed and self._queue.empty():
                warmed = True
                _warm_summary_imports()

    def log_rung(self, record: Mapping[str, Any]) -> None:
        """Queue a promoted probe's record: a run nested under its trial's run (after it)."""
        self._put(_Item("rung", dict(record)))

    def _log_rung_now(self, record: dict[str, Any]) -> None:
        def write() -> None:
            trial_run = tracking.trial_run_ids(self.client, self.experiment_id, self.parent).get(
                int(record["number"])
            )
            if trial_run is None:
                raise LookupError(f"trial {record['number']} has no MLflow run yet")
            log_rung(self.client, self.experiment_id, trial_run, self.study_name, record)

        # the record is on disk: the next run logs it again
        what = f"trial {record.get('number')} at {record.get('steps')} steps"
        self._attempt(what, write, "; it will be logged when the study resumes")

    def _log_now(self, outcome: Mapping[str, Any]) -> None:
        def write() -> None:
            tracking.log_trial(
                self.client, self.experiment_id, self.parent, self.study_name, dict(outcome)
            )

        # the record is on disk: the next run logs it again
        what = f"trial {outcome.get('number')}"
        self._attempt(what, write, "; it will be logged when the study resumes")

    def _attempt(self, what: str, write: Callable[[], _T], then: str = "") -> _T | None:
        """`write()`, or None when it failed or was skipped. A write refused while the store
        answers is one warning of its own (`then` says what becomes of it); a store whose
        server stopped answering is said once for the session (`_went_down`), and the writes
        after it are skipped and counted until it answers again (`_skip`): each would wait for
        its requests to time out, and the driver behind it. One write at a time, whichever
        thread's: `end_killed` waits for the one in progress, and none is made after it."""
        if self._skip():
            return None
        with self._writing:
            return self._attempt_held(what, write, then)

    def _attempt_held(self, what: str, write: Callable[[], _T], then: str) -> _T | None:
        with self._lock:
            if self._abandoned:  # the runs were ended meanwhile (`end_killed`)
                self._skipped += 1
                return None
        try:
            return write()
        except Exception as e:
            if _no_answer(e) or not answers(self._uri):
                self._went_down(what, e)
            else:
                print(
                    f"warning: could not log {what} to MLflow ({type(e).__name__}: "
                    f"{one_line(e)}){then}",
                    file=sys.stderr,
                )
            return None

    def _skip(self) -> bool:
        """Whether this write is skipped (and counted): a stop gave up on the writer's thread,
        or the store's server stopped answering and has not answered since (asked again at
        most every `DOWN_RECHECK_S`)."""
        with self._lock:
            if not self._abandoned and self._down_since is not None:
                recheck = time.monotonic() - self._down_since >= DOWN_RECHECK_S
                if recheck and answers(self._uri):
                    self._down_since = None
                elif recheck:
                    self._down_since = time.monotonic()
            if not self._abandoned and self._down_since is None:
                return False
            self._skipped += 1
            return True

    def _went_down(self, what: str, e: Exception) -> None:
        with self._lock:
            self._down_since = time.monotonic()
            self._skipped += 1
            if self._warned:
                return
            self._warned = True
        print(
            f"warning: could not log {what} to MLflow ({type(e).__name__}: {one_line(e)}): "
            f"its store at {redact(self._uri)} does not answer; the study goes on without it, "
            "and the same command again (or --resume) logs what was not logged",
            file=sys.stderr,
        )

    def not_logged(self) -> int:
        """How many records this session did not log because the store was down, or a stop
        gave up waiting (those still queued included); --resume logs them."""
        with self._lock:
            left = self._queue.unfinished_tasks if self._abandoned else 0
            return self._skipped + left

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

        def write() -> str:
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

        return self._attempt(f"the verification of trial {number}", write)

    def seed_runs(
        self,
        number: int,
        result: Mapping[str, Any],
        runs: Sequence[Mapping[str, Any]],
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str | None:
        """`verification` of trial `number`'s seeds from their records (`runs`): the first
        fingerprint among them and each seed's loss series."""
        fp = next((r.get("fingerprint") for r in runs if r.get("fingerprint")), None)
        losses = {int(r["seed"]): r["loss_series"] for r in runs if r.get("loss_series")}
        return self.verification(number, result, fp, losses, name=name, tags=tags)

    def screen_verdicts(self, study: Any) -> None:
        """Bring the trial runs' `autotune.feasible` tags in line with the screen's verdicts
        judged again (`attrs.SCREEN_FEASIBLE`): queued after the trials still being logged, so
        the rungs start without waiting for them."""
        verdicts = _verdicts(study)
        if verdicts:  # queued: the last trial's series is still being logged (~1 s)
            self._put(_Item("verdicts", verdicts))

    def _set_feasible_now(self, verdicts: Mapping[int, bool]) -> None:
        def write() -> None:
            set_feasible(self.client, self.experiment_id, self.parent, dict(verdicts))

        then = "; it is updated when the study resumes"
        self._attempt("the trials' feasibility", write, then)

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

        def write() -> bool:
            decided = _decided_records(self.study_dir, summary, outcomes)
            tracking.log_study_summary(
                self.client, self.parent, summary, outcomes, importances, decided
            )
            return True

        if not self._attempt("the study summary", write) and signals.stopping():
            self.end_killed()
        missed = self.not_logged()
        if missed:  # the one warning said why; this says how much, at the end of the session
            print(
                f"warning: {missed} record{'s' if missed != 1 else ''} of this session could not "
                "be logged to MLflow; the same command again (or --resume) logs "
                f"{'them' if missed != 1 else 'it'}",
                file=sys.stderr,
            )

    def end_killed(self) -> None:
        """A stopped study whose summary was not logged (a stop gave up on the writes queued
        before it, `drain`): its run, and the trial or rung run the writer's thread was cut
        short in, would stay RUNNING in MLflow for ever; they are ended KILLED, MLflow's status
        for an interrupted run (the next session sets the study's RUNNING again and logs a cut
        run afresh: `resume.reconcile`). So are they when the driver is ended at once because
        its Ray went away (`signals.on_abort`: a SIGTERM to its whole process group). The
        writer's thread may be in a write then (the watch of Ray calls this from a thread of its
        own): it writes nothing after this, and the write it is in is waited for at most
        `END_WAIT_S` (a trial's run it created after the search below would stay RUNNING; a
        write cut short before its run is complete is logged afresh by --resume). Skipped when
        the store does not answer (the writes were skipped for that)."""
        with self._lock:
            self._abandoned = True  # what is still queued is left to --resume (`not_logged`)
            if self._down_since is not None:
                return
        waited = self._writing.acquire(timeout=END_WAIT_S)
        try:
            tracking.end_running(self.client, self.experiment_id, self.study_name, "KILLED")
        except Exception as e:
            print(
                f"warning: could not end the study's MLflow runs ({type(e).__name__}: "
                f"{one_line(e)}); they show as running until the study resumes",
                file=sys.stderr,
            )
        finally:
            if waited:
                self._writing.release()


def _warm_summary_imports() -> None:
    """Import the summary's plotting (matplotlib: ~0.5 s of a 2-core machine's CPU) while the
    writer waits for the next trial, not after the last one, where it would add to the study's
    wall time. A failure here is left for the summary's own import to report."""
    with contextlib.suppress(Exception):
        import autotune.tracking.plots  # noqa: F401


def _no_answer(e: BaseException) -> bool:
    """An HTTP request that got no answer (refused, reset, or none in time: MLflow raises it
    with the error of `requests` in its chain), not an answer that refused the write: a server
    that takes connections but no longer answers is down too."""
    import requests

    seen: BaseException | None = e
    for _ in range(16):  # a chain is short; this bounds one that loops
        if seen is None:
            return False
        if isinstance(seen, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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
