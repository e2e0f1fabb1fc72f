"""A trial's record: completed from what its process returned, written to trials/NNNN.json,
told to Optuna. What a resumed study does with the records is `resume`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import one_line
from autotune.probe import applied
from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import ran_whole
from autotune.study import attrs as ua
from autotune.study import folder
from autotune.study.identical import loss_hash
from autotune.study.objectives import (
    constraint_names,
    constraints_of,
    reference,
    values_of,
)

#: The system attribute optuna-dashboard reads a trial's constraints from (a list).
DASHBOARD_CONSTRAINTS = "constraints"


def complete_outcome(
    space: sp.Space,
    frozen: Any,
    result: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
    stand_in: Sequence[float] | None = None,
) -> dict[str, Any]:
    """A trial's full record: what the process returned plus knobs, values and constraints.

    `stand_in`: the finite values told for a missing or non-finite objective metric
    (`objectives.stand_ins` over `observed_metrics(study)`).

    `baseline`: the baseline's screen metrics (`screen_reference`), for the constraints relative
    to it; the baseline itself is its own reference. Without one (trial 0 still running when
    this trial finished) a relative constraint is vacuous in what Optuna is told; the rung
    phase re-judges every screened trial against the baseline before promoting."""
    summary = result.get("summary")
    metrics = dict((summary or {}).get("metrics") or {})
    outcome = dict(result)
    outcome["number"] = frozen.number
    outcome["baseline"] = ua.is_baseline(frozen)
    if outcome["baseline"]:
        baseline = reference(outcome["outcome"], metrics, ran_whole(summary))
    # The probe's knobs have every default resolved (the workload's learning rate included).
    outcome["knobs"] = (summary or {}).get("knobs") or frozen.user_attrs.get(ua.KNOBS, {})
    outcome["layout"] = planned_layout(space, frozen.user_attrs.get(ua.KNOBS) or outcome["knobs"])
    outcome["env"] = frozen.user_attrs.get(ua.ENV, {})
    outcome["params"] = dict(frozen.params)
    outcome["source"] = frozen.user_attrs.get(ua.SOURCE)
    # One printable line (the traceback stays in log_tail): the console, `show` and export
    # print it, and what a trial raised or printed is not trusted to be readable.
    outcome["error"] = one_line(result.get("error") or "") or None
    if outcome["outcome"] == Outcome.FAILED:
        outcome["values"] = outcome["constraints"] = None
        outcome["feasible"] = False
    else:
        outcome["values"] = values_of(space, metrics, stand_in)
        # a stand-in value is no measurement: infeasible to Optuna (`constraints_of`)
        outcome["constraints"] = constraints_of(
            space, outcome["outcome"], metrics, baseline, objectives=True
        )
        outcome["constraint_names"] = constraint_names(space)
        outcome["feasible"] = all(c <= 0 for c in outcome["constraints"])
    return outcome


def planned_layout(space: sp.Space, knobs: Mapping[str, Any]) -> dict[str, int]:
    """How the trial's probe was set to run (its config, `space.probe_config`): world size,
    micro-batch, accumulation and effective batch. A trial that failed has no summary to say
    so, and its MLflow run shows them all the same (`tracking.trial_params`)."""
    cfg = sp.probe_config(space, knobs=knobs)
    accum = int(cfg.knobs.get("accum_steps") or 1)
    return {
        "world_size": cfg.world_size,
        "micro_batch": cfg.micro_batch,
        "accum_steps": accum,
        "effective_batch": cfg.micro_batch * accum * cfg.world_size,
    }


def observed_metrics(study: Any) -> list[dict[str, Any]]:
    """The metrics of the trials Optuna was told of (complete), as recorded: what a stand-in
    for a missing objective value is measured against (`objectives.stand_ins`)."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [ua.metrics(t) for t in done]


def baseline_trial(study: Any) -> Any | None:
    """The study's baseline trial (trial 0 as the driver creates it), in whatever state; None
    in a study without one."""
    return next(
        (t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(ua.BASELINE)),
        None,
    )


def screen_feasible(study: Any) -> Callable[[Any], bool]:
    """Whether a screened trial is feasible: as judged again after the screen, else (a study
    still screening, or from before this was kept) as Optuna was told."""
    again = {int(k): bool(v) for k, v in (study.user_attrs.get(ua.SCREEN_FEASIBLE) or {}).items()}

    def judged(t: Any) -> bool:
        return again.get(t.number, bool(t.user_attrs.get(ua.FEASIBLE))) and bool(t.values)

    return judged


def screen_reference(study: Any) -> dict[str, Any] | None:
    """The baseline trial's screen metrics when it completed (else None: no reference yet);
    once the screen is over and the baseline ran its other seeds there, the metrics of its
    relative constraints are the kind ends of their intervals (`yardstick`)."""
    import optuna

    t = baseline_trial(study)
    if t is None or t.state != optuna.trial.TrialState.COMPLETE:
        return None
    yardstick = study.user_attrs.get(ua.SCREEN_YARDSTICK)
    if yardstick is not None:  # the baseline's screen over the verification seeds too
        ref = ua.metrics(t)
        for metric in yardstick.get("metrics") or {}:  # None: no whole run there, vacuous
            ref[metric] = (yardstick.get("reference") or {}).get(metric)
        return ref
    a = t.user_attrs
    whole = ran_whole({"steps_run": a.get(ua.STEPS_RUN), "steps_planned": a.get(ua.STEPS_PLANNED)})
    return reference(a.get(ua.OUTCOME), a.get(ua.METRICS), whole)


def write_outcome(study_dir: Path, outcome: Mapping[str, Any]) -> Path:
    """trials/NNNN.json, written atomically: the record MLflow is (re)logged from."""
    path = folder.trial_path(study_dir, int(outcome["number"]))
    folder.write_json(path, outcome)
    return path


def read_outcome(study_dir: Path, number: int) -> dict[str, Any] | None:
    """Trial `number`'s record; None when it has none, or none that can be read as a trial's
    (not JSON, or its outcome, summary or fingerprint of the wrong kind: a file damaged or
    edited by hand; `folder.trial_path` tells the two apart: the file is there)."""
    record = folder.read_json(folder.trial_path(study_dir, number))
    return record if record is not None and _well_formed(record) else None


def _well_formed(record: Mapping[str, Any]) -> bool:
    """The parts of a trial's record that its readers take apart are of their kind."""
    summary = record.get("summary")
    metrics = summary.get("metrics") if isinstance(summary, dict) else None
    parts = (summary, record.get("fingerprint"), metrics)
    outcome = record.get("outcome")
    return (outcome is None or isinstance(outcome, str)) and all(
        v is None or isinstance(v, dict) for v in parts
    )


def tell(study: Any, frozen: Any, outcome: Mapping[str, Any]) -> None:
    """Store the trial's record as user attributes, then tell Optuna."""
    import optuna

    storage, tid = study._storage, frozen._trial_id
    summary = outcome.get("summary") or {}
    attrs = {
        ua.OUTCOME: outcome["outcome"],
        ua.CAUSE: outcome.get("cause"),
        ua.ERROR: one_line(outcome.get("error") or "") or None,
        ua.METRICS: summary.get("metrics") or {},
        ua.FEASIBLE: bool(outcome.get("feasible")),
        ua.FP_HASH: (outcome.get("fingerprint") or {}).get("hash"),
        ua.NODE: outcome.get("node"),
        ua.RAY_NODE: outcome.get("ray_node"),
        ua.WALL_S: outcome.get("wall_s"),
        ua.EFFECTIVE_BATCH: summary.get("effective_batch"),
        ua.DIVERGED_AT_STEP: summary.get("diverged_at_step"),
        ua.SAMPLES_SEEN: summary.get("samples_seen"),
        ua.STEPS_RUN: summary.get("steps_run"),
        ua.STEPS_PLANNED: summary.get("steps_planned"),
        ua.LOSS_HASH: loss_hash(summary),  # trials that trained alike (`identical`)
    }
    if outcome.get("knobs"):
        attrs[ua.KNOBS] = outcome["knobs"]
    if summary.get("script_applied") is not None:  # `probe.applied`: what `show` says unapplied
        attrs[ua.SCRIPT_APPLIED] = list(summary["script_applied"])
    if outcome.get("constraints") is not None:
        attrs[ua.CONSTRAINTS] = outcome["constraints"]
        attrs[ua.CONSTRAINT_NAMES] = outcome.get("constraint_names")  # for why_none
    for key, value in attrs.items():
        storage.set_trial_user_attr(tid, key, value)
    if outcome.get("constraints") is not None:
        # Constrained TPE and NSGA-II read these: a value > 0 makes the trial infeasible.
        trial = optuna.trial.Trial(study, tid)
        names = outcome.get("constraint_names") or [
            f"c{i}" for i in range(len(outcome["constraints"]))
        ]
        for name, value in zip(names, outcome["constraints"], strict=True):
            if f"constraints:{name}" not in frozen.system_attrs:
                trial.set_constraint(name, value)
        # optuna-dashboard (0.21) reads the list Optuna kept before named constraints: without
        # it the dashboard draws an infeasible trial as feasible. Optuna reads both; the values
        # are the same, so a trial's feasibility does not change.
        if DASHBOARD_CONSTRAINTS not in frozen.system_attrs:
            storage.set_trial_system_attr(
                tid, DASHBOARD_CONSTRAINTS, [float(c) for c in outcome["constraints"]]
            )
    try:
        if outcome["outcome"] == Outcome.FAILED:
            study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(frozen.number, values=outcome["values"])
    except (RuntimeError, KeyError):
        # GridSampler.after_trial calls Study.stop() once the grid is used up (a RuntimeError
        # outside study.optimize) and reads a "grid_id" that enqueued trials lack; Optuna
        # stores the trial's state before re-raising, so only a trial still RUNNING failed.
        if storage.get_trial(tid).state == optuna.trial.TrialState.RUNNING:
            raise


def not_applied(study: Any, space: sp.Space) -> dict[str, str]:
    """The searched knobs that no trial's script applied -> the recipe helper that applies each
    (`probe.applied`); empty for a built-in workload, or before a script's trial has finished."""
    seen = [
        t.user_attrs[ua.SCRIPT_APPLIED]
        for t in study.get_trials(deepcopy=False)
        if ua.SCRIPT_APPLIED in t.user_attrs and ua.outcome(t) != Outcome.FAILED
    ]
    if not seen:
        return {}
    return applied.unapplied({str(a) for marks in seen for a in marks}, space.searched())


def count_finished(study: Any) -> int:
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    return len(study.get_trials(deepcopy=False, states=done))


def planned_at_least_ran(study: Any, space: sp.Space) -> sp.Space:
    """`space` planning at least the trials the study finished: a study stored before the
    space of each resume was kept holds the space it started with, and a resume with a larger
    budget.trials ran more than that planned. A trial a killed driver left running, which a
    resume with a smaller budget did not run again, is no trial planned."""
    ran = count_finished(study)
    if ran <= space.budget.trials:
        return space
    budget = space.budget.model_copy(update={"trials": ran})
    return dataclasses.replace(space, budget=budget)
