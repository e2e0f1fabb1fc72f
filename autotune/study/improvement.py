"""The improvement over the baseline: the pick against the baseline at the length the study
decided at (verified means when both were verified there, else their runs at that length), the
screen's best per objective against the baseline's screen, and the constraints a run breaks
(relative ones against the baseline's metrics at the same length).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import ran_whole
from autotune.study import attrs as ua
from autotune.study import one_run
from autotune.study import pick as pk
from autotune.study.objectives import constraint_names, constraints_of, reference, unmeasured
from autotune.study.paired_change import with_paired
from autotune.study.pick import rung_rows


def broken(
    space: sp.Space,
    metrics: Mapping[str, Any],
    ref: Mapping[str, Any] | None,
    *,
    objectives: bool = True,
) -> list[str]:
    """The space constraints a completed run breaks, with its value (the relative ones
    against `ref`, the baseline's metrics at the same length); with `objectives`, first the
    objectives it has no finite value of (told a stand-in: `objectives.constraints_of`)."""
    names = constraint_names(space)[1:]
    values = constraints_of(space, Outcome.COMPLETE, metrics, ref)[1:]
    out = []
    if objectives:
        out += [f"{m} (no finite value)" for m in unmeasured(space, metrics)]
    for c, name, v in zip(space.constraints, names, values, strict=True):
        if v > 0:
            got = metrics.get(c.metric)
            out.append(f"{name} (got {got:.3g})" if got is not None else f"{name} (no value)")
    return out


def best_and_improvement(
    study: Any, space: sp.Space, feasible: list[tuple[int, list[float]]], baseline: Any
) -> tuple[dict[str, float], dict[str, Any]]:
    """Per objective: the best feasible value, and its change against the baseline's, one
    screen run each, with the baseline's noise at the screen (`one_run`: its yardstick's
    seeds)."""
    best: dict[str, float] = {}
    out: dict[str, Any] = {}
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    spread = one_run.yardstick_values(study.user_attrs.get(ua.SCREEN_YARDSTICK))
    for i, o in enumerate(space.objectives):
        vals = [v[i] for _, v in feasible]
        if not vals:
            continue
        b = min(vals) if o.direction == "minimize" else max(vals)
        best[o.metric] = b
        theirs = ua.metrics(baseline) if baseline else {}
        row = improvement(baseline, theirs.get(o.metric), b)
        who = next(n for n, v in feasible if v[i] == b)
        mine = ua.metrics(trials[who])
        out[o.metric] = one_run.with_noise(row, mine, theirs, spread.get(o.metric), o.metric)
    return best, out


def improvement(baseline: Any, base: float | None, best: float) -> dict[str, Any]:
    """best vs the baseline's value: a percentage only against a baseline that completed
    within every constraint; a diverged baseline is said so, with its step and cause.
    `baseline`: the baseline trial (the screen), or its state at a rung (`baseline_at`)."""
    out: dict[str, Any] = {"baseline": base, "best": best, "change_pct": None}
    if baseline is None:
        return out
    state = _baseline_at_screen(baseline) if hasattr(baseline, "user_attrs") else baseline
    whole = ran_whole(state)
    if state.get("outcome") == Outcome.DIVERGED:
        # Labelled diverged: a yardstick still when it ran its whole length (its final loss is
        # real), else no value to compare with.
        out["baseline_diverged"] = {
            "step": state.get("diverged_at_step"),
            "cause": state.get("cause"),
            "ran_whole": whole,
        }
        if not whole:
            out["baseline"] = None
        elif base is not None and base != 0 and math.isfinite(base):
            out["change_pct"] = 100.0 * (best - base) / abs(base)
    elif not state.get("feasible"):
        out["baseline_infeasible"] = True
    elif base is not None and base != 0 and math.isfinite(base):
        out["change_pct"] = 100.0 * (best - base) / abs(base)
    return out


def _baseline_at_screen(t: Any) -> dict[str, Any]:
    a = t.user_attrs
    return {
        "outcome": a.get(ua.OUTCOME),
        "cause": a.get(ua.CAUSE),
        "diverged_at_step": a.get(ua.DIVERGED_AT_STEP),
        "metrics": a.get(ua.METRICS) or {},
        "feasible": bool(a.get(ua.FEASIBLE)),
        "steps_run": a.get(ua.STEPS_RUN),
        "steps_planned": a.get(ua.STEPS_PLANNED),
    }


def baseline_at(study: Any, space: sp.Space, baseline: Any, steps: int) -> dict[str, Any] | None:
    """The baseline's run at `steps`: its screen, or its record at that rung (None: the
    baseline did not run there, or there is no baseline)."""
    if baseline is None:
        return None
    if steps == space.probe.steps:
        return _baseline_at_screen(baseline)
    row = rung_rows(study, steps).get(baseline.number)
    return dict(row) if row else None


def improvement_at(
    study: Any,
    space: sp.Space,
    baseline: Any,
    state: Mapping[str, Any] | None,
    pick: Mapping[str, Any] | None,
    steps: int,
) -> dict[str, Any]:
    """Per objective, the pick's value against the baseline's at the decided length `steps`:
    both verified means when both were verified there, else their runs at that length. Of
    verified means, the percentage is over the seeds both have a value on, timed together
    (`paired_change`), as the paired verdict compares them."""
    number = (pick or {}).get("number")
    if state is None or number is None:
        return {}
    ver = pk.verified_results(study)
    both = [ver.get(number) or {}, ver.get(baseline.number) or {}]
    if all(v.get("steps") == steps for v in both):
        source = "verified"
        mine, theirs = (_means(v) for v in both)
    else:
        source = "screen" if steps == space.probe.steps else "rung"
        if source == "screen":
            t = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
            mine = ua.metrics(t)
        else:
            mine = dict((pk.rung_rows(study, steps).get(number) or {}).get("metrics") or {})
        theirs = dict(state["metrics"] or {})
    own = dict(state.get("metrics") or {})
    breaks = broken(space, own, reference(state.get("outcome"), own, ran_whole(state)))
    spread = _baseline_spread(study, space, state, both[1], steps)
    out = {}
    for o in space.objectives:
        v = mine.get(o.metric)
        if v is None:
            continue
        row = improvement(state, theirs.get(o.metric), float(v))
        if source == "verified":  # each mean is over its own seeds: the percentage, paired
            row = with_paired(row, both[0], both[1], o.metric)
            row.update(_diverged_seeds(both[1]) if row.get("baseline") is None else {})
        else:  # one run each: within the baseline's noise, or one run against one run
            row = one_run.with_noise(row, mine, theirs, spread.get(o.metric), o.metric)
        if row.get("baseline_infeasible"):
            row["baseline_broken"] = breaks
        out[o.metric] = {**row, "steps": steps, "trial": number, "source": source}
    return out


def _baseline_spread(
    study: Any,
    space: sp.Space,
    state: Mapping[str, Any],
    verified: Mapping[str, Any],
    steps: int,
) -> dict[str, list[tuple[Any, float]]]:
    """The baseline's values by seed at `steps` (`one_run`): its run there and its
    verification there; at the screen without one, its yardstick's seeds."""
    there = verified if verified.get("steps") == steps else None
    if there is None and steps == space.probe.steps:
        kept = one_run.yardstick_values(study.user_attrs.get(ua.SCREEN_YARDSTICK))
        if kept:
            return kept
    own = state.get("metrics") if state.get("outcome") == Outcome.COMPLETE else None
    return one_run.values_by_metric(own, space.probe.seed, there)


def _means(verified: Mapping[str, Any]) -> dict[str, Any]:
    return {m: (v or {}).get("mean") for m, v in (verified.get("metrics") or {}).items()}


def _diverged_seeds(verified: Mapping[str, Any]) -> dict[str, Any]:
    """`baseline_diverged_seeds` {seeds, n}: the verification seeds the baseline diverged on,
    when it has no verified value (its mean is over the seeds that did not diverge), so the
    line says why there is no percentage; {} when it diverged on none."""
    runs = verified.get("runs") or []
    seeds = [r.get("seed") for r in runs if r.get("outcome") == Outcome.DIVERGED]
    return {"baseline_diverged_seeds": {"seeds": seeds, "n": len(runs)}} if seeds else {}
