"""One interval per quantity: a paired verdict's per-side rows (`paired.compare`'s `pick` and
`baseline`) made the interval each side's own seeds summary reports, wherever the row's values
are over the same seeds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.outcome import Outcome
from autotune.recipe.seeds import counts_for


def same_seed_intervals(
    verdict: dict[str, Any], mine: Mapping[str, Any], base: Mapping[str, Any]
) -> dict[str, Any]:
    """`verdict` (`paired.compare` of `mine` against `base`) with each metric's `pick` and
    `baseline` interval over seeds made the one its side's verification reports
    (`seeds.summarize_seeds`: a timed metric's never narrower than its runs' own timing
    intervals, `seeds.with_timing`; a bounded metric's clipped) wherever the row's values are
    over the same seeds as that verification's: the same seeds and the same quantity carry one
    interval (the pick's throughput was [10279, 20451] in the verdict and [10279, 23103] in
    its verification and the recipe's `achieved`). A row over other seeds (timed apart, or a
    seed labelled diverged that ran on, which the paired values count) keeps its own. The
    verdict itself is the per-seed ratio's or difference's, which this does not touch."""
    for metric, row in (verdict.get("metrics") or {}).items():
        apart = set(row.get("apart_seeds") or [])
        paired_seeds = [s for s in verdict.get("seeds") or [] if s not in apart]
        for side, result in (("pick", mine), ("baseline", base)):
            iv = (result.get("metrics") or {}).get(metric)
            if iv is None or side not in row:
                continue
            every = [r.get("seed") for r in result.get("runs") or []]
            same = _counted(result, metric, paired_seeds, ran_on=True) == _counted(
                result, metric, every, ran_on=False
            )
            if same:
                row[side] = dict(iv)
    return verdict


def _counted(
    result: Mapping[str, Any], metric: str, seeds: Sequence[Any], *, ran_on: bool
) -> set[Any]:
    """The seeds among `seeds` whose run of `result` has a finite `metric` and counts for an
    interval: complete (a verification's), or as the paired comparison counts it (`ran_on`:
    `seeds.counts_for`, a run labelled diverged but run whole for the final loss)."""
    runs = {r.get("seed"): r for r in result.get("runs") or []}
    out = set()
    for s in seeds:
        r = runs.get(s) or {}
        counts = r.get("outcome") == Outcome.COMPLETE or (ran_on and counts_for(r, metric))
        v = (r.get("metrics") or {}).get(metric)
        if counts and isinstance(v, int | float) and math.isfinite(float(v)):
            out.add(s)
    return out
