"""The pick's neighbours on the study's Pareto front: the configurations `autotune migrate`
re-runs (and a re-tune starts from) when the recipe does not hold on another machine.

Two sets give them:

- **every objective's front**: up to 3 candidates on it, nearest the pick first (the Euclidean
  distance in objective space, each objective scaled by its range over the candidates);
- **the configuration's own objectives' ranking**, when the study also optimises a hardware
  number (throughput, tokens_per_s, peak_mem_mb, scaling_efficiency): up to 2 more, the first
  by the other objectives alone (`pick.ranked`: Pareto layer by layer, each by knee distance;
  with one such objective, the best of it first), not already taken. A pick that is the knee
  of stability against throughput traded stability for this machine's speed; on a machine
  where the speeds differ (a layout that no longer fits makes every configuration slower) the
  knee moves towards the stabler configurations, and these are the ones the source study found.
  Where the study decided above the screen, those that ran at the decided length are ranked by
  what they did there, before the screen's others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from autotune.knobs import HARDWARE_METRICS
from autotune.study import attrs as ua
from autotune.study.pick import Candidate, front, ranked, vector
from autotune.study.records import screen_feasible

#: The `front` a neighbour came from, as the recipe records it.
EVERY_OBJECTIVE = "every objective"


def pareto_neighbours(
    cands: Sequence[Candidate],
    chosen: Candidate,
    objectives: Sequence[Mapping[str, Any]],
    limit: int = 3,
    portable_limit: int = 2,
    screen: Sequence[Candidate] | None = None,
) -> list[tuple[Candidate, str]]:
    """The neighbours, each with the front it is on (`EVERY_OBJECTIVE`, or `without X, Y`
    naming the hardware objectives left out): up to `limit` from every objective's front,
    nearest `chosen` first, then up to `portable_limit` more, the first by the objectives left
    when the hardware ones are left out. Never `chosen`, the baseline, or a candidate whose
    verification did not hold.

    `screen` (`screened`: every trial feasible at the screen, with its screen values): where the
    study decided above the screen, the second set is drawn from the candidates at the decided
    length first, then from the screen's trials that never ran that long (`at the screen`). The
    rungs promoted by every objective, throughput included, so the stabler, slower trade-offs
    rarely reached the decided length; the screen measured them all at one length. But a trial
    that did run at the decided length is ranked by what it did there: the screen's ranking can
    be the reverse of the longer one's (a tight clip looks stable for 40 steps and learns too
    slowly over 120), and migrate re-runs a neighbour at the decided length."""
    near = [(c, EVERY_OBJECTIVE) for c in nearest(cands, chosen, objectives, limit)]
    idx = [i for i, o in enumerate(objectives) if o["metric"] not in HARDWARE_METRICS]
    if not idx or len(idx) == len(objectives):
        return near
    own = [objectives[i] for i in idx]
    left_out = ", ".join(o["metric"] for o in objectives if o["metric"] in HARDWARE_METRICS)
    pools = [(list(cands), f"without {left_out}")]
    if screen is not None:
        failed = {c.number for c in cands if not (c.verified is None or c.holds)}
        ran_long = {c.number for c in cands}
        shorter = [c for c in screen if c.number not in failed | ran_long]
        pools = [*pools, (shorter, f"without {left_out}, at the screen")]
    taken = {c.number for c, _ in near} | {chosen.number}
    more: list[tuple[Candidate, str]] = []
    for pool, label in pools:
        # The candidates seen through their own objectives only (a value's index is its
        # objective's).
        seen = {c.number: replace(c, values=[c.values[i] for i in idx]) for c in pool}
        by_number = {c.number: c for c in pool}
        for c in _eligible(ranked(list(seen.values()), own), chosen):
            if c.number not in taken:
                taken.add(c.number)
                more.append((by_number[c.number], label))
    return near + more[:portable_limit]


def screened(study: Any) -> list[Candidate]:
    """Every trial feasible at the screen, with its screen values (`t.values`), less those run
    longer by a rung and found infeasible there (a divergence, a failure or a broken constraint
    at a longer length outweighs a screen that looked fine)."""
    import optuna

    failed_above = set()
    for key, row in study.user_attrs.items():
        at = ua.rung_of(key)
        if at is not None and isinstance(row, Mapping) and not row.get("feasible"):
            failed_above.add(at[0])
    judged = screen_feasible(study)
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.number in failed_above or not judged(t):
            continue
        out.append(
            Candidate(
                number=t.number,
                values=[float(v) for v in t.values],
                metrics=dict(t.user_attrs.get(ua.METRICS) or {}),
                knobs=ua.knobs(t),
                env=ua.env(t),
                params=dict(t.params),
                fp_hash=t.user_attrs.get(ua.FP_HASH),
                baseline=ua.is_baseline(t),
            )
        )
    return out


def nearest(
    cands: Sequence[Candidate],
    chosen: Candidate,
    objectives: Sequence[Mapping[str, Any]],
    limit: int = 3,
) -> list[Candidate]:
    """Up to `limit` of the candidates on their Pareto front (`pick.front`) other than `chosen`
    and the baseline (and none whose verification did not hold), nearest `chosen` first: the
    Euclidean distance in objective space, each objective scaled by its range over `cands`
    (an objective on which they all agree adds nothing)."""
    members = _eligible(front(cands, objectives), chosen)
    vectors = {c.number: vector(c, objectives) for c in cands}
    spans = []
    for i in range(len(objectives)):
        column = [v[i] for v in vectors.values() if math.isfinite(v[i])]
        spans.append(max(column) - min(column) if column else 0.0)
    here = vectors.get(chosen.number) or vector(chosen, objectives)

    def distance(c: Candidate) -> float:
        total = 0.0
        for x, y, span in zip(vectors[c.number], here, spans, strict=True):
            if span > 0:
                gap = (x - y) / span
                total += gap * gap if math.isfinite(gap) else math.inf
        return math.sqrt(total)

    return sorted(members, key=lambda c: (distance(c), c.number))[:limit]


def _eligible(members: Sequence[Candidate], chosen: Candidate) -> list[Candidate]:
    return [
        c
        for c in members
        if c.number != chosen.number and not c.baseline and (c.verified is None or c.holds)
    ]
