"""A trial as Optuna sees it: the objectives' directions, a trial's values and constraints from
its metrics, the sampler (seeded per session), the knobs suggested from the searched domains,
and the knobs and environment of a trial.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import BROKE, Outcome
from autotune.recipe.inactive import inactive

#: How far past the worst finite value observed a stand-in lies: this share of the observed
#: span, or of the worst value's size when that is larger (1.0 when both are 0).
STAND_IN_MARGIN = 0.1


def directions(space: sp.Space) -> list[str]:
    return [o.direction for o in space.objectives]


def stand_ins(space: sp.Space, observed: Iterable[Mapping[str, Any]]) -> list[float]:
    """For each objective, the finite value Optuna is told for a trial whose metric is missing
    or non-finite (a probe that diverged or did not learn): the worst finite value of that
    metric among `observed` (the metrics of the trials told so far) moved past it by a margin
    of STAND_IN_MARGIN x the larger of the observed span and the worst value's size (1.0 when
    both are 0); with nothing finite observed yet, 0 moved by 1.0. It keeps the dashboard's
    axes on the measured trials (a sentinel like 1e12 flattened them onto the axis) and sorts
    the trial behind every measured one of its time; its constraints mark it infeasible
    (`constraints_of`)."""
    rows = list(observed)
    out = []
    for o in space.objectives:
        seen = [x for x in (_finite(m.get(o.metric)) for m in rows) if x is not None]
        worst = (max(seen) if o.direction == "minimize" else min(seen)) if seen else 0.0
        span = max(seen) - min(seen) if seen else 0.0
        margin = STAND_IN_MARGIN * max(span, abs(worst)) or 1.0
        out.append(worst + margin if o.direction == "minimize" else worst - margin)
    return out


def values_of(
    space: sp.Space, metrics: Mapping[str, Any], stand_in: Sequence[float] | None = None
) -> list[float]:
    """Objective values; a missing or non-finite metric becomes its objective's `stand_in`
    (`stand_ins`; without them, the stand-ins of a study with nothing observed)."""
    fill = list(stand_in) if stand_in is not None else stand_ins(space, [])
    out = []
    for i, o in enumerate(space.objectives):
        v = _finite(metrics.get(o.metric))
        out.append(fill[i] if v is None else v)
    return out


def unmeasured(space: sp.Space, metrics: Mapping[str, Any]) -> list[str]:
    """The objectives' metrics with no finite value in `metrics`: Optuna is told a stand-in for
    each (`values_of`), a number nothing measured."""
    return [o.metric for o in space.objectives if _finite(metrics.get(o.metric)) is None]


def constraints_of(
    space: sp.Space,
    outcome: str,
    metrics: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
    *,
    objectives: bool = False,
) -> list[float]:
    """Optuna constraint values (<= 0 is feasible): not diverged/oom, then each space constraint.

    `objectives`: where the run's objective values are told as `values_of` gives them (a trial
    told to Optuna, a rung's record), the first (`not_diverged`) is also broken by a run told a
    stand-in for an objective (`unmeasured`: it diverged, or did not learn, `noise_per_drop`
    NaN), whatever its other constraints say: its values are no measurement, so Optuna,
    optuna-dashboard, the front and the promotion count it infeasible, not at the stand-in's
    place. Without it (a verification seed: its objectives are summarized over the finite
    values, no stand-in is told) only the constraints count.

    `baseline`: the baseline's metrics measured at the same number of steps (and seed, where
    there is one), the reference of the constraints `relative_to: baseline`. Without it, or
    without a finite value of the metric there (the baseline diverged or failed), a relative
    constraint is vacuous: 0.0, feasible (`vacuous` says which are)."""
    stand_in = objectives and bool(unmeasured(space, metrics))
    out = [1.0 if outcome in BROKE or stand_in else 0.0]
    for c in space.constraints:
        v = metrics.get(c.metric)
        bound = _bound(c, baseline)
        if bound is None:
            out.append(0.0)
        elif v is None or not math.isfinite(float(v)):
            out.append(1.0)
        elif c.op == ">=":
            out.append(float(bound - v))
        else:
            out.append(float(v - bound))
    return out


def _bound(c: sp.Constraint, baseline: Mapping[str, Any] | None) -> float | None:
    """The constraint's bound: its value, or its factor x the baseline's (None: vacuous). The
    factor scales the baseline's size: `<= 1.05 x baseline` allows 5% of it worse, whatever the
    sign (a loss that is legitimately negative, -2.5, allows -2.375, not -2.625)."""
    if c.relative_to is None:
        return c.value
    ref = _finite((baseline or {}).get(c.metric))
    if ref is None:
        return None
    return c.value * ref if ref >= 0 else ref + (c.value - 1.0) * abs(ref)


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def vacuous(space: sp.Space, baseline: Mapping[str, Any] | None) -> list[str]:
    """The labels of the relative constraints that `baseline` leaves vacuous (no reference)."""
    return [c.label for c in space.constraints if c.relative_to and _bound(c, baseline) is None]


def reference(
    outcome: Any, metrics: Mapping[str, Any] | None, whole: bool = False
) -> dict[str, Any] | None:
    """The baseline's metrics as the reference of relative constraints: from a run that
    completed, or from one labelled diverged that still ran its whole length (`whole`, see
    `ran_whole`: the baseline runs on unless its loss is non-finite, so a spike it recovered
    from leaves a real final loss to compare with). A baseline stopped early or failed is no
    reference: its relative constraints are vacuous (`vacuous` says which)."""
    if outcome == Outcome.COMPLETE or (outcome == Outcome.DIVERGED and whole):
        return dict(metrics or {})
    return None


def feasible(
    space: sp.Space,
    outcome: Any,
    metrics: Mapping[str, Any],
    baseline: Mapping[str, Any] | None = None,
    *,
    objectives: bool = False,
) -> bool:
    """Measured (not failed) and within every constraint of `constraints_of` (which counts a
    divergence or an out-of-memory as broken, and with `objectives` a stand-in objective)."""
    if outcome == Outcome.FAILED or outcome is None:
        return False
    cons = constraints_of(space, str(outcome), metrics, baseline, objectives=objectives)
    return all(c <= 0 for c in cons)


def constraint_names(space: sp.Space) -> list[str]:
    """Names of the Optuna constraints, in the order of `constraints_of`."""
    return ["not_diverged", *(c.label for c in space.constraints)]


def sampler_seed(seed: int, trials_so_far: int) -> int:
    """The sampler's seed for a driver that finds `trials_so_far` trials in the storage.

    Optuna's samplers draw from a random state seeded once, so a resumed study seeded as at its
    start would draw the same configurations again (TPE's and NSGA-II's random start-up phase
    included). A fresh study keeps the space's seed; a resumed one gets a seed derived from it
    and from how far the study got: still reproducible, never a replay."""
    if trials_so_far == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed % 2**32, trials_so_far]).generate_state(1)[0])


def conditional(searched: Mapping[str, sp.Domain]) -> bool:
    """Whether the search space is conditional: clip_policy searched with a child of it, or the
    schedule with `min_lr_ratio` (asked only under a decaying schedule: `suggest`)."""
    return ("clip_policy" in searched and any(n in sp.CLIP_CHILDREN for n in searched)) or (
        "schedule" in searched and "min_lr_ratio" in searched
    )


def make_sampler(space: sp.Space, searched: Mapping[str, sp.Domain], trials_so_far: int = 0) -> Any:
    import optuna

    s = space.sampler
    seed = sampler_seed(s.seed, trials_so_far)
    if s.name == "tpe":
        if conditional(searched):  # each parent's children modelled as their own group
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # `group` is experimental in Optuna
                return optuna.samplers.TPESampler(
                    seed=seed, n_startup_trials=s.n_startup_trials, multivariate=True, group=True
                )
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=s.n_startup_trials,
            multivariate=True,
        )
    if s.name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.GridSampler(dict(grid_values(space, searched) or {}), seed=seed)


def grid_values(space: sp.Space, searched: Mapping[str, sp.Domain]) -> dict[str, list[Any]] | None:
    """The grid sampler's values of each searched knob; None for another sampler."""
    if space.sampler.name != "grid":
        return None
    points = space.sampler.grid_points
    return {name: d.grid(space.knob_kind(name), points) for name, d in searched.items()}


def suggest(trial: Any, space: sp.Space, searched: Mapping[str, sp.Domain]) -> dict[str, Any]:
    """Ask Optuna for a value of every searched knob. A conditional space: clip_policy is asked
    first, and a child of it (`CLIP_CHILDREN`) only in the trials that pick its policy (the
    others run it at its fixed value, which their policy does not read); `min_lr_ratio` after
    the schedule, and only in the trials whose schedule decays (a value sampled under a
    constant one showed in Optuna's records, its dashboard included, as chosen)."""
    params: dict[str, Any] = {}
    order = sorted(searched, key=lambda n: n != "clip_policy")  # the parent first, else as given
    if "schedule" in searched and "min_lr_ratio" in searched:  # after the schedule
        order = [n for n in order if n != "min_lr_ratio"] + ["min_lr_ratio"]
    fixed = space.fixed_knobs()  # a switch not searched: its fixed value
    for name in order:
        d = searched[name]
        if name in inactive({**fixed, **params}):  # switched off by what was asked before it
            continue
        if d.is_choice:
            params[name] = trial.suggest_categorical(name, list(d.choices))
        elif space.knob_kind(name) == "int":
            assert d.low is not None and d.high is not None
            params[name] = trial.suggest_int(
                name, int(d.low), int(d.high), step=int(d.step or 1), log=d.log
            )
        else:
            assert d.low is not None and d.high is not None
            params[name] = trial.suggest_float(
                name, float(d.low), float(d.high), log=d.log, step=d.step
            )
    return params


def trial_setup(
    space: sp.Space, params: Mapping[str, Any], baseline: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    """The knobs and environment of one trial. An environment knob the trial was not given
    (`params`: conditioning dropped it, it cannot act here) stays unset, as in the baseline: at
    its first choice it would be exported as a setting that was searched and nothing measured."""
    if baseline:
        return space.baseline_knobs(), space.baseline_env()
    knobs = space.fixed_knobs()
    env = space.baseline_env()  # the fixed ones: the searched ones are in `params`
    for name, value in params.items():
        if name in sp.KNOBS:
            knobs[name] = value
        else:
            env[name] = str(value)
    return knobs, env


def name_metrics(study: Any, space: sp.Space) -> None:
    """Name the study's objectives after their metrics (optuna-dashboard shows these names,
    else "Objective 0", "Objective 1"); also on a study made before names were set."""
    names = [o.metric for o in space.objectives]
    if study.metric_names != names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # experimental in some Optuna versions
            study.set_metric_names(names)
