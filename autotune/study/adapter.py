"""Ray Tune behind Optuna: the searcher that asks Optuna and hands the results to the driver,
and the Tune run of a session's trials; each trial is the worker side's `trainable` (one probe
process on a Ray worker, possibly on another node: `autotune.study.workers`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import threading
import time
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
from autotune.study.folder import tune_dir
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
from autotune.study.workers import died_in_tune, trainable, trial_process_env
from autotune.study.writer import MlflowWriter


def searcher_class() -> type:
    from ray.tune.search import Searcher

    class OptunaAskTell(Searcher):
        """Optuna asks; Ray Tune runs; the driver tells. Stale trials are run again first."""

        def __init__(self, driver: Driver):
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
            mark(f"trial {config['number']} asked")
            return config

        def on_trial_complete(
            self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
        ) -> None:
            number = self.live.pop(trial_id, None)
            if number is None:
                return
            mark(f"trial {number} back")
            payload = (result or {}).get("autotune_payload")
            if payload is not None:
                self.driver.finish(number, json.loads(payload))
            elif error:
                self.driver.finish(number, died_in_tune(number))
            else:
                self.driver.interrupted(number)
            mark(f"trial {number} recorded")

    return OptunaAskTell


def stopper_class() -> type:
    from ray.tune.stopper import Stopper

    class StopOnBaselineFailure(Stopper):
        """Stops every trial of the run once the baseline failed (`Driver.baseline_failure`)."""

        def __init__(self, driver: Driver):
            self.driver: Driver | None = driver

        # Tune pickles its stopper with the experiment's state: the driver stays here.
        def __getstate__(self) -> dict[str, Any]:
            return {}

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.driver = None

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return False

        def stop_all(self) -> bool:
            return self.driver is not None and self.driver.baseline_failure is not None

    return StopOnBaselineFailure


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
        threads: int | None,
    ):
        self.opts, self.space, self.study = opts, opts.space, study
        self.searched, self.planned, self.rerun = searched, planned, deque(rerun)
        self.tracking, self.progress, self.study_dir = tracking, progress, study_dir
        self.threads = threads
        # a screen probe keeps its state only while a rung phase is still to run on it
        self.rungs_ahead = rungs_pending(study, opts.space)
        self.suggested = 0
        self.lock = threading.Lock()
        self.baseline_failure: dict[str, Any] | None = None  # its record: the screen stops
        self.baseline_first_s = _first_report_s(study, study_dir)
        self.unapplied_said = False  # `_say_unapplied`: once a session

    def next_config(self) -> dict[str, Any] | None:
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
            return {
                "number": trial.number,
                "probe": probe.to_dict(),
                "env": env,
                "timeout_s": self.space.budget.trial_timeout_s,
                "threads": self.threads,
                "process_env": trial_process_env(self.space),
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

    def interrupted(self, number: int) -> None:
        self.progress.interrupted(number)


def _first_report_s(study: Any, study_dir: Path) -> float | None:
    """The finished baseline's seconds from its start to its first report (a script's; None
    when it has not finished or is no script)."""
    base = baseline_trial(study)
    if base is None or not base.state.is_finished():
        return None
    record = read_outcome(study_dir, base.number) or {}
    value = (record.get("summary") or {}).get("first_report_s")
    return float(value) if isinstance(value, (int, float)) else None


def trial_name(trial: Any) -> str:
    number = (trial.config or {}).get("number")
    return f"trial-{number:04d}" if isinstance(number, int) else f"trial-{trial.trial_id}"


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
    """Run `planned` trials through Ray Tune. Returns True when interrupted."""
    space = opts.space
    if signals.stopping():  # a signal between the baseline and the others (`clip_norm: auto`)
        return _said_interrupted(finished, space.budget.trials)
    import optuna
    from ray import tune

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
    driver = Driver(opts, study, searched, planned, rerun, logger, progress, study_dir, threads)
    searcher = searcher_class()(driver)
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            num_samples=planned,
            max_concurrent_trials=conc,
            trial_name_creator=trial_name,
            trial_dirname_creator=trial_name,
            # One Ray worker serves trial after trial (each probe is still its own process).
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=f"{space.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(tune_dir(study_dir)),
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
            stop=stopper_class()(driver),
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
        ),
    )
    # Tune's result files are off (the driver keeps the records): silence its fetch warning.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    # Tune's own resume hint (Tuner.restore) is not how a study resumes: autotune says how; nor
    # is its "Trials did not complete" (ERROR) after a trial whose worker died, which autotune
    # says in one line of its own ("trial N failed (worker_died)").
    logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)
    # ... and that trial's "Trial task failed" with Ray's whole traceback.
    logging.getLogger("ray.tune.execution.tune_controller").addFilter(_TASK_FAILED)  # a set
    # Tune's SIGINT handler ends the run on a Ctrl-C (and on a SIGTERM: `signals`); the
    # driver's handlers are put back when it returns, for the phases after the screen.
    with progress, signals.around_tune():
        tuner.fit()
    if driver.baseline_failure is not None:
        raise BaselineFailed(baseline_stop(driver.baseline_failure, study_dir, space.name))
    done = count_finished(study)
    if done < finished + planned:  # the budget, or its first part; said even under --quiet
        return _said_interrupted(done, space.budget.trials)
    return False


class _TaskFailed(logging.Filter):
    """Drops Tune's "Trial task failed for trial ..." (and the traceback it carries): a trial
    whose worker died is said by autotune in one line; Tune's other errors still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Trial task failed")


_TASK_FAILED = _TaskFailed()


def _said_interrupted(done: int, trials: int) -> bool:
    """What an interrupted screen says (on stderr); True."""
    print(
        f"interrupted: {done} of {trials} trials done; run the same command again (or add "
        "--resume) to continue",
        file=sys.stderr,
    )
    return True
