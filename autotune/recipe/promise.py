"""What a recipe promised against what `autotune verify` measured here, and which of the seeds
run here its study had run.

A promise verified over seeds is an interval (the mean's, over the study's verification
seeds): the promise held when it and the interval measured here overlap, else the measured one
is better or worse by the metric's direction. A promise measured on one seed (a trial that was
not verified: its own run's value, no interval) is one draw of what a seed gives: it held when
it lies within the two-sided 95% prediction interval of one more seed drawn like the seeds
measured here (`seeds.prediction_interval`: mean ± t(0.975, n-1)·s·√(1 + 1/n), on the log scale
for positive metrics), else it is better or worse by the side it falls on; with fewer than 2
complete seeds here it is not judged. A timed metric (throughput) measured here on one seed is
not judged either: one run's timing interval says nothing of the seed-to-seed and load-to-load
spread the promise was measured over; nor is a timed promise from fewer than
`seeds.MIN_TIMED_SEEDS` seeds (`seeds.too_few_timed`): its interval, from a t with one degree of
freedom, spans so much that nothing measured could break it. The measured side is held to the
same rule: a timed metric measured here over fewer than `seeds.MIN_TIMED_SEEDS` complete seeds
is "too few seeds to tell", never "as promised" (its interval overlaps any promise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.knobs import HARDWARE_METRICS
from autotune.probe.outcome import Outcome
from autotune.recipe.file import Recipe
from autotune.recipe.seeds import (
    MIN_TIMED_SEEDS,
    TIMED,
    interval,
    prediction_interval,
    too_few_timed,
)


def promise_seeds(promised: Mapping[str, Any]) -> int:
    """How many seeds a promise was measured on: its verification's `n`, else 1 (the trial's
    own run). A verification recorded without `n` counts as seeds when it has an interval."""
    ver = promised.get("verified") or {}
    if not ver:
        return 1
    if ver.get("n") is not None:
        return int(ver["n"])
    return 1 if ver.get("low") is None and ver.get("high") is None else 2


def seed_values(measured: Mapping[str, Any], metric: str) -> list[float]:
    """`metric` on each complete seed measured here (the seeds its interval is over)."""
    out = []
    for r in measured.get("runs") or []:
        v = (r.get("metrics") or {}).get(metric)
        if r.get("outcome") == Outcome.COMPLETE and v is not None and math.isfinite(float(v)):
            out.append(float(v))
    return out


def _overlap(promised: Mapping[str, Any], got: Mapping[str, Any], direction: Any) -> str:
    """A promise with an interval against the interval measured: overlap, else by direction."""
    lo = got["low"] if got.get("low") is not None else got["mean"]
    hi = got["high"] if got.get("high") is not None else got["mean"]
    p_mean = promised["mean"]
    plo = promised["low"] if promised["low"] is not None else p_mean
    phi = promised["high"] if promised["high"] is not None else p_mean
    if hi >= plo and phi >= lo:
        return "as promised"
    # a recipe without a direction minimises, as everywhere else
    better = got["mean"] > p_mean if direction == "maximize" else got["mean"] < p_mean
    return "better than promised" if better else "WORSE than promised"


def too_few_measured(metric: str, got: Mapping[str, Any]) -> str | None:
    """The verdict on a timed metric measured here over too few seeds (2 to
    `seeds.MIN_TIMED_SEEDS - 1`, `seeds.too_few_timed`), else None. The measured side is held to
    the promise's rule: two seeds give a t-interval with one degree of freedom, several times
    wider than the promise, which then overlaps whatever the recipe does here ("as promised"
    against [3.6e4, 1.4e5] was a claim nothing measured could have broken)."""
    if too_few_timed(metric, got) is None:
        return None
    lo, hi = got.get("low"), got.get("high")
    span = f"the {metric} interval spans {hi / lo:.3g}x; " if lo and hi and lo > 0 else ""
    return (
        f"too few seeds to tell ({int(got.get('n') or 0)} measured: {span}"
        f"--seeds {MIN_TIMED_SEEDS} or more)"
    )


def _one_seed(
    metric: str, p_mean: float, direction: Any, values: Sequence[float], one_promise: bool
) -> dict[str, Any]:
    """A promise from one seed (or a timed metric measured here on one run) judged against the
    spread of the seeds measured here: the verdict and `one_seed` (what it was judged on)."""
    basis: dict[str, Any] = {
        "promise_seeds": 1 if one_promise else None,
        "measured_seeds": len(values),
        "prediction": None,
    }
    if not one_promise or len(values) < 2:
        why = (
            "a promise from 1 seed"
            if one_promise
            else f"{metric} measured on 1 seed: one run's timing interval"
        )
        return {"verdict": f"not judged ({why})", "one_seed": basis}
    low, high = prediction_interval(values, metric)
    basis["prediction"] = {"low": low, "high": high}
    if low <= p_mean <= high:
        verdict = "as promised"
    else:  # the seeds here sit on the other side of the promise
        better = p_mean < low if direction == "maximize" else p_mean > high
        verdict = "better than promised" if better else "WORSE than promised"
    return {"verdict": verdict, "one_seed": basis}


def compare_promise(
    recipe: Recipe, measured: Mapping[str, Any], same_hardware: bool
) -> list[dict[str, Any]]:
    """Per achieved objective: what the recipe promised, what was measured, and the verdict
    (with `one_seed` when judged by the one-seed rule: see the module)."""
    rows = []
    for metric, promised in recipe.achieved.items():
        got = (measured.get("metrics") or {}).get(metric) or interval([])
        ver = promised.get("verified") or {}
        pr = {"mean": ver.get("mean", promised.get("value")), "low": ver.get("low")}
        pr["high"] = ver.get("high")
        direction = promised.get("direction")
        row: dict[str, Any] = {"verdict": "not measured"}
        if got.get("mean") is not None and pr["mean"] is not None:
            one_promise = promise_seeds(promised) < 2
            if one_promise or (metric in TIMED and (got.get("n") or 0) < 2):
                values = seed_values(measured, metric)
                row = _one_seed(metric, pr["mean"], direction, values, one_promise)
            else:
                wide = too_few_timed(metric, {**pr, "n": promise_seeds(promised)})
                # a promise too wide to break is no promise: not "as promised" against it
                verdict = f"not judged (a promise from {wide})" if wide else None
                row = {"verdict": verdict or too_few_measured(metric, got)}
                row["verdict"] = row["verdict"] or _overlap(pr, got, direction)
            judged = not row["verdict"].startswith(("not judged", "too few seeds"))
            if metric in HARDWARE_METRICS and not same_hardware and judged:
                row["verdict"] += " (other hardware: not comparable)"
        rows.append(
            {
                "metric": metric,
                "direction": direction,
                "promised": pr,
                "measured": dict(got),
                **row,
            }
        )
    divergence = _divergence_promise(recipe, measured)
    return rows + ([divergence] if divergence else [])


def _divergence_promise(recipe: Recipe, measured: Mapping[str, Any]) -> dict[str, Any] | None:
    """The share of seeds that diverged against the share the recipe's verification saw (the
    objectives' intervals cover only the seeds that did not diverge, so "as promised" there says
    nothing of those that did). None when the recipe records no verified share."""
    shares = [(p.get("verified") or {}).get("diverged_share") for p in recipe.achieved.values()]
    promised = next((x for x in shares if x is not None), None)
    got = measured.get("diverged_share")
    if promised is None or got is None:
        return None
    n, failed = int(measured.get("n") or 0), int(measured.get("failed") or 0)
    if n and failed:  # the share among the seeds that ran (a failed seed did not diverge)
        got = None if failed >= n else got * n / (n - failed)
    if got is None:
        verdict = f"not judged: every seed failed ({failed} of {n})"
    elif got >= 1.0:
        verdict = "DIVERGED on every seed"  # never "as promised", whatever was promised
    elif got > promised:
        verdict = "WORSE than promised"
    else:
        verdict = "as promised" if got == promised else "better than promised"
    return {
        "metric": "diverged",
        "direction": "minimize",
        "promised": {"mean": promised, "low": None, "high": None},
        "measured": {"mean": got, "low": None, "high": None},
        "verdict": verdict,
    }


def promise_line(p: Mapping[str, Any], fmt: Any) -> str:
    """One row of the report's promise section (`fmt`: `seeds.format_interval`)."""
    pr = p["promised"]
    if p["metric"] == "diverged":  # a share of seeds, not an interval
        got = p["measured"]["mean"]
        return (
            f"  {'diverged':<14} promised {pr['mean']:.0%} of seeds  measured "
            f"{'n/a' if got is None else format(got, '.0%')}  -> {p['verdict']}"
        )
    line = (
        f"  {p['metric']:<14} promised {fmt(pr)}  measured {fmt(p['measured'])}  -> {p['verdict']}"
    )
    pi = (p.get("one_seed") or {}).get("prediction")
    if pi is not None:
        line += (
            f" (judged from a promise of 1 seed: one more of these "
            f"{p['one_seed']['measured_seeds']} seeds would fall in "
            f"[{pi['low']:.4g}, {pi['high']:.4g}])"
        )
    return line


def recorded_seeds(recipe: Recipe) -> list[int]:
    """The seeds the recipe's study verified it on (none when it was not verified)."""
    for p in recipe.achieved.values():
        seeds = (p.get("verified") or {}).get("seeds")
        if seeds:
            return [int(s) for s in seeds]
    runs = (recipe.recorded.get("verified") or {}).get("runs") or []
    return [int(r["seed"]) for r in runs if r.get("seed") is not None]


def seed_origin(recipe: Recipe, seeds: Sequence[int]) -> dict[str, Any]:
    """Whether `seeds` are the study's own verification seeds of this recipe or fresh ones:
    `own` (its study verified the recipe on them), `probe` (the study's probe seed: the trial's
    own run), `fresh` (neither), `recorded` (the study's verification seeds), `text` (one line)."""
    recorded = recorded_seeds(recipe)
    probe_seed = recipe.probe.get("seed")
    own = [s for s in seeds if s in recorded]
    probe = [s for s in seeds if s not in recorded and s == probe_seed]
    fresh = [s for s in seeds if s not in recorded and s != probe_seed]
    out: dict[str, Any] = {"own": own, "probe": probe, "fresh": fresh, "recorded": recorded}
    head = f"seeds {list(seeds)}: "
    if own and not probe and not fresh:
        nxt = max(100, *[s + 1 for s in recorded])
        out["text"] = head + (
            "the study's own verification seeds (on the same machine they reproduce its "
            f"numbers; --first-seed {nxt} checks on fresh seeds)"
        )
    elif fresh and not own and not probe:
        where = (
            f"the study verified this recipe on seeds {recorded}"
            if recorded
            else f"this recipe was not verified in its study, which ran it on seed {probe_seed}"
            if recipe.source or recipe.achieved
            else "the recipe records no study: nothing to say of its seeds"
        )
        out["text"] = head + f"fresh ({where})"
    else:
        parts = [
            *([f"{own} the study's own verification seeds"] if own else []),
            *([f"{probe} the study's probe seed (the trial's own run)"] if probe else []),
            *([f"{fresh} fresh"] if fresh else []),
        ]
        out["text"] = head + ", ".join(parts)
    return out
