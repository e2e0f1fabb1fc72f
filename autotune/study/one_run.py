"""The `vs baseline` percentage of one run against one run, and the baseline's noise it is
within.

A pick not verified over seeds (`verify.top_k: 0`, a verification not run yet, a pick tied
within noise) and the screen's best per objective are compared with the baseline on one run
each. A review saw `throughput pick 9682 baseline 7922 (+22.2%)` where the baseline's own
seeds spread from 5583 to 9986: no difference at all. So such a percentage says what noise it
was measured against (`baseline_noise`):

* `seeds`: the baseline ran at that length over several seeds (its verification there, or at
  the screen its yardstick, `autotune.study.yardstick`, each with its run at the probe's
  seed): the pick's run is within noise when it lies where another seed of the baseline may
  fall (`seeds.prediction_interval`: mean ± t·s·√(1 + 1/n), as `autotune migrate` judges a
  run against recorded seeds), the baseline's seed-to-seed spread;
* `timing`: no seeds, but both runs carry their own timing interval (throughput,
  tokens_per_s: `noise.bounds_of`): within noise when they overlap, as the pick ties them
  (`noise.tied`); the seed-to-seed spread was not measured;
* neither: one run against one run, said so.

Within noise (`within_noise: true`) the percentage is no difference: the text says so beside
it, and MLflow gets no `change_pct.<m>`, its tag saying why, as with runs timed apart
(`paired_change`). Values equal within rounding (`noise.same`: the pick is the baseline) need
no such word.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.recipe.seeds import prediction_interval
from autotune.study.noise import bounds_of, overlap, same

#: A baseline's values of one metric at one length: (seed, value), its runs that completed.
Seeded = Sequence[tuple[Any, float]]

NOT_MEASURED = "one run against one run: the baseline's seed-to-seed spread was not measured"


def values_by_metric(
    own: Mapping[str, Any] | None, seed: Any, verified: Mapping[str, Any] | None
) -> dict[str, list[tuple[Any, float]]]:
    """Per metric, the baseline's finite values at one length: its own run there (`own`: its
    metrics when it completed, at the probe's `seed`), then its verification's complete runs
    there (`verified`, `recipe.seeds.summarize_seeds`)."""
    out: dict[str, list[tuple[Any, float]]] = {}
    runs = [(seed, own)] if own is not None else []
    for r in (verified or {}).get("runs") or []:
        if r.get("outcome") == "complete":
            runs.append((r.get("seed"), r.get("metrics") or {}))
    for s, metrics in runs:
        for m, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.setdefault(m, []).append((s, float(v)))
    return out


def yardstick_values(yard: Mapping[str, Any] | None) -> dict[str, list[tuple[Any, float]]]:
    """The baseline's screen values by seed that its yardstick kept (`yardstick.values`)."""
    kept = (yard or {}).get("values") or {}
    return {m: [(s, float(v)) for s, v in pairs] for m, pairs in kept.items()}


def with_noise(
    row: dict[str, Any],
    mine: Mapping[str, Any],
    theirs: Mapping[str, Any],
    values: Seeded | None,
    metric: str,
) -> dict[str, Any]:
    """`row` (`improvement.improvement` of one run each: the pick's metrics `mine`, the
    baseline's `theirs`) with `within_noise` (True, False; None: not measured) and
    `baseline_noise` {`basis` (seeds, timing or None), `low`, `high`, `seeds` or the two
    timing intervals, `note`: the words the text and MLflow's tag use}. A row without a
    percentage, or whose two values are one (`noise.same`), is returned as it is."""
    pct, best, base = row.get("change_pct"), row.get("best"), row.get("baseline")
    if pct is None or best is None or base is None or same(float(best), float(base)):
        return row
    noise = _measured(float(best), mine, theirs, values or (), metric)
    return {**row, "within_noise": noise.pop("within"), "baseline_noise": noise}


def _measured(
    best: float, mine: Mapping[str, Any], theirs: Mapping[str, Any], values: Seeded, metric: str
) -> dict[str, Any]:
    if len(values) >= 2:
        low, high = prediction_interval([v for _, v in values], metric)
        seeds = [s for s, _ in values]
        within = low <= best <= high
        spread = f"the baseline's seed-to-seed spread [{low:.4g}, {high:.4g}] over seeds {seeds}"
        note = f"within {spread}: not a difference" if within else f"beyond {spread}"
        return {
            "within": within,
            "basis": "seeds",
            "low": low,
            "high": high,
            "seeds": seeds,
            "note": note,
        }
    pick_iv, base_iv = bounds_of(mine, metric), bounds_of(theirs, metric)
    if pick_iv is not None and base_iv is not None and overlap(pick_iv, base_iv):
        return {
            "within": True,
            "basis": "timing",
            "pick": list(pick_iv),
            "baseline": list(base_iv),
            "note": (
                f"one run against one run, within their timing noise (pick [{pick_iv[0]:.4g}, "
                f"{pick_iv[1]:.4g}], baseline [{base_iv[0]:.4g}, {base_iv[1]:.4g}]): "
                "not a difference"
            ),
        }
    return {"within": None, "basis": None, "note": NOT_MEASURED}
