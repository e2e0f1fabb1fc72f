"""The baseline as the yardstick of the screen: its screen run over the verification seeds too.

Every screened trial runs one seed (the probe's), and so does the baseline; a relative
constraint judged against that one baseline run is decided by how lucky the baseline's seed
was (a good seed for the defaults rules out configurations that are as good on average). So
once the screen is over, and before anything is promoted, the baseline's screen probe runs
again at the verification seeds (`verify.seeds`; their files are the verification's, so a
study decided at the screen verifies the baseline from them), and each relative constraint is
taken against the end of the 95% interval of the baseline's mean over all its screen seeds
that is kindest to the trial (`<=`: its high end; `>=`: its low end). A trial is ruled out at
the screen only when it misses the bound the baseline's own seed noise allows.

With `verify.top_k: 0` (no verification) the baseline runs no other seed, and the screen is
judged against its one run, as the summary says (`screen_yardstick.seeds` has one seed).

In a study with rungs those seeds are runs of their own, counted in the verification's compute:
they are logged as a verification run too (`verify-0000-s{probe.steps}`, tag
`autotune.yardstick`), once (its id is kept as `screen_yardstick.run_id`). Without rungs they
are the baseline's verification, logged as such (`verify-0000`) by the verification phase.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import interval, ran_whole, seeds_for, summarize_seeds
from autotune.study import attrs as ua
from autotune.study.folder import verify_path
from autotune.study.options import StudyOptions
from autotune.study.records import baseline_trial
from autotune.study.rung_phase import interrupted
from autotune.study.rungs import target_of
from autotune.study.verification import save_seed, verified_metrics
from autotune.study.workers import ProbeJob, run_jobs
from autotune.study.writer import MlflowWriter
from autotune.tracking.runs import TAG_YARDSTICK


def wanted(space: sp.Space) -> bool:
    """A relative constraint to judge, and verification seeds to run."""
    return space.verify.top_k > 0 and any(c.relative_to for c in space.constraints)


def yardstick_phase(
    opts: StudyOptions, study: Any, study_dir: Path, ray: Any, logger: MlflowWriter | None = None
) -> bool:
    """Run the baseline's screen probe at the verification seeds it lacks; store the screen's
    reference (`attrs.SCREEN_YARDSTICK`) and log the seeds to MLflow (`_log_seeds`). Returns
    True when interrupted."""
    space = opts.space
    base = baseline_trial(study)
    if not wanted(space) or base is None or base.user_attrs.get(ua.OUTCOME) is None:
        return False
    steps = space.probe.steps
    seeds = seeds_for(space.probe.seed, space.verify.seeds)
    knobs = ua.knobs(base) or space.baseline_knobs()
    env = ua.env(base) or space.baseline_env()
    todo = [s for s in seeds if not verify_path(study_dir, base.number, s, steps).is_file()]
    if todo and not opts.quiet:
        print(f"the baseline's screen at seeds {todo} too: the yardstick of relative constraints")

    def done(job: ProbeJob, out: dict[str, Any], elapsed_s: float) -> None:
        out["wall_clock_s"] = elapsed_s
        out.update(seed=job.key, number=base.number, schedule_steps=target_of(space))
        save_seed(study_dir, base.number, job.key, out, steps)

    jobs = [
        ProbeJob(s, sp.probe_config(space, knobs=knobs, env=env, seed=s).for_baseline(), env)
        for s in todo
    ]
    if not run_jobs(space, ray, jobs, space.budget.trial_timeout_s, done, interrupted):
        return True
    ran = [
        json.loads(path.read_text())
        for path in (verify_path(study_dir, base.number, s, steps) for s in seeds)
        if path.is_file()
    ]
    yard = reference_over_seeds(space, [_base_run(base, space.probe.seed), *ran])
    yard["run_id"] = _log_seeds(space, study, logger, base.number, ran)
    study.set_user_attr(ua.SCREEN_YARDSTICK, yard)
    return False


def _log_seeds(
    space: sp.Space,
    study: Any,
    logger: MlflowWriter | None,
    number: int,
    runs: list[dict[str, Any]],
) -> str | None:
    """The yardstick's seeds as a verification run nested under the study's, named for its
    files (`verify-0000-s40`), in a study with rungs: its samples count in the verification's
    compute, and they were nowhere in MLflow. Without rungs they are the baseline's
    verification (`verify-0000`, logged by the verification phase), not logged twice. Logged
    once: a resumed study keeps the run's id, and logs it when MLflow failed before. The id,
    or None."""
    before = study.user_attrs.get(ua.SCREEN_YARDSTICK) or {}
    if isinstance(before, dict) and before.get("run_id"):
        return str(before["run_id"])
    steps = space.probe.steps
    if logger is None or not runs or target_of(space) == steps:
        return None
    runs = sorted(runs, key=lambda r: int(r.get("seed") or 0))
    res = {**summarize_seeds(runs, verified_metrics(space)), "steps": steps}
    res["schedule_steps"] = target_of(space)
    name = f"verify-{number:04d}-s{steps}"
    return logger.seed_runs(number, res, runs, name=name, tags={TAG_YARDSTICK: "true"})


def _base_run(t: Any, seed: int) -> dict[str, Any]:
    a = t.user_attrs
    return {
        "seed": seed,
        "outcome": a.get(ua.OUTCOME),
        "summary": {
            "metrics": a.get(ua.METRICS) or {},
            "steps_run": a.get(ua.STEPS_RUN),
            "steps_planned": a.get(ua.STEPS_PLANNED),
        },
    }


def reference_over_seeds(space: sp.Space, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The screen's reference from the baseline's screen runs: per metric of a relative
    constraint, the interval of its mean over the runs that ran their whole length (complete,
    or labelled diverged and run on), and the reference value, the end of that interval kindest
    to a trial (one run: its value; none: no reference, the constraint is vacuous); and
    `values`, per objective its value at each seed that completed (`_objective_values`)."""
    usable = [
        r
        for r in runs
        if r.get("outcome") == Outcome.COMPLETE
        or (r.get("outcome") == Outcome.DIVERGED and ran_whole(r.get("summary")))
    ]
    metrics: dict[str, Any] = {}
    ref: dict[str, float] = {}
    for c in space.constraints:
        if not c.relative_to or c.metric in metrics:
            continue
        iv = interval(
            [((r.get("summary") or {}).get("metrics") or {}).get(c.metric) for r in usable]
        )
        metrics[c.metric] = iv
        end = iv["high"] if c.op == "<=" else iv["low"]
        value = end if end is not None else iv["mean"]
        if value is not None:
            ref[c.metric] = float(value)
    return {
        "seeds": [r.get("seed") for r in runs],
        "runs": len(runs),
        "usable": len(usable),
        "metrics": metrics,
        "reference": ref,
        "values": _objective_values(space, runs),
    }


def _objective_values(space: sp.Space, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per objective, [seed, value] of each run that completed with a finite value: the
    baseline's seed-to-seed spread at the screen, which the summary's screen percentage is
    judged against (`one_run`)."""
    out: dict[str, list[list[Any]]] = {}
    for o in space.objectives:
        for r in runs:
            v = ((r.get("summary") or {}).get("metrics") or {}).get(o.metric)
            if r.get("outcome") != Outcome.COMPLETE or not isinstance(v, (int, float)):
                continue
            if math.isfinite(v):
                out.setdefault(o.metric, []).append([r.get("seed"), float(v)])
    return out


def format_line(yard: Mapping[str, Any] | None, relative: bool) -> str | None:
    """How the screen judged the relative constraints: over how many baseline seeds."""
    if not relative:
        return None
    if not yard:
        return "relative constraints at the screen: against the baseline's one screen run"
    refs = ", ".join(f"{m} {v:.4g}" for m, v in (yard.get("reference") or {}).items())
    return (
        f"relative constraints at the screen: against the baseline's screen over seeds "
        f"{yard.get('seeds')} ({yard.get('usable')} ran their whole length), at the kind end "
        f"of its 95% interval: {refs or 'no value (vacuous)'}"
    )
