"""Rungs: the best screened configurations promoted through longer probes toward the target.

Pure functions (no Ray, no Optuna): the rung lengths, who is promoted, the agreement of two
rungs' rankings (Kendall tau-b) and the growth rule. `autotune.study.rung_phase` runs them.

Synchronous successive halving (Li et al.; `rungs.promotion: async` promotes asynchronously
by the same rules instead: `autotune.study.promotion`), grown PASHA-style (Bohdal et al. 2023):
a higher rung is run only while the rankings of the two top rungs on the stability objective
disagree (tau-b below `rungs.agreement`), or while too few configurations were compared to tell: two
random rankings of n configurations agree perfectly with probability 1/n!, so below
`MIN_AGREEMENT_N` = 4 (1/24 = 4.2% <= `ALPHA` = 0.05) no agreement is reported nor stopped on,
nor where ties (within noise, or infeasible, tied last) leave too few distinct ranks
(`best_chance`). Promotion and the rankings treat values within each other's noise as ties
(`autotune.study.noise`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune import space as sp
from autotune.probe.outcome import Outcome
from autotune.study import attrs as ua
from autotune.study import noise, pick


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
    violation: float | None = None
    """How far from feasible: the sum of its constraints' positive parts (None: not measured)."""


def _round10(x: float) -> int:
    return max(10, round(x / 10.0) * 10)


def target_of(space: sp.Space) -> int:
    """The length the study decides toward: budget.target_steps, else the probe's steps."""
    return space.budget.target_steps or space.probe.steps


def plan(space: sp.Space) -> list[int]:
    """The space's rung lengths, the screen first (`rung_steps`)."""
    r = space.rungs
    return rung_steps(space.probe.steps, target_of(space), r.eta, r.max_rungs)


def pending(study: Any, space: sp.Space) -> bool:
    """Whether the rung phase has yet to decide for this space's target."""
    if len(plan(space)) < 2:
        return False
    decided = ua.decided(study)
    return decided.get("target_steps") != target_of(space)


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


def closest(results: Sequence[RungResult], *, eta: int, min_promote: int) -> list[int]:
    """When nothing at a rung is feasible, not even the baseline: the trial numbers of the
    `max(min_promote, ceil(n / eta))` searched configurations closest to feasible (the least
    constraint violation, then the lowest number), among those that completed there (a
    diverged or failed run never goes on). A screen can be too short for anything to learn yet
    (a recurrent model that starts late): the nearest go on and are judged at longer lengths."""
    if any(r.feasible for r in results):
        return []
    near = [
        r
        for r in results
        if not r.baseline
        and r.outcome == Outcome.COMPLETE
        and r.violation is not None
        and math.isfinite(r.violation)
    ]
    q = min(len(near), max(min_promote, math.ceil(len(results) / eta)))
    return [r.number for r in sorted(near, key=lambda r: (r.violation, r.number))[:q]]


def violation(constraints: Sequence[float] | None) -> float | None:
    """The sum of the positive parts of Optuna constraint values (<= 0 is met); None: none."""
    if constraints is None:
        return None
    return float(sum(max(0.0, float(c)) for c in constraints))


ALPHA = 0.05
"""The chance the agreement rule accepts of two rungs ranking alike by luck alone."""


def min_agreement_n(alpha: float = ALPHA) -> int:
    """The fewest configurations whose rankings can agree beyond chance at `alpha`: the least
    `n` with `1 / n! <= alpha` (two random rankings of `n` configurations agree perfectly with
    probability `1 / n!`: 1/2, 1/6, 1/24 for 2, 3, 4; 4 at 0.05)."""
    n = 1
    while 1.0 / math.factorial(n) > alpha:
        n += 1
    return n


MIN_AGREEMENT_N = min_agreement_n()
"""4: below it no agreement is reported, nor stopped on (`rungs.min_agreement_n` >= 4)."""

EXACT_MAX_N = 7
"""Up to this many configurations the permutation distribution is enumerated (7! = 5040)."""


def stability_objective(objectives: Sequence[Mapping[str, Any]]) -> int:
    """The index of the objective two rungs' rankings are compared on: the first one that is
    not a hardware number (`HARDWARE_METRICS`: throughput and the like measure the machine,
    per step, and are noise on a shared CPU; loss_cv by default). A space whose objectives are
    all hardware numbers (a speed space such as nccl: throughput only) uses its first."""
    i = noise.stability_index(objectives)
    return 0 if i is None else i


def stability_ranks(
    results: Sequence[RungResult], objective: Mapping[str, Any], i: int
) -> dict[int, float]:
    """A rank per configuration (0 = best) by objective `i` in its direction: how many others
    beat it beyond noise (`noise.better`: a value with an interval, such as throughput, is tied
    with every value its interval overlaps; others tie when equal); every infeasible one (or one
    without a finite value) ties last, behind every feasible one."""
    rows = {
        r.number: noise.Scored(
            r.number,
            (float(r.values[i]),),
            (noise.bounds_of(r.metrics, objective["metric"]),),
        )
        for r in results
        if r.feasible and r.values is not None and math.isfinite(float(r.values[i]))
    }
    d = objective["direction"]
    last = float(len(results))
    return {
        r.number: (
            float(sum(noise.better(o, rows[r.number], 0, d) for o in rows.values()))
            if r.number in rows
            else last
        )
        for r in results
    }


def concordance(x: Sequence[float], y: Sequence[float]) -> int:
    """S = concordant - discordant pairs (pairs tied in either are neither)."""
    n = len(x)
    s = 0
    for a in range(n):
        for b in range(a + 1, n):
            p = (x[a] - x[b]) * (y[a] - y[b])
            s += (p > 0) - (p < 0)
    return s


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two paired samples (ties corrected); None when either is constant
    or there are fewer than two pairs. Exact, O(n^2): a rung has a handful of configs."""
    if len(x) != len(y):
        raise ValueError("kendall_tau_b: x and y differ in length")
    n = len(x)
    pairs = n * (n - 1) // 2
    tied_x = sum(x[a] == x[b] for a in range(n) for b in range(a + 1, n))
    tied_y = sum(y[a] == y[b] for a in range(n) for b in range(a + 1, n))
    denom = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    if denom == 0:
        return None
    return concordance(x, y) / denom


def chance(x: Sequence[float], y: Sequence[float]) -> float:
    """The one-sided permutation p-value of the agreement of `x` and `y`: the probability that
    `y`'s values, dealt to `x`'s configurations at random, agree at least as well (S at least
    the observed; ties as they are). Exact up to `EXACT_MAX_N` configurations, beyond them the
    normal approximation of S with Kendall's tie-corrected variance (continuity-corrected)."""
    n = len(x)
    observed = concordance(x, y)
    if n <= EXACT_MAX_N:
        hits = sum(concordance(x, perm) >= observed for perm in itertools.permutations(y))
        return hits / math.factorial(n)
    tx = list(Counter(x).values())
    ty = list(Counter(y).values())

    def sums(t: list[int], f: Callable[[int], int]) -> int:
        return sum(f(k) for k in t)

    var = (
        n * (n - 1) * (2 * n + 5)
        - sums(tx, lambda k: k * (k - 1) * (2 * k + 5))
        - sums(ty, lambda k: k * (k - 1) * (2 * k + 5))
    ) / 18
    var += (
        sums(tx, lambda k: k * (k - 1) * (k - 2))
        * sums(ty, lambda k: k * (k - 1) * (k - 2))
        / (9 * n * (n - 1) * (n - 2))
    )
    var += sums(tx, lambda k: k * (k - 1)) * sums(ty, lambda k: k * (k - 1)) / (2 * n * (n - 1))
    if var <= 0:
        return 1.0
    return 0.5 * math.erfc((observed - 1) / math.sqrt(2 * var))


def best_chance(x: Sequence[float], y: Sequence[float]) -> float:
    """`chance` of the best agreement the ties allow: `y`'s values sorted into `x`'s order.
    Above `ALPHA`, these configurations cannot show agreement, whatever their order."""
    order = sorted(range(len(x)), key=lambda k: x[k])
    aligned = [0.0] * len(x)
    for k, v in zip(order, sorted(y), strict=True):
        aligned[k] = v
    return chance(x, aligned)


def too_few(x: Sequence[float], y: Sequence[float], min_n: int = MIN_AGREEMENT_N) -> str | None:
    """Why two rankings of the same configurations (`x`, `y`) cannot show agreement: fewer than
    `max(min_n, MIN_AGREEMENT_N)` of them, or ties that leave too few distinct ranks for even a
    perfect agreement to reach `ALPHA` (`best_chance`); None when they can. The rank fidelity
    says the same of the same pair (`fidelity.rank_fidelity`)."""
    need = max(min_n, MIN_AGREEMENT_N)
    if len(x) < need:
        return f"too few configurations to tell (n={len(x)}, at least {need})"
    if best_chance(x, y) > ALPHA:
        return f"too few configurations to tell (n={len(x)}, too many tied)"
    return None


def agreement(
    prev: Sequence[RungResult],
    cur: Sequence[RungResult],
    objectives: Sequence[Mapping[str, Any]],
    *,
    min_n: int = MIN_AGREEMENT_N,
) -> dict[str, Any]:
    """tau-b between two rungs' rankings of the configurations that ran both, each ranked
    within its own rung on the stability objective (`stability_objective`; `stability_ranks`:
    ties within noise, infeasible tied last). Not the promotion's Pareto order: that mixes in
    throughput, whose noise alone could turn the growth decision. `metric` names the objective
    ranked on; `p` is the chance of agreeing at least as well at random (`chance`).

    Fewer than `max(min_n, MIN_AGREEMENT_N)` configurations, or ties that leave too few distinct
    ranks for even a perfect agreement to reach `ALPHA` (`best_chance`), cannot show agreement:
    then `tau` and `p` are None and `note` says "too few configurations to tell (n=...)"."""
    i = stability_objective(objectives)
    common = sorted({r.number for r in prev} & {r.number for r in cur})
    a = stability_ranks([r for r in prev if r.number in common], objectives[i], i)
    b = stability_ranks([r for r in cur if r.number in common], objectives[i], i)
    x, y = [a[n] for n in common], [b[n] for n in common]
    note = too_few(x, y, min_n)
    tau = kendall_tau_b(x, y) if note is None else None
    return {
        "tau": tau,
        "n": len(common),
        "p": chance(x, y) if tau is not None else None,
        "note": note,
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
    p = f", chance p {last['p']:.2g}" if last.get("p") is not None else ""
    return False, (
        f"rankings agree{over} (tau {taus} >= {threshold:g}, {last['n']} configurations{p})"
    )


def _disagrees(agreed: Mapping[str, Any] | None, threshold: float, min_n: int) -> str | None:
    """Why one rung pair's agreement does not let the study stop (None: it agrees)."""
    if agreed is None:
        return "no agreement measured yet"
    n, tau = int(agreed.get("n") or 0), agreed.get("tau")
    need = max(min_n, MIN_AGREEMENT_N)
    if n < need:
        return f"too few configurations to tell (n={n}, at least {need})"
    if agreed.get("note"):
        return str(agreed["note"])
    if tau is None or tau < threshold:
        shown = "undefined" if tau is None else f"{tau:+.2f}"
        return f"rankings disagree (tau {shown} < {threshold:g})"
    return None
