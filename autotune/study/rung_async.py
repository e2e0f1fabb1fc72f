"""The rung phase with asynchronous promotion (`rungs.promotion: async`): after the screen, a
worker that frees up takes the next promotion `autotune.study.promotion.Ladder` hands out (from
the top rung down, a trial in the top 1/eta of those finished at its rung), instead of waiting
for the rung's slowest probe. What a promoted probe is, runs, records and continues is the
synchronous phase's (`autotune.study.rung_phase`: `rung_probe`, `record_rung`, `judge_rung`):
only the order differs. The screen still ends before the first rung starts (`adapter`).
A worker the ladder has no promotion for, once the top rung has an entrant, runs one of the
baseline's verification seeds at the target instead of idling (`autotune.study.beside`); with
`rungs.fill_idle` one with neither takes a promotion beyond the quota (`Ladder.fill`).

A rung's row in `autotune.rungs` (its trials and its agreement with the rung below) is written
when the rung has ended: every promotion into it handed out and every probe of it finished; the
decision (`autotune.decided`, with `promotion: async`) when the ladder decides. A rung's states
are removed once the rung above has ended (those of the trials not promoted, once it has ended
itself), every state once the study has decided. A driver stopped mid-rung resumes: the records
it wrote are told to the ladder as promoted and finished (`adopt_saved`, whatever order they
had finished in), and a promotion whose record is written is not run again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.study import attrs as ua
from autotune.study import promotion as pm
from autotune.study.beside import Beside, is_beside
from autotune.study.options import StudyOptions
from autotune.study.records import baseline_trial
from autotune.study.rung_phase import (
    as_result,
    interrupted,
    judge_rung,
    node_below,
    probe_line,
    read_rung_record,
    record_rung,
    screen_results,
    slim,
)
from autotune.study.rungs import pending, plan, target_of
from autotune.study.states import remove_everywhere, rung_probe
from autotune.study.workers import ProbeJob, run_feed
from autotune.study.writer import MlflowWriter


def rung_async(
    opts: StudyOptions, study: Any, logger: MlflowWriter, study_dir: Path, ray: Any
) -> bool:
    """Promote asynchronously through the rungs until the ladder decides; store the rungs and
    the decision in the study. Returns True when interrupted."""
    import optuna

    space = opts.space
    if not pending(study, space):
        remove_everywhere(ray, study_dir)  # e.g. a decided study given more trials
        return False
    say: Callable[[str], None] = (lambda _t: None) if opts.quiet else print
    steps_plan = plan(space)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    running = optuna.trial.TrialState.RUNNING
    screen = [r for r in screen_results(study, space) if trials[r.number].state != running]
    base = baseline_trial(study)
    ladder = pm.Ladder(
        steps_plan,
        [r.number for r in screen],
        baseline=None if base is None else base.number,
        objectives=[o.model_dump() for o in space.objectives],
        settings=pm.settings_of(space.rungs),
        early=True,
    )
    for r in screen:
        ladder.done(0, r)
    say(
        f"rungs toward {target_of(space)} steps: {' -> '.join(map(str, steps_plan))} "
        "(asynchronous promotion)"
    )
    run = AsyncRun(opts, study, logger, study_dir, ray, ladder, trials, say)
    run.adopt_saved()
    run.after()
    if not run_feed(space, ray, run.feed, space.budget.trial_timeout_s, run.done, interrupted):
        return True
    run.after()
    decided = ladder.decided
    if decided is None:  # the ladder hands out work until it decides: a bug if not
        raise RuntimeError("the asynchronous rungs stopped without a decision")
    study.set_user_attr(ua.RUNGS, ladder.table)
    study.set_user_attr(
        ua.DECIDED, {**decided, "target_steps": target_of(space), "promotion": "async"}
    )
    remove_everywhere(ray, study_dir)
    say(f"decided at {decided['steps']} of {target_of(space)} steps ({decided['reason']})")
    return False


class AsyncRun:
    """One run of the asynchronous rungs: hands the ladder's promotions to `run_feed` as probe
    jobs (`feed`), records what finishes and tells the ladder (`done`), and keeps the study's
    rows and the states in step with the rungs that ended (`after`)."""

    def __init__(
        self,
        opts: StudyOptions,
        study: Any,
        logger: MlflowWriter,
        study_dir: Path,
        ray: Any,
        ladder: pm.Ladder,
        trials: dict[int, Any],
        say: Callable[[str], None],
    ) -> None:
        self.space, self.study, self.logger = opts.space, study, logger
        self.study_dir, self.ray, self.ladder, self.trials, self.say = (
            study_dir,
            ray,
            ladder,
            trials,
            say,
        )
        self.plan = plan(opts.space)
        self.records: dict[int, dict[int, dict[str, Any]]] = {}
        self.handled: set[int] = set()  # rungs whose end was acted on
        self.noted = 0
        self.filled: set[tuple[int, int]] = set()  # (trial, rung) promoted by `rungs.fill_idle`
        self.beside = Beside(opts.space, study, study_dir, self.plan[-1], say, ladder)

    def adopt_saved(self) -> None:
        """The rung records an earlier driver wrote (it stopped mid-rung), rung by rung: judged
        against the baseline's there, logged if they were not, told to the ladder as promoted
        and finished; the ladder then goes on from where that driver was."""
        screened = [n for n in self.ladder.rungs[0].results]
        for k in range(1, len(self.plan)):
            below = self.ladder.rungs[k - 1].results  # a record above a lost one is not taken
            saved = [read_rung_record(self.study_dir, n, k, self.plan[k]) for n in screened]
            at = {int(r["number"]): r for r in saved if r is not None and r["number"] in below}
            if not at:
                break
            self.records[k] = at
            judge_rung(self.space, self.study, self.study_dir, list(at.values()))
            for rec in at.values():
                self.logger.log_rung(rec)  # idempotent: logs it if a driver died before it did
                self.ladder.adopt(k, as_result(slim(rec)))
        self.ladder.settle()

    def feed(self) -> ProbeJob | None:
        """The next promotion to run (one recorded by an earlier driver is read back instead);
        with none now, a baseline verification seed beside the top rung (`beside`); None:
        neither now."""
        while True:
            nxt, filled = self.ladder.next(), False
            self.after()
            if nxt is None:
                got = self.beside.job()
                if got is not None or not self.space.rungs.fill_idle:
                    return got
                nxt, filled = self.ladder.fill(), True  # `rungs.fill_idle`
                if nxt is None:
                    return None
            number, rung = nxt
            saved = read_rung_record(self.study_dir, number, rung, self.plan[rung])
            if saved is None:
                return self.job(number, rung, filled)
            self.logger.log_rung(saved)  # idempotent: logs it if a driver died before it did
            self.record(saved)

    def job(self, number: int, rung: int, filled: bool = False) -> ProbeJob:
        """Trial `number`'s probe at `rung`, continuing its state at the rung below (`filled`:
        a promotion beyond the quota, for a worker that would idle)."""
        space, trial = self.space, self.trials[number]
        below, steps = self.plan[rung - 1], self.plan[rung]
        env = ua.env(trial)
        cfg = rung_probe(
            *(space, self.study_dir, number, ua.knobs(trial), env),
            steps=steps,
            below=below,
            top=rung == len(self.plan) - 1,
            baseline=ua.is_baseline(trial),
        )
        if filled:  # recorded with the probe's record, its run and the summary
            self.filled.add((number, rung))
        self.say(
            f"rung {rung}: trial {number} promoted to {steps} steps"
            + (" (a worker would idle: rungs.fill_idle)" if filled else "")
        )
        return ProbeJob(
            (number, rung),
            cfg,
            env,
            node_below(self.study_dir, trial, rung - 1, below),
            timeout_s=space.budget.trial_timeout_s * steps / space.probe.steps,
        )

    def done(self, job: ProbeJob, out: dict[str, Any], elapsed_s: float) -> None:
        """A rung probe finished: recorded (as the synchronous phase records it), announced,
        told to the ladder. A verification seed run beside the top rung: written for the
        verification phase."""
        if is_beside(job):
            self.beside.done(job, out, elapsed_s)
            return
        number, rung = job.key
        steps = self.plan[rung]
        out["wall_clock_s"] = elapsed_s
        if job.key in self.filled:
            out["filled"] = True  # a promotion beyond the quota (`rungs.fill_idle`)
        record = record_rung(
            self.space, self.study, self.study_dir, self.trials[number], rung, steps, out
        )
        self.logger.log_rung(record)
        self.say(probe_line(number, steps, record))
        self.record(record)
        self.after()

    def record(self, record: dict[str, Any]) -> None:
        """Tell the ladder a record; the baseline's judges its rung's others again (their
        relative constraints are against it) and the ladder is told them anew."""
        rung = int(record["rung"])
        at = self.records.setdefault(rung, {})
        at[int(record["number"])] = record
        if record.get("baseline"):
            judge_rung(self.space, self.study, self.study_dir, list(at.values()))
            for rec in at.values():
                self.ladder.done(rung, as_result(slim(rec)))
        else:
            self.ladder.done(rung, as_result(slim(record)))

    def after(self) -> None:
        """Act on the rungs that ended since: their records judged and stored, the rows
        written, the states no probe will continue removed; the ladder's notes said."""
        for note in self.ladder.notes[self.noted :]:
            self.say(note)
        self.noted = len(self.ladder.notes)
        for k, r in enumerate(self.ladder.rungs):
            if not r.ended or k in self.handled:
                continue
            self.handled.add(k)
            if k > 0:
                judge_rung(self.space, self.study, self.study_dir, list(self.records[k].values()))
                self.study.set_user_attr(ua.RUNGS, self.ladder.table)
                remove_everywhere(self.ray, self.study_dir, steps=[self.plan[k - 1]])
            if r.growth and k < len(self.plan) - 1:
                going_on = set(r.promoted) | set(r.todo)
                remove_everywhere(self.ray, self.study_dir, steps=[r.steps], keep=going_on)
