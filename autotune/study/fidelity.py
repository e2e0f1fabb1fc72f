"""Rank fidelity: how well the rung that chose the configurations run at the target ranked them,
against the target's own ranking.

Over the configurations that reached the target (the top rung when the study decided there):
Kendall's tau-b between their ranks at the rung below the target (the screen when the target is
rung 1) and at the target, each ranked within its own length on the stability objective as the
rungs' agreement is (`rungs.stability_ranks`: ties within noise, infeasible tied last), its n,
the chance `p` of agreeing at least as well at random (`rungs.chance`, as the rungs' agreement
says it), and a 95% percentile bootstrap interval over the configurations (`BOOTSTRAP`
resamples, a fixed seed: the same study gives the same interval). The bootstrap is given only
from `INTERVAL_MIN_N` configurations, and only when its resamples differ: a few configurations
have few distinct resamples, and a ranking in perfect order resamples to perfect order every
time, so four in order would read [+1.00, +1.00], certainty, where chance alone gives them one
time in 24. Then `low`/`high` are None and `interval_note` says why. A study decided below the
target ran nothing there: the value is None and `note` says why. The values are read from the
study's storage alone: the screen's from its trials (their feasibility judged again,
`attrs.SCREEN_FEASIBLE`), a rung's from its slim records (`attrs.rung_key`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.study import attrs as ua
from autotune.study import rungs as rg

BOOTSTRAP = 1000
SEED = 0
#: The fewest configurations a bootstrap interval is given from (see the module).
INTERVAL_MIN_N = 10


def rank_fidelity(study: Any, space: sp.Space, decided: Mapping[str, Any]) -> dict[str, Any]:
    """The rank fidelity of the study (see the module): `tau`, `low`, `high`, `n`, `from_steps`,
    `to_steps`, `metric`, `p`, `note`, `interval_note`."""
    target = rg.target_of(space)
    objectives = [o.model_dump() for o in space.objectives]
    i = rg.stability_objective(objectives)
    out: dict[str, Any] = {
        "tau": None,
        "low": None,
        "high": None,
        "n": 0,
        "from_steps": None,
        "to_steps": target,
        "metric": objectives[i]["metric"],
        "method": f"kendall tau-b, {BOOTSTRAP} bootstrap resamples of the configurations",
        "note": None,
        "p": None,
        "interval_note": None,
    }
    rows = list(study.user_attrs.get(ua.RUNGS) or [])
    top = rows[-1] if rows else None
    if top is None or int(top.get("steps") or 0) != target or decided.get("steps") != target:
        out["note"] = f"decided at {decided.get('steps')} steps: no configuration ran the target"
        if target == space.probe.steps:
            out["note"] = "the target is the probe's length: no rungs"
        return out
    numbers = [int(n) for n in top.get("numbers") or []]
    below = rows[-2] if len(rows) > 1 else None
    out["from_steps"] = int(below["steps"]) if below else space.probe.steps
    at_target = _rung(study, numbers, target)
    lower = _rung(study, numbers, out["from_steps"]) if below else _screen(study, space, numbers)
    common = sorted({r.number for r in at_target} & {r.number for r in lower})
    a = rg.stability_ranks([r for r in lower if r.number in common], objectives[i], i)
    b = rg.stability_ranks([r for r in at_target if r.number in common], objectives[i], i)
    x, y = [a[n] for n in common], [b[n] for n in common]
    out["n"] = len(common)
    out["tau"] = rg.kendall_tau_b(x, y)
    if out["tau"] is None:
        out["note"] = f"no ranking to compare (n={len(common)}, or every rank tied)"
        return out
    out["p"] = rg.chance(x, y)
    out["low"], out["high"], out["interval_note"] = interval(x, y)
    # as the rungs' agreement of the same pair says it: too few (or too tied) to tell
    out["note"] = rg.too_few(x, y, space.rungs.min_agreement_n)
    return out


def interval(
    x: Sequence[float], y: Sequence[float]
) -> tuple[float | None, float | None, str | None]:
    """The bootstrap interval of tau-b (`bootstrap`), or None and None and why there is none:
    fewer than `INTERVAL_MIN_N` configurations, or resamples that all give one value."""
    if len(x) < INTERVAL_MIN_N:
        return None, None, f"too few configurations for an interval (at least {INTERVAL_MIN_N})"
    low, high = bootstrap(x, y)
    if low is None or high is None or low == high:
        return None, None, "every resample ranks alike: a bootstrap cannot show the spread"
    return low, high, None


def bootstrap(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """The 2.5% and 97.5% percentiles of tau-b over `BOOTSTRAP` resamples of the pairs (a
    resample whose ranks are all tied has no tau and is left out)."""
    rng = random.Random(SEED)
    n = len(x)
    taus = []
    for _ in range(BOOTSTRAP):
        idx = [rng.randrange(n) for _ in range(n)]
        t = rg.kendall_tau_b([x[j] for j in idx], [y[j] for j in idx])
        if t is not None:
            taus.append(t)
    if not taus:
        return None, None
    taus.sort()
    return _quantile(taus, 0.025), _quantile(taus, 0.975)


def _quantile(xs: Sequence[float], q: float) -> float:
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _rung(study: Any, numbers: Sequence[int], steps: int) -> list[rg.RungResult]:
    """The configurations' results at a rung, from their slim records in the study."""
    out = []
    for n in numbers:
        row = study.user_attrs.get(ua.rung_key(n, steps))
        if not row:
            continue
        out.append(
            rg.RungResult(
                number=n,
                steps=steps,
                baseline=bool(row.get("baseline")),
                outcome=str(row.get("outcome") or Outcome.FAILED.value),
                values=list(row["values"]) if row.get("values") else None,
                feasible=bool(row.get("feasible")),
                metrics=dict(row.get("metrics") or {}),
            )
        )
    return out


def _screen(study: Any, space: sp.Space, numbers: Sequence[int]) -> list[rg.RungResult]:
    """The configurations' results at the screen: their trials' values, feasibility as judged
    again once the screen was over (else as told)."""
    judged = study.user_attrs.get(ua.SCREEN_FEASIBLE) or {}
    wanted = set(numbers)
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.number not in wanted:
            continue
        feasible = judged.get(str(t.number), t.user_attrs.get(ua.FEASIBLE))
        out.append(
            rg.RungResult(
                number=t.number,
                steps=space.probe.steps,
                baseline=ua.is_baseline(t),
                outcome=ua.outcome(t),
                values=list(t.values) if t.values else None,
                feasible=bool(feasible),
                metrics=ua.metrics(t),
            )
        )
    return out


def format_line(fid: Mapping[str, Any] | None) -> str | None:
    """One line for the end-of-study summary; None without a measured value. Below
    `rungs.MIN_AGREEMENT_N` configurations, or with too many ties (`rungs.too_few`), it says
    that they cannot tell (as the rung agreement of the same pair does): three in perfect
    order happen by chance one time in six. Otherwise it carries the chance p, and says why
    there is no interval when there is none (`interval`)."""
    if not fid or fid.get("tau") is None:
        return None
    if int(fid["n"]) < rg.MIN_AGREEMENT_N:
        return (
            f"rank fidelity {fid['from_steps']} -> {fid['to_steps']} steps: too few "
            f"configurations to tell (n={fid['n']}, at least {rg.MIN_AGREEMENT_N})"
        )
    if str(fid.get("note") or "").startswith("too few"):  # as the rankings line says it
        return f"rank fidelity {fid['from_steps']} -> {fid['to_steps']} steps: {fid['note']}"
    iv, p, why = "", "", ""
    if fid.get("low") is not None:
        iv = f" [{fid['low']:+.2f}, {fid['high']:+.2f}]"
    if fid.get("p") is not None:
        p = f", chance p {fid['p']:.2g}"
    if fid.get("low") is None:
        why = f"; {fid.get('interval_note') or 'no interval'}"
    return (
        f"rank fidelity {fid['from_steps']} -> {fid['to_steps']} steps: tau-b "
        f"{fid['tau']:+.2f}{iv} (n {fid['n']}, {fid['metric']}{p}{why})"
    )
