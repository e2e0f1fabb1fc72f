"""The second cheap check of `autotune migrate`: the recipe's run here did not reproduce the
recorded one step for step (the numerics moved: another thread count, BLAS, device), but does it
end where another seed would have ended where it was tuned?

A run whose numbers drift from the recorded ones is, to the training, much what another seed
is: a different trajectory from the same recipe. The study verified the recipe over seeds at
the decided length; export records those runs (`recorded.verified`). When the run here, at the
recipe's own seed, is complete and every compared metric (the final loss and the study's
objectives, not the machine's own throughput, scaling or memory) is no worse than the
one-sided 97.5% prediction bound of one more seed drawn like the recorded ones

    mean + t(0.975, n - 1) * s * sqrt(1 + 1 / n)    (minimised; mean - ... when maximised),

on the log scale for positive quantities, the recipe behaves here as it did there, and the
study's paired verdict against the baseline stands on one probe. Otherwise (or with fewer than
`MIN_SEEDS` recorded seeds: the bound of two seeds is too wide to say anything) the full check
runs: the recipe and the baseline over the seeds, paired.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.outcome import Outcome
from autotune.recipe import paired
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import TIMINGS, prediction_interval

#: Fewer recorded seeds than this and the spread is not judged (n = 2: the bound is the mean
#: plus 15.6 standard deviations, estimated from two values).
MIN_SEEDS = 3
#: What the machine decides rather than the recipe: never compared with the recorded seeds.
MACHINE_METRICS = (*TIMINGS, "peak_mem_mb")


def bound(values: Sequence[float], direction: str, metric: str) -> float:
    """The one-sided 97.5% prediction bound of one more value drawn like `values` (n >= 2):
    the worst it may be and still look like another seed (an end of
    `seeds.prediction_interval`)."""
    low, high = prediction_interval(values, metric)
    return high if direction == "minimize" else low


def recorded_seeds(recipe: Recipe, steps: int) -> tuple[list[dict[str, Any]], str | None]:
    """The recipe's complete verified runs at `steps` and None, or [] and why there is no spread
    to judge a run by (none recorded, another length, fewer than `MIN_SEEDS`): asked before a
    probe is run for it."""
    rec = recipe.recorded.get("verified") or {}
    if rec.get("steps") != steps:
        got = rec.get("steps")
        why = (
            "the recipe records no verified seeds"
            if not rec
            else f"its verified seeds ran {got} steps, not the {steps} checked"
        )
        return [], why
    ok = [r for r in rec.get("runs") or [] if r.get("outcome") == Outcome.COMPLETE]
    if len(ok) < MIN_SEEDS:
        return [], f"the recipe records {len(ok)} complete verified seed(s), fewer than {MIN_SEEDS}"
    return ok, None


def within_spread(recipe: Recipe, run: Mapping[str, Any] | None, steps: int) -> dict[str, Any]:
    """Whether `run` (the recipe here, at its seed, `steps` long) ends within the spread of the
    recipe's verified seeds where it was tuned: `within`, `why`, per metric `rows` (here, the
    recorded values, the bound, within)."""
    ok, why = recorded_seeds(recipe, steps)
    if why is not None:
        return {"within": False, "why": why, "rows": {}}
    run = run or {}
    if run.get("outcome") != Outcome.COMPLETE:
        return {"within": False, "why": f"the run here ended {run.get('outcome')}", "rows": {}}
    here = (run.get("summary") or {}).get("metrics") or {}
    objectives = [
        {"metric": m, "direction": p.get("direction", "minimize")}
        for m, p in recipe.achieved.items()
    ]
    rows: dict[str, Any] = {}
    for metric, direction in paired.compared_metrics(objectives):
        if metric in MACHINE_METRICS:
            continue
        xs = [r["metrics"][metric] for r in ok if metric in r["metrics"]]
        x = here.get(metric)
        if x is None or not math.isfinite(float(x)) or len(xs) < MIN_SEEDS:
            rows[metric] = {"here": x, "recorded": xs, "bound": None, "within": False}
            continue
        b = bound(xs, direction, metric)
        inside = float(x) <= b if direction == "minimize" else float(x) >= b
        rows[metric] = {"here": float(x), "recorded": xs, "bound": b, "within": inside}
    out = [m for m, r in rows.items() if not r["within"]]
    if not rows or out:
        why = "; ".join(_outside(m, rows[m]) for m in out) or "no metric to compare"
        return {"within": False, "why": why, "rows": rows}
    seeds = [r.get("seed") for r in ok]
    why = (
        f"the run here ends within the spread of the recipe's {len(ok)} verified seeds "
        f"{seeds} where it was tuned: "
        + ", ".join(f"{m} {_g(r['here'])} (bound {_g(r['bound'])})" for m, r in rows.items())
    )
    return {"within": True, "why": why, "rows": rows}


def _outside(metric: str, row: Mapping[str, Any]) -> str:
    if row["bound"] is None:
        return f"{metric} could not be compared ({len(row['recorded'])} recorded value(s))"
    return (
        f"{metric} {_g(row['here'])} is past the bound {_g(row['bound'])} of the recorded seeds "
        f"({', '.join(_g(v) for v in row['recorded'])})"
    )


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"
