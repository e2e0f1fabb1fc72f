"""The rung phase: after the screen, the best configurations run on at longer lengths, rung by
rung toward `budget.target_steps` (see `autotune.study.rungs`).

Promoted probes are not Optuna trials: the sampler learns from the screen only. Each promoted
probe is a new process (same seed, same data order) at the rung's steps that continues the same
trial's probe at the rung below from its state (`autotune.study.states`: model, optimizer,
scaler, RNG, data position; on the CPU bit for bit the probe run from step 0), or starts over
where it cannot (a script, an OOM retry, a state on a node that is gone). Its record is
written to trials/NNNN-rK.json before it counts, stored slim in the study (`autotune.rung.N.STEPS`)
and logged to MLflow as a run nested under the trial's run. A driver stopped mid-rung resumes
without re-running the rung probes that finished.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import ran_whole
from autotune.study import attrs as ua
from autotune.study import rungs as rg
from autotune.study.beside import Beside, is_beside
from autotune.study.folder import read_rung_record, rung_path, write_json
from autotune.study.objectives import constraints_of, reference, values_of
from autotune.study.options import StudyOptions
from autotune.study.progress import fmt_s
from autotune.study.records import baseline_trial, screen_reference
from autotune.study.rungs import pending, plan, target_of
from autotune.study.states import remove_everywhere, rung_probe
from autotune.study.workers import ProbeJob, run_jobs
from autotune.study.writer import MlflowWriter

Job = tuple[int, dict[str, Any], dict[str, str]]  # trial number, knobs, env


def write_rung_record(study_dir: Path, record: Mapping[str, Any]) -> None:
    write_json(rung_path(study_dir, int(record["number"]), int(record["rung"])), record)


def judge(
    space: sp.Space, record: dict[str, Any], baseline: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Add values, constraints and feasibility to a rung probe's record; `baseline`: the
    baseline's metrics at the same rung (`rung_reference`), for the relative constraints."""
    metrics = dict((record.get("summary") or {}).get("metrics") or {})
    if record.get("outcome") == Outcome.FAILED:
        record.update(values=None, constraints=None, feasible=False)
    else:
        cons = constraints_of(space, record["outcome"], metrics, baseline, objectives=True)
        record.update(
            values=values_of(space, metrics),
            constraints=cons,
            feasible=all(c <= 0 for c in cons),
        )
    return record


def rung_reference(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The baseline's metrics among a rung's records, when it completed there."""
    base = next((r for r in records if r.get("baseline")), None)
    if base is None:
        return None
    summary = base.get("summary") or {}
    return reference(base.get("outcome"), summary.get("metrics"), ran_whole(summary))


def slim(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the study keeps of a rung record (no series)."""
    summary = record.get("summary") or {}
    return {
        "number": record["number"],
        "rung": record["rung"],
        "steps": record["steps"],
        "baseline": bool(record.get("baseline")),
        "outcome": record.get("outcome"),
        "cause": record.get("cause"),
        "diverged_at_step": summary.get("diverged_at_step"),
        "metrics": summary.get("metrics") or {},
        "samples_seen": summary.get("samples_seen"),
        "resumed_from_step": summary.get("resumed_from_step"),
        # how a continued run differed from the run from step 0 (its data drawn afresh)
        "continuation_note": (summary.get("continuation") or {}).get("note"),
        "samples_run": summary.get("samples_run"),
        "steps_run": summary.get("steps_run"),
        "steps_planned": summary.get("steps_planned"),
        "values": record.get("values"),
        "constraints": record.get("constraints"),
        "feasible": bool(record.get("feasible")),
        "filled": bool(record.get("filled")),  # promoted beyond the quota: rungs.fill_idle
    }


def probe_line(number: int, steps: int, record: Mapping[str, Any]) -> str:
    """The console's line for one rung probe: how it ended, whether it continued the rung
    below (and why not, or how it differed from the run from step 0), and how long it took
    (from its hand-over to Ray to its record, as a verification seed's line says)."""
    summary = record.get("summary") or {}
    took = record.get("wall_clock_s")
    resumed = summary.get("resumed_from_step")
    cont = summary.get("continuation") or {}
    why = cont.get("why")  # e.g. a script without the hook
    return (
        f"  trial {number} at {steps} steps: {record['outcome']}"
        + (f" ({record['cause']})" if record.get("cause") else "")
        + (f", continued from step {resumed}" if resumed else ", from step 0")
        + (f": {why}" if why and not resumed else "")
        + (f" ({cont['note']})" if resumed and cont.get("note") else "")
        + (f"  [{fmt_s(float(took))}]" if isinstance(took, (int, float)) else "")
    )


def as_result(row: Mapping[str, Any]) -> rg.RungResult:
    return rg.RungResult(
        number=int(row["number"]),
        steps=int(row["steps"]),
        baseline=bool(row.get("baseline")),
        outcome=str(row.get("outcome") or Outcome.FAILED.value),
        values=list(row["values"]) if row.get("values") else None,
        feasible=bool(row.get("feasible")),
        metrics=dict(row.get("metrics") or {}),
        violation=rg.violation(row.get("constraints")),
    )


def screen_results(study: Any, space: sp.Space) -> list[rg.RungResult]:
    """The screen (rung 0): every finished trial as Optuna recorded it, its feasibility judged
    again against the baseline's screen (a trial told before the baseline finished was told
    its relative constraints vacuously), so that promotion is exact."""
    import optuna

    ref = screen_reference(study)
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    out = []
    for t in study.get_trials(deepcopy=False, states=done):
        outcome = ua.outcome(t)
        metrics = ua.metrics(t)
        measured = outcome != Outcome.FAILED and bool(t.values)
        cons = constraints_of(space, outcome, metrics, ref, objectives=True) if measured else None
        out.append(
            rg.RungResult(
                number=t.number,
                steps=space.probe.steps,
                baseline=ua.is_baseline(t),
                outcome=outcome,
                values=list(t.values) if t.values else None,
                feasible=cons is not None and all(c <= 0 for c in cons),
                metrics=metrics,
                violation=rg.violation(cons),
            )
        )
    return out


def rejudge_screen(study: Any, space: sp.Space) -> None:
    """Store every screened trial's feasibility judged against the baseline's screen
    (`attrs.SCREEN_FEASIBLE`), once the screen is over."""
    verdicts = {str(r.number): r.feasible for r in screen_results(study, space)}
    if verdicts != (study.user_attrs.get(ua.SCREEN_FEASIBLE) or {}):
        study.set_user_attr(ua.SCREEN_FEASIBLE, verdicts)


def rung_phase(
    opts: StudyOptions, study: Any, logger: MlflowWriter, study_dir: Path, ray: Any
) -> bool:
    """Promote through the rungs until the growth rule stops or the target is reached; store
    the rungs and the decision in the study. Returns True when interrupted."""
    import optuna

    space = opts.space
    if not pending(study, space):
        remove_everywhere(ray, study_dir)  # e.g. a decided study given more trials
        return False
    say = (lambda _t: None) if opts.quiet else print
    steps_plan = plan(space)
    objectives = [o.model_dump() for o in space.objectives]
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    states = optuna.trial.TrialState
    prev = [r for r in screen_results(study, space) if trials[r.number].state != states.RUNNING]
    table: list[dict[str, Any]] = []
    decided: dict[str, Any] = {"steps": steps_plan[0], "rung": 0, "reason": "", "tau": None}
    say(f"rungs toward {target_of(space)} steps: {' -> '.join(map(str, steps_plan))}")
    for k, steps in enumerate(steps_plan[1:], 1):
        numbers = rg.promote(
            prev, objectives, eta=space.rungs.eta, min_promote=space.rungs.min_promote
        )
        near = rg.closest(prev, eta=space.rungs.eta, min_promote=space.rungs.min_promote)
        if near:
            numbers = sorted(set(numbers) | set(near))
            say(
                f"nothing is feasible at {steps_plan[k - 1]} steps, not even the defaults: the "
                f"{len(near)} closest to feasible go on (least constraint violation): trials "
                f"{', '.join(map(str, near))}"
            )
        if not [n for n in numbers if not trials[n].user_attrs.get(ua.BASELINE)]:
            # Nothing searched is feasible: the defaults are the answer, judged where the user
            # trains. The baseline alone goes on to the target (the yardstick at every length).
            alone = _baseline_to_target(opts, study, logger, study_dir, ray, numbers, k, say)
            if alone is None:
                return True
            decided, row = alone
            table += [row] if row else []
            break
        jobs = [job_of(trials[n]) for n in numbers]
        remove_everywhere(ray, study_dir, steps=[steps_plan[k - 1]], keep=numbers)  # not promoted
        say(f"rung {k}: {steps} steps for trials {', '.join(map(str, numbers))}")
        lengths = (steps_plan[k - 1], steps, k == len(steps_plan) - 1)  # from, to, top rung
        beside = Beside(space, study, study_dir, steps, say) if lengths[2] else None
        records = _run_rung(opts, study, logger, study_dir, ray, k, lengths, jobs, say, beside)
        if records is None:
            return True
        remove_everywhere(ray, study_dir, steps=[steps_plan[k - 1]])  # all continued from them
        cur = [as_result(slim(r)) for r in records]
        ag = rg.agreement(prev, cur, objectives, min_n=space.rungs.min_agreement_n)
        table.append({"rung": k, "steps": steps, "numbers": numbers, "agreement": ag})
        study.set_user_attr(ua.RUNGS, table)
        grow, why = rg.should_grow(
            [row["agreement"] for row in table],
            threshold=space.rungs.agreement,
            min_n=space.rungs.min_agreement_n,
            grow=space.rungs.grow,
            at_target=steps == steps_plan[-1],
            pairs=space.rungs.agree_rungs,
        )
        decided = {"steps": steps, "rung": k, "reason": why, "tau": ag.get("tau")}
        if not grow:
            break
        prev = cur
    study.set_user_attr(ua.RUNGS, table)
    study.set_user_attr(ua.DECIDED, {**decided, "target_steps": target_of(space)})
    remove_everywhere(ray, study_dir)
    say(f"decided at {decided['steps']} of {target_of(space)} steps ({decided['reason']})")
    return False


def job_of(trial: Any) -> Job:
    """A trial's rung job: its number, knobs and environment knobs as its screen recorded them."""
    knobs = ua.knobs(trial)
    return trial.number, knobs, ua.env(trial)


def _baseline_to_target(
    opts: StudyOptions,
    study: Any,
    logger: MlflowWriter,
    study_dir: Path,
    ray: Any,
    numbers: Sequence[int],
    k: int,
    say: Callable[[str], None],
) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """No configuration but the baseline is feasible at rung `k - 1`: the baseline (when it ran
    there) continues to the target as the top rung, and the study decides there (at rung
    `k - 1` when there is no baseline to carry on): the decision and the rung's row (None:
    interrupted)."""
    steps_plan = plan(opts.space)
    reason = "no feasible configuration to promote"
    below, target = steps_plan[k - 1], steps_plan[-1]
    base = baseline_trial(study)
    if base is None or base.number not in numbers:
        return {"steps": below, "rung": k - 1, "reason": reason, "tau": None}, None
    top = len(steps_plan) - 1
    job = job_of(base)
    say(f"rung {top}: {target} steps for the baseline alone (trial {base.number}): {reason}")
    lengths = (below, target, True)
    records = _run_rung(
        opts, study, logger, study_dir, ray, top, lengths, [job], say, below_rung=k - 1
    )
    if records is None:
        return None
    row = {"rung": top, "steps": target, "numbers": [base.number], "agreement": None}
    decided = {"steps": target, "rung": top, "reason": f"{reason}; the baseline alone", "tau": None}
    return decided, row


def _run_rung(
    opts: StudyOptions,
    study: Any,
    logger: MlflowWriter,
    study_dir: Path,
    ray: Any,
    rung: int,
    lengths: tuple[int, int, bool],
    jobs: Sequence[Job],
    say: Callable[[str], None],
    beside: Beside | None = None,
    below_rung: int | None = None,
) -> list[dict[str, Any]] | None:
    """Run the rung's probes not yet recorded, each continuing its trial's probe at the rung
    below (`lengths`: its steps, this rung's, whether this is the top rung, which keeps no
    state), and after them `beside`'s seeds (the top rung); every record of the rung (None:
    interrupted)."""
    space = opts.space
    below, steps, top = lengths
    records: dict[int, dict[str, Any]] = {}
    todo = []
    for number, knobs, env in jobs:
        saved = read_rung_record(study_dir, number, rung, steps)
        if saved is not None:
            records[number] = saved
            logger.log_rung(saved)  # idempotent: logs it if a driver died before it did
        else:
            todo.append((number, knobs, env))
    timeout = space.budget.trial_timeout_s * steps / space.probe.steps
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}

    def done(probe: ProbeJob, out: dict[str, Any], elapsed_s: float) -> None:
        if beside is not None and is_beside(probe):
            beside.done(probe, out, elapsed_s)
            return
        out["wall_clock_s"] = elapsed_s
        number = probe.key[0]
        record = record_rung(space, study, study_dir, trials[number], rung, steps, out)
        logger.log_rung(record)
        records[number] = record
        say(probe_line(number, steps, record))

    configs = [
        (
            job,
            rung_probe(
                *(space, study_dir, job[0], job[1], job[2]),
                steps=steps,
                below=below,
                top=top,
                baseline=ua.is_baseline(trials[job[0]]),
            ),
        )
        for job in todo
    ]
    under = rung - 1 if below_rung is None else below_rung  # the rung whose state it continues
    probes = [
        ProbeJob(job, cfg, job[2], node_below(study_dir, trials[job[0]], under, below))
        for job, cfg in configs
    ]
    probes += beside.jobs() if beside is not None else []
    if not run_jobs(space, ray, probes, timeout, done, interrupted):
        return None
    judge_rung(space, study, study_dir, list(records.values()))
    return [records[n] for n, _, _ in jobs if n in records]


def interrupted(elapsed_s: float) -> str:
    """What an interrupted rung (or yardstick) says (on stderr)."""
    return (
        f"interrupted during the rungs ({fmt_s(elapsed_s)}); run the same command again to "
        "finish them"
    )


def node_below(study_dir: Path, trial: Any, rung: int, steps: int) -> str | None:
    """The Ray node that ran `trial` at the rung below (where its state was written)."""
    if rung == 0:
        node = trial.user_attrs.get(ua.RAY_NODE)
    else:
        node = (read_rung_record(study_dir, trial.number, rung, steps) or {}).get("ray_node")
    return str(node) if node else None


def judge_rung(
    space: sp.Space, study: Any, study_dir: Path, records: Sequence[dict[str, Any]]
) -> None:
    """Judge every record of one rung against the baseline's record there (it may have
    finished after them), rewrite those it changed, store all in the study (also the ones an
    earlier driver recorded)."""
    ref = rung_reference(records)
    for rec in records:
        before = rec.get("constraints")
        judge(space, rec, ref)
        if rec.get("constraints") != before:
            write_rung_record(study_dir, rec)
        study.set_user_attr(ua.rung_key(rec["number"], rec["steps"]), slim(rec))


def record_rung(
    space: sp.Space,
    study: Any,
    study_dir: Path,
    trial: Any,
    rung: int,
    steps: int,
    out: Mapping[str, Any],
) -> dict[str, Any]:
    """A finished rung probe of `trial` (what its process returned): judged (against the
    baseline's record at this rung when it is written already: the baseline runs first),
    written to trials/NNNN-rK.json, stored slim in the study; the record."""
    summary = out.get("summary") or {}
    baseline = ua.is_baseline(trial)
    if baseline:
        ref = reference(out.get("outcome"), summary.get("metrics"), ran_whole(summary))
    else:
        base = baseline_trial(study)
        saved = read_rung_record(study_dir, base.number if base else 0, rung, steps)
        ref = rung_reference([saved] if saved else [])
    record = judge(
        space,
        {
            **out,
            "number": trial.number,
            "rung": rung,
            "steps": steps,
            "schedule_steps": target_of(space),  # the LR schedule's length (at probe.batch)
            "seed": space.probe.seed,
            "baseline": baseline,
            "knobs": summary.get("knobs") or trial.user_attrs.get(ua.KNOBS) or {},
            "env": trial.user_attrs.get(ua.ENV) or {},
            "params": dict(trial.params),
        },
        ref,
    )
    write_rung_record(study_dir, record)
    study.set_user_attr(ua.rung_key(trial.number, steps), slim(record))
    return record
