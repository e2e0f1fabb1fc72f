"""What a recipe promised against what `autotune verify` measured here, and which of the seeds
run here its study had run.

A promise verified over seeds is an interval (the mean's, over the study's verification
seeds), and so is what is measured here: the promise is judged by the interval of the
difference between the two means, Welch's t interval from each side's mean, interval and
number of seeds (`unpaired.difference`: each side's standard error read back from its
interval; on the log scale, a ratio measured / promised, for a positive metric, as the paired
verdict judges a ratio). It held ("as promised") when that interval includes no difference (a
ratio of 1, a difference of 0), else the measured mean is better or worse than promised by the
metric's direction; the line gives the interval (`as promised (x1.04 [x0.81, x1.33])`). Each
metric's interval is at the level the paired verdict uses for as many metrics
(`paired.family_level`: 95% for one, 98.3% each for three), so that a recipe that keeps every
promise is not called worse on one of three by chance one time in seven. Two overlapping 95%
intervals were the old rule: over 2 seeds (a t with one degree of freedom, the mean ± 12.7
standard errors) the measured one overlapped nearly any promise, and over more seeds two
overlapping intervals still let through a difference their difference's interval excludes.

Either side over fewer than `seeds.MIN_TIMED_SEEDS` (3) seeds is not judged, for every metric
as for throughput: a promise from 2 seeds is `not judged (a promise from 2 seeds: ...)`, a
measurement here over 1 or 2 complete seeds (`--seeds 2`, or 3 of which one diverged) is "too
few seeds to tell", never "as promised" (an interval with one degree of freedom holds what any
recipe does) and never a reason to exit 1. Three seeds a side give a difference's interval of
2 degrees of freedom or more (t <= 4.3 rather than 12.7): enough to tell a twofold change in a
metric whose seeds spread by tens of percent, which is what a promise is about. Where they
still cannot (a ratio's interval that reaches half or twice the promise, `TWOFOLD`: three seeds
of which one spiked, x6.55 [x0.112, x382]) it is "too few seeds to tell" too, not "as
promised": such an interval holds no change only because it holds nearly every one. A
difference (a metric that can be 0 or less) has no scale to call twofold; its interval is
printed beside the verdict, as every judged one is.

A promise measured on one seed (a trial that was not verified: its own run's value, no
interval) is one draw of what a seed gives: it held when it lies within the two-sided 95%
prediction interval of one more seed drawn like the seeds measured here
(`seeds.prediction_interval`: mean ± t(0.975, n-1)·s·√(1 + 1/n), on the log scale for positive
metrics), else it is better or worse by the side it falls on; with fewer than 2 complete seeds
here it is not judged, and where that interval reaches half or twice the promise (a positive
metric: 3 seeds of a noisy one gave [x0.16, x22]) it is "too few seeds to tell", as a
difference's interval that wide is. A timed metric (throughput) measured here on one seed is
not judged either: one run's timing interval says nothing of the seed-to-seed and load-to-load
spread the promise was measured over.

The share of seeds that diverged is judged against the share promised by Fisher's exact test
(`divergence_chance.share_test`: the study's verification seeds and the seeds that ran here are
different seeds), at 95%: "WORSE than promised" or "better than promised" only beyond chance
(`WORSE than promised (4 of 5 here vs 0 of 10 promised: beyond chance, p = 0.0037)`), else "as
promised (1 of 5 here vs 0 of 3 promised: within chance, p = 1)", "too few seeds to tell" (under
3 seeds ran here) or "not judged" (a promise from under 3 seeds, or without its seeds), none a
reason to exit 1; an equal share is judged so too (0% over 2 seeds read "as promised"). A recipe
that diverged on every seed here is "DIVERGED on every seed", whatever it promised and whatever
the test says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.knobs import HARDWARE_METRICS
from autotune.probe.outcome import Outcome
from autotune.recipe.divergence_chance import beyond, promised_seeds, share_test
from autotune.recipe.file import Recipe
from autotune.recipe.paired import family_level
from autotune.recipe.seeds import (
    MIN_TIMED_SEEDS,
    TIMED,
    interval,
    prediction_interval,
    span_text,
    too_few_seeds,
)
from autotune.recipe.unpaired import difference, difference_text, no_change
from autotune.space import POSITIVE_METRICS


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


def _by_difference(diff: Mapping[str, Any], direction: Any) -> str:
    """The verdict of the difference's interval (`unpaired.difference`, measured against
    promised): as promised when it holds no change, else by the metric's direction."""
    none = no_change(diff)
    if diff["low"] <= none <= diff["high"]:
        return "as promised"
    # a recipe without a direction minimises, as everywhere else
    higher = diff["low"] > none
    better = higher if direction == "maximize" else not higher
    return "better than promised" if better else "WORSE than promised"


#: The change a promise's "as promised" must be able to tell, as a ratio: one whose interval
#: of measured / promised reaches half or twice the promise (3 seeds of a recipe that spikes on
#: one: x6.55 [x0.112, x382]) holds no change only because it holds nearly every one.
TWOFOLD = 2.0


def _twofold(low: float, high: float) -> bool:
    """Whether a ratio's interval [low, high] reaches half or `TWOFOLD` times."""
    return low <= 1 / TWOFOLD or high >= TWOFOLD


def too_wide(diff: Mapping[str, Any]) -> bool:
    """Whether a ratio's interval (`unpaired.difference` on the log scale) reaches a
    `TWOFOLD` change either way. A difference (a metric that can be 0 or less) has no scale
    to call twofold: its interval is printed, as it is."""
    return diff.get("scale") == "log" and _twofold(diff["low"], diff["high"])


def measured_seeds(got: Mapping[str, Any]) -> int:
    """How many seeds the interval measured here is over (one without an end: one seed's)."""
    if got.get("low") is None and got.get("high") is None:
        return min(1, int(got.get("n") or 0))
    return int(got.get("n") or 0)


def too_few_measured(metric: str, got: Mapping[str, Any]) -> str | None:
    """The verdict on a metric measured here over too few complete seeds (1 to
    `seeds.MIN_TIMED_SEEDS - 1`), else None. The measured side is held to the promise's rule:
    two seeds give a t-interval with one degree of freedom, several times wider than the
    promise ("as promised" against [3.6e4, 1.4e5] was a claim nothing measured could have
    broken), and one seed no interval at all."""
    n = measured_seeds(got)
    if n >= MIN_TIMED_SEEDS:
        return None
    span = span_text(metric, got) if n >= 2 else ""
    span = f"{span}; " if span else ""
    return f"too few seeds to tell ({n} measured: {span}--seeds {MIN_TIMED_SEEDS} or more)"


def too_few_promised(metric: str, promised: Mapping[str, Any]) -> str | None:
    """Why a promise verified over seeds cannot be judged (its seeds too few, their count or
    its interval not recorded), else None."""
    ver = promised.get("verified") or {}
    if ver.get("n") is None:
        return f"not judged (a promise without its number of seeds: achieved.{metric}.verified.n)"
    n = promise_seeds(promised)
    if ver.get("low") is None and ver.get("high") is None:
        return f"not judged (a promise of {n} seeds without its interval)"
    wide = too_few_seeds(metric, {**ver, "n": n})
    # a promise too wide to break is no promise: not "as promised" against it
    return f"not judged (a promise from {wide})" if wide else None


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
        if metric in POSITIVE_METRICS and p_mean > 0 and _twofold(low / p_mean, high / p_mean):
            # one more seed could be half or twice the promise: that holds nearly any promise
            verdict = (
                "too few seeds to tell (one seed's spread here reaches half or twice the "
                f"promise: a {TWOFOLD:g}-fold change cannot be told)"
            )
    else:  # the seeds here sit on the other side of the promise
        better = p_mean < low if direction == "maximize" else p_mean > high
        verdict = "better than promised" if better else "WORSE than promised"
    return {"verdict": verdict, "one_seed": basis}


def compare_promise(
    recipe: Recipe, measured: Mapping[str, Any], same_hardware: bool
) -> list[dict[str, Any]]:
    """Per achieved objective: what the recipe promised, what was measured, and the verdict
    (with `one_seed` when judged by the one-seed rule, `difference` when judged by the
    difference's interval: see the module)."""
    rows: list[dict[str, Any]] = []
    pending: list[tuple[int, int]] = []
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
                row = {"verdict": too_few_promised(metric, promised)}
                row["verdict"] = row["verdict"] or too_few_measured(metric, got)
                if row["verdict"] is None:  # judged below, at the level of as many metrics
                    pending.append((len(rows), promise_seeds(promised)))
        rows.append(
            {
                "metric": metric,
                "direction": direction,
                "promised": pr,
                "measured": dict(got),
                **row,
            }
        )
    level = family_level([rows[i]["metric"] for i, _ in pending])
    for i, n in pending:
        row = rows[i]
        got = row["measured"]
        diff = difference(row["metric"], got, measured_seeds(got), row["promised"], n, level)
        if diff is None:  # not reached: both sides have an interval over 3 seeds or more
            row["verdict"] = "not judged (no interval to compare)"
            continue
        row["difference"] = diff
        row["verdict"] = _by_difference(diff, row["direction"])
        if row["verdict"] == "as promised" and too_wide(diff):
            row["verdict"] = (
                f"too few seeds to tell ({measured_seeds(got)} measured: "
                f"{difference_text(diff)} cannot tell a {TWOFOLD:g}-fold change; more seeds "
                "narrow it)"
            )
    for row in rows:
        judged = row["verdict"].startswith(("as promised", "better", "WORSE"))
        if row["metric"] in HARDWARE_METRICS and not same_hardware and judged:
            row["verdict"] += " (other hardware: not comparable)"
    divergence = _divergence_promise(recipe, measured)
    return rows + ([divergence] if divergence else [])


def _divergence_promise(recipe: Recipe, measured: Mapping[str, Any]) -> dict[str, Any] | None:
    """The share of seeds that diverged against the share the recipe's verification saw (the
    objectives' intervals cover only the seeds that did not diverge, so "as promised" there says
    nothing of those that did), judged against chance (`divergence_chance.share_test`: two
    shares of different seeds). None when the recipe records no verified share."""
    vers = [(m, p.get("verified") or {}) for m, p in recipe.achieved.items()]
    metric, ver = next(((m, v) for m, v in vers if v.get("diverged_share") is not None), ("", {}))
    got = measured.get("diverged_share")
    if not ver or got is None:
        return None
    promised = float(ver["diverged_share"])
    n, failed = int(measured.get("n") or 0), int(measured.get("failed") or 0)
    if n and failed:  # the share among the seeds that ran (a failed seed did not diverge)
        got = None if failed >= n else got * n / (n - failed)
    row: dict[str, Any] = {
        "metric": "diverged",
        "direction": "minimize",
        "promised": {"mean": promised, "low": None, "high": None},
        "measured": {"mean": got, "low": None, "high": None},
    }
    if got is None:
        row["verdict"] = f"not judged: every seed failed ({failed} of {n})"
    elif got >= 1.0:
        row["verdict"] = "DIVERGED on every seed"  # never "as promised", whatever was promised
    else:  # an equal share too: "as promised" only over enough seeds on both sides
        row.update(_shares_judged(metric, ver, got, n - failed))
    return row


def _shares_judged(metric: str, ver: Mapping[str, Any], got: float, ran: int) -> dict[str, Any]:
    """The verdict on a measured share of diverged seeds (`got` of the `ran` seeds that ran)
    against the one promised (`ver`, `metric`'s verification): worse or better only beyond
    chance, with the counts and the p; else more than promised within chance (more diverged
    here, not beyond chance: no exit 1, but not "as promised"), as promised (fewer, within
    chance), or too few seeds to tell."""
    n_prom, promised = promised_seeds(ver), float(ver["diverged_share"])
    if ran <= 0:  # a measurement without its number of seeds (`n`)
        return {"verdict": "not judged (the number of seeds measured here is not recorded)"}
    if n_prom is None:
        where = f"achieved.{metric}.verified.seeds"
        return {"verdict": f"not judged (a promise without its number of seeds: {where})"}
    k, k_prom = round(got * ran), round(promised * n_prom)
    p = share_test(k, ran, k_prom, n_prom)
    counts = f"{k} of {ran} here vs {k_prom} of {n_prom} promised"
    out: dict[str, Any] = {"p": p, "beyond_chance": beyond(p)}
    out["measured_seeds"], out["promise_seeds"] = ran, n_prom
    if beyond(p):
        words = "WORSE than promised" if got > promised else "better than promised"
        out["verdict"] = f"{words} ({counts}: beyond chance, p = {p:.2g})"
    elif ran < MIN_TIMED_SEEDS:
        out["verdict"] = f"too few seeds to tell ({counts}; --seeds {MIN_TIMED_SEEDS} or more)"
    elif n_prom < MIN_TIMED_SEEDS:
        out["verdict"] = f"not judged (a promise from {n_prom} seeds: {counts})"
    elif got > promised:  # not shown worse, but not the promise either: said as it is
        out["verdict"] = f"more than promised, within chance ({counts}: p = {p:.2g})"
    else:
        out["verdict"] = f"as promised ({counts}: within chance, p = {p:.2g})"
    return out


def promise_line(p: Mapping[str, Any], fmt: Any) -> str:
    """One row of the report's promise section (`fmt`: `seeds.format_interval`)."""
    pr = p["promised"]
    if p["metric"] == "diverged":  # a share of seeds, not an interval
        got = p["measured"]["mean"]
        return (
            f"  {'diverged':<14} promised {pr['mean']:.0%} of seeds  measured "
            f"{'n/a' if got is None else format(got, '.0%')}  -> {p['verdict']}"
        )
    verdict, diff = p["verdict"], p.get("difference")
    if diff is not None and not verdict.startswith(
        "too few seeds"
    ):  # that one says it  # the interval after the verdict's words, before any note on them
        words, sep, note = verdict.partition(" (")
        verdict = f"{words} ({difference_text(diff)}){sep}{note}"
    line = f"  {p['metric']:<14} promised {fmt(pr)}  measured {fmt(p['measured'])}  -> {verdict}"
    pi = (p.get("one_seed") or {}).get("prediction")
    if pi is not None:
        line += (
            f" (judged from a promise of 1 seed: one more of these "
            f"{p['one_seed']['measured_seeds']} seeds would fall in "
            f"[{pi['low']:.4g}, {pi['high']:.4g}])"
        )
    return line


def promise_header(rows: Sequence[Mapping[str, Any]]) -> str:
    """The line above the promise's rows: what their intervals are, when judged by one (the
    level, when not 95%: the metrics judged share the error, `paired.family_level`)."""
    diffs = [r["difference"] for r in rows if r.get("difference")]
    if not diffs:
        return "against the recipe's promise:"
    level, n = diffs[0]["level"], len(diffs)
    at = f"each interval at {level:.1%}: {n} metrics judged" if n > 1 else f"{level:.0%} interval"
    return f"against the recipe's promise (measured against promised, {at}):"


def recorded_seeds(recipe: Recipe) -> list[int]:
    """The seeds the recipe's study verified it on (none when it was not verified)."""
    for p in recipe.achieved.values():
        seeds = (p.get("verified") or {}).get("seeds")
        if seeds:
            return [int(s) for s in seeds]
    runs = (recipe.recorded.get("verified") or {}).get("runs") or []
    return [int(r["seed"]) for r in runs if r.get("seed") is not None]


def seed_origin(recipe: Recipe, seeds: Sequence[int], unlike: str | None = None) -> dict[str, Any]:
    """Whether `seeds` are the study's own verification seeds of this recipe or fresh ones:
    `own` (its study verified the recipe on them), `probe` (the study's probe seed: the trial's
    own run), `fresh` (neither), `recorded` (the study's verification seeds), `text` (one line).
    `unlike`: how these runs differ from the study's (another length, an edited recipe), where
    its own seeds then do not reproduce its numbers."""
    recorded = recorded_seeds(recipe)
    probe_seed = recipe.probe.get("seed")
    own = [s for s in seeds if s in recorded]
    probe = [s for s in seeds if s not in recorded and s == probe_seed]
    fresh = [s for s in seeds if s not in recorded and s != probe_seed]
    out: dict[str, Any] = {"own": own, "probe": probe, "fresh": fresh, "recorded": recorded}
    head = f"seeds {list(seeds)}: "
    if own and not probe and not fresh:
        nxt = max(100, *[s + 1 for s in recorded])
        same = (
            f"{unlike}, so they do not reproduce its numbers"
            if unlike
            else "on the same machine they reproduce its numbers"
        )
        out["text"] = head + (
            f"the study's own verification seeds ({same}; --first-seed {nxt} checks on fresh seeds)"
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
