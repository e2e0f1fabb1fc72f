"""The pick's neighbours on the study's Pareto front: the configurations `autotune migrate`
re-runs (and a re-tune starts from) when the recipe does not hold on another machine.

Two fronts give them:

- **every objective's**: up to 3 candidates on it, nearest the pick first (the Euclidean
  distance in objective space, each objective scaled by its range over the candidates);
- **the configuration's own objectives'**, when the study also optimises a hardware number
  (throughput, tokens_per_s, peak_mem_mb, scaling_efficiency): up to 2 more, on the front of
  the other objectives alone, nearest that front's ideal point first. A pick that is the knee of
  stability against throughput traded stability for this machine's speed; on a machine where the
  speeds differ (a layout that no longer fits makes every configuration slower) the knee moves
  towards the stabler configurations, and these are the ones the source study found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from autotune.knobs import HARDWARE_METRICS
from autotune.study.pick import Candidate, front, knee_distances

#: The `front` a neighbour came from, as the recipe records it.
EVERY_OBJECTIVE = "every objective"


def pareto_neighbours(
    cands: Sequence[Candidate],
    chosen: Candidate,
    objectives: Sequence[Mapping[str, Any]],
    limit: int = 3,
    portable_limit: int = 2,
) -> list[tuple[Candidate, str]]:
    """The neighbours, each with the front it is on (`EVERY_OBJECTIVE`, or `without X, Y`
    naming the hardware objectives left out): up to `limit` from every objective's front,
    nearest `chosen` first, then up to `portable_limit` more from the front without the hardware
    objectives. Never `chosen`, the baseline, or a candidate whose verification did not hold."""
    near = [(c, EVERY_OBJECTIVE) for c in nearest(cands, chosen, objectives, limit)]
    idx = [i for i, o in enumerate(objectives) if o["metric"] not in HARDWARE_METRICS]
    if not idx or len(idx) == len(objectives):
        return near
    own = [objectives[i] for i in idx]
    left_out = ", ".join(o["metric"] for o in objectives if o["metric"] in HARDWARE_METRICS)
    taken = {c.number for c, _ in near} | {chosen.number}
    # The candidates seen through their own objectives only (a value's index is its objective's).
    seen = {c.number: replace(c, values=[c.values[i] for i in idx]) for c in cands}
    members = [
        seen[c.number]
        for c in _eligible(front(list(seen.values()), own), chosen)
        if c.number not in taken
    ]
    distance = knee_distances(members, own)
    members.sort(key=lambda c: (distance[c.number], c.number))
    by_number = {c.number: c for c in cands}
    return near + [(by_number[c.number], f"without {left_out}") for c in members[:portable_limit]]


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
    vectors = {c.number: _vector(c, objectives) for c in cands}
    spans = []
    for i in range(len(objectives)):
        column = [v[i] for v in vectors.values() if math.isfinite(v[i])]
        spans.append(max(column) - min(column) if column else 0.0)
    here = vectors.get(chosen.number) or _vector(chosen, objectives)

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


def _vector(c: Candidate, objectives: Sequence[Mapping[str, Any]]) -> list[float]:
    return [c.value(o["metric"], i) for i, o in enumerate(objectives)]
