"""Rungs: the best screened configurations promoted through longer probes toward the target.

Pure functions (no Ray, no Optuna): the rung lengths, who is promoted, the agreement of two
rungs' rankings (Kendall tau-b) and the growth rule. `autotune.study.rung_phase` runs them.

Synchronous successive halving (Li et al.), grown PASHA-style (Bohdal et al. 2023): a higher
rung is run only while the rankings of the two top rungs on the stability objective disagree
(tau-b below `rungs.agreement`), or while too few configurations were compared to tell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.knobs import HARDWARE_METRICS

if TYPE_CHECKING:
    from autotune import space as sp


@dataclass(frozen=True)
class RungResult:
    """One configuration's outcome at one rung."""

    number: int
    steps: int
    baseline: bool
    outcome: str
    values: list[float] | None
    feasible: bool
    metrics: dict[str, Any] = field(default_factory=dict)


def _round10(x: float) -> int:
    return max(10, round(x / 10.0) * 10)


def target_of(space: sp.Space) -> int:
    """The length the study decides toward: budget.target_steps, else the probe's steps."""
    return space.budget.target_steps or space.probe.steps


def plan(space: sp.Space) -> list[int]:
    """The space's rung lengths, the screen first (`rung_steps`)."""
    r = space.rungs
    return rung_steps(space.probe.steps, target_of(space), r.eta, r.max_rungs)


def rung_steps(screen: int, target: int, eta: int, max_rungs: int) -> list[int]:
    """The rung lengths from the screen (`screen` steps) to `target`: geometric, ratio about
    `eta`, at most `max_rungs` above the screen, the last exactly `target`."""
    if target <= screen:
        return [screen]
    k = max(1, min(max_rungs, math.ceil(math.log(target / screen) / math.log(eta) - 1e-9)))
    out = [screen]
    for i in range(1, k):
        r = _round10(screen * (target / screen) ** (i / k))
        if out[-1] < r < target:
            out.append(r)
    out.append(target)
    return out


def promote(
    results: Sequence[RungResult],
    objectives: Sequence[Mapping[str, Any]],
    *,
    eta: int,
    min_promote: int,
) -> list[int]:
    """The trial numbers to run at the next rung: the best `max(min_promote, ceil(n / eta))`
    feasible non-baseline configurations (Pareto layer by layer, each by knee distance: the
    pick's own order), plus the baseline whenever it ran this rung. Infeasible ones never."""
    from autotune.study import pick

    n_rung = len(results)
    feasible = [r for r in results if r.feasible and not r.baseline and r.values is not None]
    q = min(len(feasible), max(min_promote, math.ceil(n_rung / eta)))
    cands = [
        pick.Candidate(
            number=r.number,
            values=list(r.values or []),
            metrics=dict(r.metrics),
            knobs={},
            env={},
            params={},
        )
        for r in feasible
    ]
    best = [c.number for c in pick.ranked(cands, objectives)[:q]]
    base = [r.number for r in results if r.baseline]
    return sorted(set(best) | set(base))


def stability_objective(objectives: Sequence[Mapping[str, Any]]) -> int:
    """The index of the objective two rungs' rankings are compared on: the first one that is
    not a hardware number (`HARDWARE_METRICS`: throughput and the like measure the machine,
    per step, and are noise on a shared CPU; loss_cv by default). A space whose objectives are
    all hardware numbers (a speed space such as nccl: throughput only) uses its first."""
    return next((i for i, o in enumerate(objectives) if o["metric"] not in HARDWARE_METRICS), 0)


def stability_ranks(
    results: Sequence[RungResult], objective: Mapping[str, Any], i: int
) -> dict[int, float]:
    """A rank per configuration (0 = best) by objective `i` in its direction; equal values tie,
    and every infeasible one (or one without a finite value) ties last."""

    def key(r: RungResult) -> float | None:
        if not r.feasible or r.values is None or not math.isfinite(float(r.values[i])):
            return None
        v = float(r.values[i])
        return v if objective["direction"] == "minimize" else -v

    keys = {r.number: key(r) for r in results}
    distinct = sorted({k for k in keys.values() if k is not None})
    rank = {k: float(j) for j, k in enumerate(distinct)}
    last = float(len(distinct))
    return {n: last if k is None else rank[k] for n, k in keys.items()}


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two paired samples (ties corrected); None when either is constant
    or there are fewer than two pairs. Exact, O(n^2): a rung has a handful of configs."""
    if len(x) != len(y):
        raise ValueError("kendall_tau_b: x and y differ in length")
    n = len(x)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    if denom == 0:
        return None
    return (concordant - discordant) / denom


def agreement(
    prev: Sequence[RungResult],
    cur: Sequence[RungResult],
    objectives: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """tau-b between two rungs' rankings of the configurations that ran both, each ranked
    within its own rung on the stability objective (`stability_objective`), infeasible tied
    last. Not the promotion's Pareto order: that mixes in throughput, whose noise alone could
    turn the growth decision. `metric` names the objective ranked on."""
    i = stability_objective(objectives)
    common = sorted({r.number for r in prev} & {r.number for r in cur})
    a = stability_ranks([r for r in prev if r.number in common], objectives[i], i)
    b = stability_ranks([r for r in cur if r.number in common], objectives[i], i)
    tau = kendall_tau_b([a[n] for n in common], [b[n] for n in common]) if common else None
    return {
        "tau": tau,
        "n": len(common),
        "metric": objectives[i]["metric"],
        "vs_steps": prev[0].steps if prev else None,
    }


def should_grow(
    agreements: Sequence[Mapping[str, Any] | None],
    *,
    threshold: float,
    min_n: int,
    grow: str,
    at_target: bool,
    pairs: int = 1,
) -> tuple[bool, str]:
    """Whether to run the next rung, and why (not). `agreements`: each rung's agreement with the
    rung below, the top rung's last; the study stops below the target only when the last
    `pairs` of them each agree (`rungs.agree_rungs`): two early rungs can rank alike and the
    target differently (a config that blows up early and recovers, or the reverse)."""
    if at_target:
        return False, "target"
    if grow == "always":
        return True, "grow: always"
    last = agreements[-1] if agreements else None
    why = _disagrees(last, threshold, min_n)
    if why is not None or last is None:
        return True, why or "no agreement measured yet"
    recent = list(agreements[-pairs:])
    if len(recent) < pairs or any(_disagrees(a, threshold, min_n) for a in recent):
        return True, (
            f"rankings agree (tau {float(last['tau']):+.2f} >= {threshold:g}) at this rung "
            f"only; {pairs} rung pairs in a row must (rungs.agree_rungs)"
        )
    taus = ", ".join(f"{float(a['tau']):+.2f}" for a in recent if a is not None)
    over = f" over {pairs} rung pairs" if pairs > 1 else ""
    return False, f"rankings agree{over} (tau {taus} >= {threshold:g}, {last['n']} configurations)"


def _disagrees(agreed: Mapping[str, Any] | None, threshold: float, min_n: int) -> str | None:
    """Why one rung pair's agreement does not let the study stop (None: it agrees)."""
    if agreed is None:
        return "no agreement measured yet"
    n, tau = int(agreed.get("n") or 0), agreed.get("tau")
    if n < min_n:
        return f"too few configurations to judge ({n} < {min_n})"
    if tau is None or tau < threshold:
        shown = "undefined" if tau is None else f"{tau:+.2f}"
        return f"rankings disagree (tau {shown} < {threshold:g})"
    return None
