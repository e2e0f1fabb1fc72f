"""The screen: Optuna asked for each trial whenever a Ray worker is free, the trial run there
(`workers.run_feed`: one probe process on a Ray worker, possibly on another node), and its
result recorded as it comes back (`Driver`).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe import applied
from autotune.probe.outcome import Outcome
from autotune.recipe.inactive import active_knobs
from autotune.study import attrs as ua
from autotune.study import signals
from autotune.study.failures import (
    BaselineFailed,
    baseline_stop,
    first_report_rule,
    first_report_s,
)
from autotune.study.objectives import stand_ins, suggest, trial_setup
from autotune.study.options import StudyOptions
from autotune.study.progress import Progress
from autotune.study.records import (
    baseline_trial,
    complete_outcome,
    count_finished,
    observed_metrics,
    read_outcome,
    screen_feasible,
    screen_reference,
    tell,
    write_outcome,
)
from autotune.study.rungs import pending as rungs_pending
from autotune.study.session import plan_resources
from autotune.study.states import screen_probe
from autotune.study.timeline import mark
from autotune.study.workers import ProbeJob, run_feed
from autotune.study.writer import MlflowWriter


class Driver:
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
    ):
        self.opts, self.space, self.study = opts, opts.space, study
        self.searched, self.planned, self.rerun = searched, planned, deque(rerun)
        self.tracking, self.progress, self.study_dir = tracking, progress, study_dir
        # a screen probe keeps its state only while a rung phase is still to run on it
        self.rungs_ahead = rungs_pending(study, opts.space)
        self.suggested = 0
        self.lock = threading.Lock()
        self.baseline_failure: dict[str, Any] | None = None  # its record: the screen stops
        self.baseline_first_s = _first_report_s(study, study_dir)
        self.unapplied_said = False  # `_say_unapplied`: once a session

    def next_config(self) -> ProbeJob | None:
        """The next trial to run (a stale one first), asked of Optuna; None when the budget is
        handed out or the baseline failed."""
        import optuna

        with self.lock:
            if self.suggested >= self.planned or self.baseline_failure is not None:
                return None
            self.suggested += 1
            if self.rerun:
                frozen = self.rerun.popleft()
                trial = optuna.trial.Trial(self.study, frozen._trial_id)
                params = dict(frozen.params)
                baseline = ua.is_baseline(frozen)
            else:
                trial = self.study.ask()
                baseline = ua.is_baseline(trial)
                params = {} if baseline else suggest(trial, self.space, self.searched)
            knobs, env = trial_setup(self.space, params, baseline)
            # A knob its policy or schedule leaves unread runs and is recorded at its default,
            # not at the space's midpoint or a sampled value that would read as chosen.
            knobs = active_knobs(knobs)
            trial.set_user_attr(ua.KNOBS, knobs)
            trial.set_user_attr(ua.ENV, env)
            probe = screen_probe(
                self.space,
                self.study_dir,
                trial.number,
                knobs,
                env,
                rungs_above=self.rungs_ahead,
                baseline=baseline,
            )
            if not baseline and probe.script is not None:  # its first report: see failures
                limit = first_report_s(probe.first_report_s, self.baseline_first_s)
                rule = first_report_rule(probe.first_report_s, self.baseline_first_s)
                probe = dataclasses.replace(probe, first_report_s=limit, first_report_rule=rule)
            self.progress.started(trial.number)
            mark(f"trial {trial.number} asked")
            # its time limit and threads are the job runner's own (`run_feed`)
            return ProbeJob(trial.number, probe, env, label=f"trial {trial.number}")

    def finish(self, number: int, result: dict[str, Any]) -> None:
        """Record one finished trial: file, Optuna tell, MLflow — in that order."""
        with self.lock:
            frozen = self.study._storage.get_trial(
                self.study._storage.get_trial_id_from_study_id_trial_number(
                    self.study._study_id, number
                )
            )
            # Judged against the baseline's screen when trial 0 has finished (with one trial at a
            # time it always has); else its relative constraints are vacuous for Optuna.
            ref = screen_reference(self.study)
            fill = stand_ins(self.space, observed_metrics(self.study))
            outcome = complete_outcome(self.space, frozen, result, ref, fill)
            write_outcome(self.study_dir, outcome)
            tell(self.study, frozen, outcome)
            self.tracking.log(outcome)
            self.progress.finished(outcome)
            self._say_unapplied(outcome)
            if outcome["baseline"] and outcome["outcome"] == Outcome.FAILED:
                self.baseline_failure = outcome
            elif outcome["baseline"]:
                self.baseline_first_s = (outcome.get("summary") or {}).get("first_report_s")

    def _say_unapplied(self, outcome: dict[str, Any]) -> None:
        """Once, at the first trial whose script ran and said what applied its knobs: the
        searched knobs it never applied (`probe.applied`), on stderr even under --quiet: the
        study goes on searching them, and would report values for them that no trial ran."""
        ran = (outcome.get("summary") or {}).get("script_applied")
        if self.unapplied_said or ran is None or outcome["outcome"] == Outcome.FAILED:
            return
        self.unapplied_said = True
        missing = applied.unapplied(ran, self.space.searched())
        if missing:
            print(f"warning: {applied.text(missing)}", file=sys.stderr, flush=True)


def _first_report_s(study: Any, study_dir: Path) -> float | None:
    """The finished baseline's seconds from its start to its first report (a script's; None
    when it has not finished or is no script)."""
    base = baseline_trial(study)
    if base is None or not base.state.is_finished():
        return None
    record = read_outcome(study_dir, base.number) or {}
    value = (record.get("summary") or {}).get("first_report_s")
    return float(value) if isinstance(value, (int, float)) else None


def run_trials(
    opts: StudyOptions,
    study: Any,
    searched: dict[str, sp.Domain],
    planned: int,
    rerun: list[Any],
    logger: MlflowWriter,
    study_dir: Path,
    finished: int,
    ray: Any,
) -> bool:
    """Run `planned` trials as Ray tasks (`workers.run_feed`): whenever a worker is free Optuna
    is asked for the next (`Driver.next_config`), and each trial is recorded as it finishes
    (`Driver.finish`). Returns True when interrupted."""
    space = opts.space
    if signals.stopping():  # a signal between the baseline and the others (`clip_norm: auto`)
        return _said_interrupted(finished, space.budget.trials)
    import optuna

    conc, resources, threads = plan_resources(space, ray.cluster_resources())
    conc = min(conc, planned)
    progress = Progress(space, space.budget.trials, finished, conc, opts.quiet)
    feasible = screen_feasible(study)  # a resumed study's best so far counts its earlier trials
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if feasible(t):
            progress.consider(ua.metrics(t))
    progress.say(
        f"  {conc} trial(s) at a time, each with {resources}"
        + (f", {threads} CPU thread(s)" if threads else "")
    )
    driver = Driver(opts, study, searched, planned, rerun, logger, progress, study_dir)

    def done(job: ProbeJob, record: dict[str, Any], _elapsed: float) -> None:
        mark(f"trial {job.key} back")
        # a worker that died returns no record of its own: the trial's fields, empty
        driver.finish(job.key, {"log_tail": "", "fingerprint": None, **record, "number": job.key})
        mark(f"trial {job.key} recorded")

    def interrupted(_s: float) -> str:  # said by `run_feed`, even under --quiet
        return _interrupted(count_finished(study), space.budget.trials)

    def baseline_failed() -> bool:  # every trial stops
        return driver.baseline_failure is not None

    timeout = space.budget.trial_timeout_s
    with progress:
        ran = run_feed(
            space, ray, driver.next_config, timeout, done, interrupted, stop=baseline_failed
        )
    if driver.baseline_failure is not None:
        raise BaselineFailed(baseline_stop(driver.baseline_failure, study_dir, space.name))
    if not ran:
        return True
    finished_now = count_finished(study)
    if finished_now < finished + planned:  # the budget, or its first part
        return _said_interrupted(finished_now, space.budget.trials)
    return False


def _said_interrupted(done: int, trials: int) -> bool:
    """What an interrupted screen says (on stderr); True."""
    print(_interrupted(done, trials), file=sys.stderr)
    return True


def _interrupted(done: int, trials: int) -> str:
    return (
        f"interrupted: {done} of {trials} trials done; run the same command again (or add "
        "--resume) to continue"
    )
