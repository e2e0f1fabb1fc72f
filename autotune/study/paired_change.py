"""The `vs baseline` percentage of verified values, paired: over the verification seeds both
the pick and the baseline have a value on, a timed metric's only those timed together (the
paired verdict's seeds, `paired.paired_values`).

Each side's verified mean is over its own seeds. A review saw `noise_per_drop pick 1322
baseline 2472 (-46.5%)`, the pick's mean over seeds {2, 3} against the baseline's seed {3}
alone (-53% on seed 3, the one seed both had); and `throughput pick 6.665e+04 baseline
7.505e+04 (-11.2%)` beside a paired line saying the throughput runs were timed apart (beside
the top rung, and in the verification phase), so not comparable: re-timed together they showed
no difference. The percentage is now the one over the paired seeds, or none."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.recipe.paired import paired_values
from autotune.recipe.seeds import finite_pairs, metric_interval


def paired_change(mine: Mapping[str, Any], base: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """`change_pct` of `metric`, the pick's verified result `mine` against the baseline's
    `base`, over the seeds paired for it, and where it came from: `paired_seeds`,
    `timed_apart` (seeds left out as timed apart), `left_out` (the other seeds of the
    verification without a value on both sides), and the two sides' means over the paired
    seeds (`best_paired`, `baseline_paired`). `change_pct` is None with no pair."""
    use, apart, xs, ys = paired_values(mine, base, metric)
    paired = [s for s, x, y in zip(use, xs, ys, strict=True) if finite_pairs([x], [y])]
    pairs = finite_pairs(xs, ys)
    every = [r.get("seed") for r in mine.get("runs") or []]
    out: dict[str, Any] = {
        "change_pct": None,
        "paired_seeds": paired,
        "timed_apart": list(apart),
        "left_out": [s for s in every if s not in paired and s not in apart],
        "best_paired": None,
        "baseline_paired": None,
    }
    if not pairs:
        return out
    # The same mean as a side's verified one (geometric for a positive metric), over the pairs.
    best = metric_interval([x for x, _ in pairs], metric)["mean"]
    base_mean = metric_interval([y for _, y in pairs], metric)["mean"]
    out.update(best_paired=best, baseline_paired=base_mean)
    if base_mean is not None and base_mean != 0 and math.isfinite(base_mean):
        out["change_pct"] = 100.0 * (best - base_mean) / abs(base_mean)
    return out


def with_paired(
    row: dict[str, Any], mine: Mapping[str, Any], base: Mapping[str, Any], metric: str
) -> dict[str, Any]:
    """`row` (`improvement.improvement` of the verified means) with its percentage made the
    paired one. Only a row that had a percentage is changed: one with none (a baseline that
    diverged, or broke a constraint) keeps why it has none, and so does one whose results
    hold no per-seed runs to pair (means alone)."""
    if row.get("change_pct") is None or not mine.get("runs") or not base.get("runs"):
        return row
    change = paired_change(mine, base, metric)
    return {**row, **change}
