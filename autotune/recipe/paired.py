"""A configuration against the baseline over the same seeds (same data order): the paired
verdict.

Both ran at the same seeds and length. Per compared metric (the final loss, and the study's
objectives), the per-seed difference configuration - baseline over the seeds where both ran
their whole length with a finite value (`seeds.paired`: mean and 95% t interval of the mean
difference); and the share of seeds each diverged on. A quantity that is never zero or negative
(`POSITIVE_METRICS`: the final loss, noise_per_drop, throughput, ...) is judged by its per-seed
ratio, on the log scale (the `ratio`: geometric mean of configuration / baseline and its 95%
interval), as its intervals over seeds are: a loss 20x lower on every seed is a difference
whatever the baseline's spread, where the raw differences of a few seeds would drown it. A
metric's verdict is `better` or `worse` when the interval excludes no change (0, or a ratio of
1) by the metric's direction, else `no detectable difference` (also with a single pair: one
seed shows no noise). The overall verdict:

- `worse`: it diverged on more seeds than the baseline beyond chance (`divergence_chance`: the
  sign test over the seeds exactly one side diverged on, or it diverged on every seed), or is
  worse on a metric and better on none (a configuration that diverges more often is never
  better);
- `better`: no metric worse, and better on one, or it diverged on fewer seeds beyond chance;
- `mixed`: better on one metric, worse on another (a trade-off: the per-metric rows say which);
- `no detectable difference`: none of these; the simpler configuration (the defaults) is then
  preferred;
- `not compared`: nothing to compare with (no baseline run at these seeds, or the
  configuration is the baseline itself).

A divergence difference within chance (1 of 3 seeds against 0: one seed) decides nothing, and
the verdict falls to the metrics; it is never hidden: `why` ends with it (`diverged on 1 of 3
seeds, the baseline on 0: not beyond chance over 3 seeds (p = 1; ...)`), and `diverged` holds
the counts, the discordant seeds, `p`, `beyond_chance` and `decides`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.knobs import HARDWARE_METRICS
from autotune.probe.outcome import Outcome
from autotune.recipe import completed
from autotune.recipe.divergence_chance import chance_text, counts_text, decides, paired_divergence
from autotune.recipe.intervals import same_seed_intervals
from autotune.recipe.paired_line import format_line as format_line
from autotune.recipe.seed_effect import ignored_text
from autotune.recipe.seeds import (
    RAN_ON_METRICS,
    TIMINGS,
    counts_for,
    finite_pairs,
    interval,
    metric_interval,
    paired,
    ran_whole,
    timing_where,
)
from autotune.space import POSITIVE_METRICS

VERDICTS = ("better", "no detectable difference", "worse", "mixed", "not compared")
PREFER_DEFAULTS = ("no detectable difference", "worse")  # the named picks then take the defaults


def _by_seed(result: Mapping[str, Any]) -> dict[Any, Mapping[str, Any]]:
    return {r.get("seed"): r for r in result.get("runs") or []}


def _whole(row: Mapping[str, Any]) -> bool:
    """A seed whose final numbers are real: complete, or labelled diverged but run whole."""
    if row.get("outcome") == Outcome.COMPLETE:
        return True
    return row.get("outcome") == Outcome.DIVERGED and ran_whole(row)


def _value(row: Mapping[str, Any] | None, metric: str) -> float | None:
    """`metric` of a seed's run where it counts (`seeds.counts_for`: a diverged run that ran
    on counts for its final loss alone), else None."""
    if row is None or not counts_for(row, metric):
        return None
    v = (row.get("metrics") or {}).get(metric)
    return None if v is None else float(v)


def metric_verdict(diff: Mapping[str, Any], direction: str) -> str:
    """`better`, `worse` or `no detectable difference` from a paired difference's interval."""
    low, high = diff.get("low"), diff.get("high")
    if low is None or high is None:
        return "no detectable difference"
    lower_is_better = direction == "minimize"
    if high < 0:
        return "better" if lower_is_better else "worse"
    if low > 0:
        return "worse" if lower_is_better else "better"
    return "no detectable difference"


def paired_ratio(
    xs: Sequence[float | None], ys: Sequence[float | None], level: float = 0.95
) -> dict[str, Any] | None:
    """The paired comparison on the log scale: per seed log(x / y), the interval of its mean
    mapped back to a ratio (`mean`: the geometric mean of x / y; `low`, `high`; `n`; with one
    pair no interval). None when a pair holds a value <= 0 (no ratio; the difference judges)."""
    pairs = finite_pairs(xs, ys)
    if not pairs or any(x <= 0 or y <= 0 for x, y in pairs):
        return None
    logs = interval([math.log(x / y) for x, y in pairs], level=level)
    back = {k: None if logs[k] is None else math.exp(logs[k]) for k in ("mean", "low", "high")}
    return {**back, "n": logs["n"], "scale": "log"}


def _judged(diff: Mapping[str, Any], ratio: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the metric's verdict reads: the ratio's interval as log(ratio) (no change: 0), else
    the difference's."""
    if ratio is None:
        return dict(diff)
    return {k: None if ratio[k] is None else math.log(ratio[k]) for k in ("low", "high")}


def _diverged(row: Mapping[str, Any]) -> bool:
    return row.get("outcome") == Outcome.DIVERGED


def compare(
    mine: Mapping[str, Any] | None,
    base: Mapping[str, Any] | None,
    metrics: Sequence[tuple[str, str]],
    *,
    same: bool = False,
    among: int = 1,
) -> dict[str, Any]:
    """The paired verdict of `mine` against `base` (both `seeds.summarize_seeds` results at the
    same length); `metrics`: (metric, direction) pairs to compare; `same`: `mine` is the
    baseline itself; `among`: the configurations `mine` was chosen among on these very seeds,
    over which the error is shared too (`study.confirmed`). Each side's interval of a metric is
    its own summary's wherever the paired values are over the same seeds
    (`intervals.same_seed_intervals`).
    Seeds whose runs are identical (`seed_effect`) give no verdict: `not compared`, said why."""
    ignored = _seed_ignored(mine, base)
    if ignored is not None:
        return ignored
    out = _compare(mine, base, metrics, same=same, among=among)
    if mine is not None and base is not None and not same:
        out = same_seed_intervals(out, mine, base)
    return out


def _seed_ignored(
    mine: Mapping[str, Any] | None, base: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The verdict when either side's seeds ran identically (the workload ignores its seed):
    zero-width intervals whose ratio would read as a certain difference, no evidence at all.
    None when the seeds varied (or a side did not run)."""
    for side in (mine, base):
        seeds = list((side or {}).get("seed_ignored") or [])
        if seeds:
            both = [s for s in _by_seed(mine or {}) if s in _by_seed(base or {})]
            return {
                "verdict": "not compared",
                "seeds": both,
                "metrics": {},
                "diverged": None,
                "seed_ignored": seeds,
                "why": f"no verdict: {ignored_text(seeds)}",
            }
    return None


def _compare(
    mine: Mapping[str, Any] | None,
    base: Mapping[str, Any] | None,
    metrics: Sequence[tuple[str, str]],
    *,
    same: bool = False,
    among: int = 1,
) -> dict[str, Any]:
    out: dict[str, Any] = {"verdict": "not compared", "seeds": [], "metrics": {}, "diverged": None}
    if same:
        out["why"] = "it is the baseline (PyTorch's defaults): nothing to compare with"
        return out
    if not mine or not base:
        out["why"] = "the baseline was not run at these seeds and this length"
        return out
    a, b = _by_seed(mine), _by_seed(base)
    seeds = [s for s in a if s in b]
    out["seeds"] = seeds
    if not seeds:
        out["why"] = "the baseline was run at other seeds: no pair to compare"
        return out
    div = paired_divergence(
        [_diverged(a[s]) for s in seeds], [_diverged(b[s]) for s in seeds], family_level([])
    )
    out["diverged"] = div
    # The seeds whose runs both ran whole: what the metrics are compared over (a seed that
    # failed or stopped on either side is in `seeds`, for the divergence counts, not here).
    out["compared_seeds"] = [s for s in seeds if _whole(a[s]) and _whole(b[s])]
    better: list[str] = []
    worse: list[str] = []
    paired_n = 0  # the seeds a metric was compared over (both ran whole, finite)
    unpaired: list[str] = []  # timed metrics with no pair measured together
    # metrics other than the final loss with no seed completed on both sides: why, if so
    unfinished = completed.none_completed(a, b, seeds)
    not_completed: list[str] = []
    # Per metric, its values on the seeds paired for it (a timed metric: only those timed
    # together); the metrics measured on both sides share the verdict's error (`family`).
    values = {m: _metric_values(a, b, seeds, m) for m, _ in metrics}
    judged = family(a, b, seeds, metrics)
    level = family_level(judged, among)
    out["level"], out["judged_metrics"] = level, len(judged)
    for metric, direction in metrics:
        apart, xs, ys = values[metric]
        row = _metric_row(metric, direction, xs, ys, level)
        diff, v = row["difference"], row["verdict"]
        if apart:
            row["apart_seeds"] = apart
            row["apart"] = apart_text(a, b, apart)
            if not diff.get("n"):
                row["verdict"] = v = "not compared"
                unpaired.append(metric)
        elif unfinished and metric not in RAN_ON_METRICS:
            row["verdict"] = v = "not compared"
            row["not_completed"] = unfinished
            not_completed.append(metric)
        out["metrics"][metric] = row
        paired_n = max(paired_n, int(diff.get("n") or 0))
        (better if v == "better" else worse if v == "worse" else []).append(metric)
    out["better_on"], out["worse_on"] = better, worse
    if not out["compared_seeds"] and not decides(div):
        # Nothing ran whole on both sides and neither diverged more beyond chance: no evidence
        # either way (e.g. every seed failed here, the baseline's too: the machine, not the
        # recipe).
        out["verdict"] = "not compared"
        ended = completed.unfinished(a, b, seeds)
        out["why"] = "no seed ran its whole length on both sides: " + ended
    else:
        out["verdict"], out["why"] = _decide(div, better, worse)
        if out["verdict"] == "no detectable difference":
            out["why"] = _tie_text(metrics, values, [*unpaired, *not_completed], paired_n)
    if div["pick_seeds"] != div["baseline_seeds"] and not decides(div):
        # not a reason either way, never hidden
        out["why"] += f"; {counts_text(div)}: {chance_text(div)}"
    if out["verdict"] == "not compared":
        return out
    if not_completed:
        out["why"] = out.get("why", "") + f"; {', '.join(not_completed)} not compared: {unfinished}"
    if unpaired:
        out["why"] = out.get("why", "") + (
            f"; {', '.join(unpaired)} not compared: " + out["metrics"][unpaired[0]]["apart"]
        )
    return out


def _decide(div: Mapping[str, Any], better: list[str], worse: list[str]) -> tuple[str, str]:
    """The overall verdict and why, from the metrics better and worse and the divergence
    (`divergence_chance`: it counts only where it decides, beyond chance or on every seed)."""
    k, b = div["pick_seeds"], div["baseline_seeds"]
    more, fewer = decides(div) and k > b, decides(div) and k < b
    if more:
        return "worse", f"{counts_text(div)} ({chance_text(div)})"
    if worse and not better and not fewer:
        return "worse", f"worse than the baseline on {', '.join(worse)}"
    if worse:
        gains = [*better, *(["divergence"] if fewer else [])]
        return "mixed", f"better on {', '.join(gains)}, worse on {', '.join(worse)}"
    if better or fewer:
        shown = f"diverged on {k} vs {b} seeds ({chance_text(div)})"
        return (
            "better",
            f"better than the baseline: {', '.join([*better, *([shown] if fewer else [])])}",
        )
    return "no detectable difference", ""


def _metric_row(
    metric: str, direction: str, xs: list[float | None], ys: list[float | None], level: float
) -> dict[str, Any]:
    """One metric's row: the paired difference (and ratio, for a positive metric), each side's
    interval over its values, and the verdict they give."""
    diff = paired(xs, ys, level)
    ratio = paired_ratio(xs, ys, level) if metric in POSITIVE_METRICS else None
    return {
        "direction": direction,
        "difference": {k: diff.get(k) for k in ("mean", "low", "high", "n")},
        **({"ratio": ratio} if ratio is not None else {}),
        "level": level,
        "pick": metric_interval(xs, metric),
        "baseline": metric_interval(ys, metric),
        "verdict": metric_verdict(_judged(diff, ratio), direction),
    }


def _tie_text(
    metrics: Sequence[tuple[str, str]],
    values: Mapping[str, tuple[Any, list[Any], list[Any]]],
    unpaired: Sequence[str],
    paired_n: int,
) -> str:
    """ "no difference beyond the seed noise": over the metrics compared (a finite pair at
    least), not every one asked for; those with no finite pair named as not compared."""
    had = {m for m, (_, xs, ys) in values.items() if finite_pairs(xs, ys)}
    shown = [m for m, _ in metrics if m in had and m not in unpaired]
    lacking = [m for m, _ in metrics if m not in had and m not in unpaired]
    return (
        f"no difference beyond the seed noise over {_seeds_text(paired_n)} "
        f"({', '.join(shown) or 'no metric with a finite pair'})"
        + (f"; {', '.join(lacking)} not compared: no finite pair" if lacking else "")
    )


def _metric_values(
    a: Mapping[Any, Mapping[str, Any]],
    b: Mapping[Any, Mapping[str, Any]],
    seeds: Sequence[Any],
    metric: str,
) -> tuple[list[Any], list[float | None], list[float | None]]:
    """(the seeds left out as timed apart, the configuration's values, the baseline's) of
    `metric` on the seeds paired for it (a timed metric: those timed together)."""
    apart = _apart(a, b, seeds) if metric in TIMINGS else []
    use = [s for s in seeds if s not in apart]
    return apart, [_value(a[s], metric) for s in use], [_value(b[s], metric) for s in use]


def paired_values(
    mine: Mapping[str, Any], base: Mapping[str, Any], metric: str
) -> tuple[list[Any], list[Any], list[float | None], list[float | None]]:
    """(the seeds paired for `metric`, those left out as timed apart, the configuration's
    values on the paired seeds, the baseline's) by the verdict's own rule (`compare`): the
    seeds both ran, a timed metric's only those timed together; a value only where its run ran
    whole. What a figure beside the verdict is computed from, so that it says what the
    verdict saw."""
    a, b = _by_seed(mine), _by_seed(base)
    seeds = [s for s in a if s in b]
    apart, xs, ys = _metric_values(a, b, seeds, metric)
    return [s for s in seeds if s not in apart], apart, xs, ys


FAMILY_ERROR = 0.05
"""The chance, over every metric one verdict compares, that any of them reads `better` or
`worse` when none differs: each metric's interval is at 1 - FAMILY_ERROR / m (Bonferroni) for
m metrics judged, so three metrics are each judged at 98.3%, not 95% (at 95% each, one of three
equal metrics would read a difference about one time in seven)."""


def family(
    a: Mapping[Any, Mapping[str, Any]],
    b: Mapping[Any, Mapping[str, Any]],
    seeds: Sequence[Any],
    metrics: Sequence[tuple[str, str]],
) -> list[str]:
    """The metrics whose intervals share the verdict's error: each measured (a finite value on
    both sides) on 2 seeds or more, however its runs were timed. A timed metric whose pairs
    were timed apart is not compared (`_apart`) but still counts here: the level of the final
    loss is then the same in a study, which times the baseline beside the top rung, as in
    `autotune verify` over the same runs, which times both interleaved (a black-box review:
    the same final losses read BETTER at 97.5% in the study, NO DETECTABLE DIFFERENCE at 98.3%
    in verify)."""
    out = []
    for metric, _ in metrics:
        xs = [_value(a[s], metric) for s in seeds]
        ys = [_value(b[s], metric) for s in seeds]
        if len(finite_pairs(xs, ys)) >= 2:
            out.append(metric)
    return out


def family_level(judged: Sequence[str], among: int = 1) -> float:
    """The confidence of each metric's interval when `judged` are compared at once, for a
    configuration chosen `among` others on the same seeds."""
    return 1.0 - FAMILY_ERROR / (max(1, len(judged)) * max(1, among))


def _group(row: Mapping[str, Any]) -> str | None:
    return row.get("timing_group")


def _apart(
    a: Mapping[Any, Mapping[str, Any]], b: Mapping[Any, Mapping[str, Any]], seeds: Sequence[Any]
) -> list[Any]:
    """The seeds whose two runs were not measured together (different `timing_group`s: e.g. the
    baseline's beside the top rung, the configuration's in the verification phase): a timed
    metric's difference there is as much the machine's load as the configuration."""
    return [s for s in seeds if _group(a[s]) != _group(b[s])]


def apart_text(
    a: Mapping[Any, Mapping[str, Any]], b: Mapping[Any, Mapping[str, Any]], apart: Sequence[Any]
) -> str:
    """Why a timed metric is not paired on `apart`, in one clause."""
    s = apart[0]
    return (
        f"the runs of seed{'s' if len(apart) > 1 else ''} {list(apart)} were timed apart "
        f"(this configuration's {timing_where(_group(a[s]))}, the baseline's "
        f"{timing_where(_group(b[s]))}), so a change in the machine's load would read as a "
        "difference; `autotune verify` times both interleaved"
    )


def _seeds_text(n: int) -> str:
    return "1 paired seed" if n == 1 else f"{n} paired seeds"


def compared_metrics(objectives: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """What the paired verdict compares: the final loss, then every objective."""
    out = [("final_loss", "minimize")]
    for o in objectives:
        if o["metric"] != "final_loss":
            out.append((str(o["metric"]), str(o.get("direction", "minimize"))))
    return out


def verify_problems(report: Mapping[str, Any]) -> list[str]:
    """Why `autotune verify` says a recipe is not as promised (exit 1); empty when it is.
    A recipe that diverged on every seed, broke its promise on a metric or on divergence, or
    loses to the baseline by the paired comparison (diverged on more seeds beyond chance, or
    worse on the final loss or a stability objective), or whose seeds all ran identically (the
    workload ignores its seed: nothing was verified over them) is not as promised. Hardware metrics
    (throughput, memory) are the machine's and its load's: printed, never a reason here."""
    out = []
    rec = report.get("recipe_result") or {}
    if rec.get("n") and rec.get("diverged_share") == 1.0:
        out.append(f"it diverged on every seed ({rec['n']} of {rec['n']})")
    for p in report.get("promise") or []:
        # A hardware metric (throughput, memory) is the machine's and its load's: printed,
        # not a broken promise of the configuration.
        if p["metric"] not in HARDWARE_METRICS and str(p.get("verdict")).startswith(
            ("WORSE", "DIVERGED")
        ):
            out.append(f"{p['metric']}: {p['verdict']}")
    vs = report.get("vs_baseline") or {}
    if vs.get("seed_ignored"):  # every seed replayed one run: nothing was verified over seeds
        out.append(ignored_text(vs["seed_ignored"]))
    div = vs.get("diverged") or {}
    lost = [m for m in vs.get("worse_on") or [] if m not in HARDWARE_METRICS]
    if div and div["pick_seeds"] > div["baseline_seeds"] and decides(div):
        out.append(
            f"it diverged on more seeds than the baseline ({div['pick_seeds']} vs "
            f"{div['baseline_seeds']} of {div['n']}), "
            + ("and on every seed" if div.get("every_seed") == "pick" else chance_text(div))
        )
    elif lost:
        out.append(f"it loses to the baseline over the same seeds on {', '.join(lost)}")
    return out


def causes_text(result: Mapping[str, Any]) -> str:
    """` (loss_explosion on seeds 2, 3)`: the causes of the seeds that diverged; '' if none."""
    by: dict[str, list[str]] = {}
    for r in result.get("runs") or []:
        if r.get("outcome") == Outcome.DIVERGED:
            by.setdefault(str(r.get("cause") or "unknown cause"), []).append(str(r.get("seed")))
    if not by:
        return ""
    return " (" + "; ".join(f"{c} on seeds {', '.join(s)}" for c, s in by.items()) + ")"
