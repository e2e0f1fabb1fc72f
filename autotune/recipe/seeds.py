"""What a configuration achieves over seeds: per metric the mean and the 95% interval of the mean
(Student's t with n - 1 degrees of freedom: mean ± t(0.975, n-1) · s / √n, s the sample standard
deviation; on the log scale for quantities that cannot be zero or negative), over the seeds that
neither diverged nor failed, and the share of seeds that diverged. Throughput (and tokens/s),
which each run measures with an interval from its own step timings, gets the wider of that
interval over seeds and the runs' own (`with_timing`).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.outcome import Outcome
from autotune.recipe.seed_effect import identical_seeds

# Quantities that cannot be zero or negative: their intervals are taken on the log scale.
from autotune.space.schema import POSITIVE_METRICS

# Two-sided 95% quantiles of Student's t, by degrees of freedom (standard table values).
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    25: 2.060,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}
REPORTED = ("loss_cv", "spike_count", "final_loss", "loss_drop", "throughput", "peak_mem_mb")


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (table; conservative
    between table entries: the value of the next smaller tabulated df)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df > 120:
        return 1.960
    return _T975[max(k for k in _T975 if k <= df)]


# What a metric can be, where that is narrower than any number: a linear interval is clipped
# to it (a count's interval never goes below 0, a share's never above 1).
RANGES: dict[str, tuple[float, float]] = {
    "spike_count": (0.0, math.inf),
    "skipped_steps": (0.0, math.inf),
    "clip_fraction": (0.0, 1.0),
    "loss_drop": (-math.inf, 1.0),
    **{m: (0.0, math.inf) for m in POSITIVE_METRICS},  # a positive one with a 0 among its values
}


def bounded(iv: dict[str, Any], metric: str) -> dict[str, Any]:
    """`iv` with its bounds clipped to what `metric` can be (`RANGES`), saying so."""
    lo, hi = RANGES.get(metric, (-math.inf, math.inf))
    if iv.get("low") is None or iv.get("scale") == "log":
        return iv
    out = {**iv, "low": max(iv["low"], lo), "high": min(iv["high"], hi)}
    if (out["low"], out["high"]) != (iv["low"], iv["high"]):
        out["clipped"] = True
    return out


def t_quantile(level: float, df: int) -> float:
    """The two-sided `level` quantile of Student's t with `df` degrees of freedom: `t975` for
    95% (the table every interval here used), else scipy's."""
    if level == 0.95:
        return t975(df)
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, df))


def interval(
    values: Sequence[float | None], scale: str = "linear", level: float = 0.95
) -> dict[str, Any]:
    """Mean, sample standard deviation and `level` (95%) interval of the mean of finite
    `values`.

    scale "log" (positive quantities, when every value is > 0): the geometric mean and the
    interval of the mean of the logs, mapped back: never below zero. `bounded` clips a linear
    one to what its metric can be."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return {"mean": None, "std": None, "low": None, "high": None, "n": 0}
    if scale == "log" and all(x > 0 for x in xs):
        logs = interval([math.log(x) for x in xs], level=level)
        out = {
            k: (math.exp(v) if v is not None and k in ("mean", "low", "high") else v)
            for k, v in logs.items()
        }
        out["std"] = statistics.stdev(xs) if n > 1 else None
        out["scale"] = "log"
        return out
    mean = statistics.fmean(xs)
    if n == 1:
        return {"mean": mean, "std": None, "low": None, "high": None, "n": 1}
    std = statistics.stdev(xs)
    half = t_quantile(level, n - 1) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "low": mean - half, "high": mean + half, "n": n}


def metric_interval(values: Sequence[float | None], metric: str) -> dict[str, Any]:
    """`interval` of `metric`'s values over seeds: on the log scale for a positive metric
    (`POSITIVE_METRICS`), else linear."""
    return interval(values, scale="log" if metric in POSITIVE_METRICS else "linear")


def prediction_interval(values: Sequence[float], metric: str) -> tuple[float, float]:
    """The two-sided 95% prediction interval of one more value drawn like `values` (n >= 2):

        mean ± t(0.975, n - 1) · s · √(1 + 1/n),

    on the log scale for a positive metric (`POSITIVE_METRICS`, when every value is > 0). Each
    end is the one-sided 97.5% prediction bound: where another seed may still fall."""
    xs = [float(v) for v in values]
    if len(xs) < 2:
        raise ValueError("a prediction interval needs at least 2 values")
    log = metric in POSITIVE_METRICS and all(x > 0 for x in xs)
    ys = [math.log(x) for x in xs] if log else xs
    n = len(ys)
    half = t975(n - 1) * statistics.stdev(ys) * math.sqrt(1 + 1 / n)
    mean = statistics.fmean(ys)
    low, high = mean - half, mean + half
    return (math.exp(low), math.exp(high)) if log else (low, high)


def paired(
    xs: Sequence[float | None], ys: Sequence[float | None], level: float = 0.95
) -> dict[str, Any]:
    """The paired comparison of x against y over the same seeds: per seed the difference
    x - y (seeds where either is missing or non-finite are left out), its mean and the 95%
    interval of that mean (`interval`, Student's t with n - 1 degrees of freedom), and the
    differences themselves. With one pair there is no interval (low and high are None)."""
    diffs = [x - y for x, y in finite_pairs(xs, ys)]
    return {**interval(diffs, level=level), "differences": diffs}


def finite_pairs(
    xs: Sequence[float | None], ys: Sequence[float | None]
) -> list[tuple[float, float]]:
    """The (x, y) pairs of the same seeds where both are present and finite: what a paired
    comparison is over."""
    out = []
    for x, y in zip(xs, ys, strict=True):
        if x is None or y is None:
            continue
        a, b = float(x), float(y)
        if math.isfinite(a) and math.isfinite(b):
            out.append((a, b))
    return out


def ran_whole(run: Mapping[str, Any] | None) -> bool:
    """Whether a run (a probe summary, a verified seed's row, a slim rung record: anything with
    `steps_run` and `steps_planned`) ran every step it was planned for."""
    run = run or {}
    done, planned = run.get("steps_run"), run.get("steps_planned")
    return done is not None and planned is not None and 0 < int(planned) <= int(done)


#: The metrics a run labelled diverged that still ran its whole length counts for in a paired
#: comparison: its final loss is where that training really ended (the baseline as yardstick).
#: Every other metric is compared only between runs that completed: a diverged run's speed,
#: spread or spikes are those of a blow-up, not of a training that ran (a review saw a recipe
#: called worse on throughput than a baseline that diverged on every seed, beside a table that
#: showed each of the baseline's cells n/a).
RAN_ON_METRICS = ("final_loss",)


def counts_for(run: Mapping[str, Any] | None, metric: str) -> bool:
    """Whether `run` (a verified seed's row) counts for `metric` in a paired comparison:
    complete, or labelled diverged but run whole for a metric of `RAN_ON_METRICS`."""
    run = run or {}
    if run.get("outcome") == Outcome.COMPLETE:
        return True
    return metric in RAN_ON_METRICS and run.get("outcome") == Outcome.DIVERGED and ran_whole(run)


# Metrics each run measures with an interval of its own (`<metric>_low`, `<metric>_high`: the
# probe's step timings, `autotune.probe.metrics.throughput_interval`).
TIMED = ("throughput", "tokens_per_s")
# Metrics made of step timings (the timed ones, and scaling_efficiency: a ratio of two
# throughputs): the machine's load moves them, so two runs are compared on them only when they
# were timed together (`paired.compare`), and never with runs of another machine (migrate).
TIMINGS = (*TIMED, "scaling_efficiency")


#: The fewest seeds an interval over seeds of a timed metric is compared from (and either side
#: of a promise, of any metric: `promise`). Two seeds give a t-interval with one degree of
#: freedom (the mean +- 12.7 standard errors): on throughput it spans one or two orders of
#: magnitude, so a tie with it, or a promise it keeps, says nothing.
MIN_TIMED_SEEDS = 3


def too_few_timed(metric: str, iv: Mapping[str, Any] | None) -> str | None:
    """Why `iv`, an interval over seeds of `metric`, is too wide to compare (a timed metric
    from 2 to `MIN_TIMED_SEEDS - 1` seeds: its span said), else None (not timed, enough seeds,
    or no interval at all: one seed is judged by its own rules)."""
    return too_few_seeds(metric, iv) if metric in TIMED else None


def too_few_seeds(metric: str, iv: Mapping[str, Any] | None) -> str | None:
    """`too_few_timed`'s reason for an interval over seeds of any metric: from 2 to
    `MIN_TIMED_SEEDS - 1` seeds its t has one degree of freedom whatever it measures (its span
    said, `span_text`), else None."""
    n = int((iv or {}).get("n") or 0)
    if not 2 <= n < MIN_TIMED_SEEDS or iv is None:
        return None
    span = span_text(metric, iv)
    span = f": {span}" if span else ""
    return f"{n} seeds{span}; too few seeds to compare {metric} (verify.seeds >= {MIN_TIMED_SEEDS})"


def span_text(metric: str, iv: Mapping[str, Any]) -> str:
    """How wide `iv` is: `the throughput interval spans 3.83x` (a positive metric's), `the
    loss_drop interval is [-0.05, 0.45]` (another's); '' without both ends."""
    lo, hi = iv.get("low"), iv.get("high")
    if lo is None or hi is None:
        return ""
    if metric in POSITIVE_METRICS and lo > 0:
        return f"the {metric} interval spans {hi / lo:.3g}x"
    return f"the {metric} interval is [{lo:.3g}, {hi:.3g}]"


def timing_group(where: str) -> str:
    """A batch of runs measured together (`where`, e.g. "in the verification phase", and when it
    started): the paired verdict compares a timed metric only between two runs of the same
    batch, which ran interleaved under the same load (`paired.compare`)."""
    return f"{where}@{dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}"


def timing_where(group: str | None) -> str:
    """What `timing_group` said of a batch, without its time ("in the verification phase");
    "at another time" for a run recorded without one."""
    return (group or "at another time").split("@", 1)[0]


def with_timing(
    iv: dict[str, Any], runs: Sequence[Mapping[str, Any]], metric: str
) -> dict[str, Any]:
    """`iv` (over seeds) of a `TIMED` metric, never narrower than the geometric means of the
    runs' own timing bounds: a few seeds that happen to agree do not make the timing noise of
    each go away; with one seed, that seed's own interval. `timing` says it was widened."""
    bounds = []
    for r in runs:
        m = (r.get("summary") or {}).get("metrics") or {}
        lo, hi = m.get(f"{metric}_low"), m.get(f"{metric}_high")
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and lo > 0:
            bounds.append((float(lo), float(hi)))
    if iv.get("mean") is None or not bounds:
        return iv
    lo = math.exp(statistics.fmean(math.log(b[0]) for b in bounds))
    hi = math.exp(statistics.fmean(math.log(b[1]) for b in bounds))
    low = lo if iv.get("low") is None else min(iv["low"], lo)
    high = hi if iv.get("high") is None else max(iv["high"], hi)
    if (low, high) == (iv.get("low"), iv.get("high")):
        return iv
    return {**iv, "low": min(low, iv["mean"]), "high": max(high, iv["mean"]), "timing": True}


def seeds_for(base_seed: int, n: int) -> list[int]:
    """The `n` other seeds a configuration is verified with."""
    return [base_seed + 1 + i for i in range(n)]


def summarize_seeds(
    runs: Sequence[Mapping[str, Any]], metrics: Sequence[str] = REPORTED
) -> dict[str, Any]:
    """Combine per-seed trial outcomes (`launcher.run_trial_process` results with a `seed`)."""
    ok = [r for r in runs if r.get("outcome") == Outcome.COMPLETE]
    diverged = [r for r in runs if r.get("outcome") == Outcome.DIVERGED]
    failed = [r for r in runs if r.get("outcome") not in (Outcome.COMPLETE, Outcome.DIVERGED)]
    names = list(dict.fromkeys([*metrics]))
    out_metrics = {
        m: bounded(
            metric_interval(
                [((r.get("summary") or {}).get("metrics") or {}).get(m) for r in ok], m
            ),
            m,
        )
        for m in names
    }
    for m in TIMED:
        if m in out_metrics:
            out_metrics[m] = with_timing(out_metrics[m], ok, m)
    n = len(runs)
    return {
        "n": n,
        # the seeds, when their runs are identical: the workload ignores its seed
        "seed_ignored": identical_seeds(runs),
        "seeds": [r.get("seed") for r in runs],
        "diverged_share": (len(diverged) / n) if n else None,
        "failed": len(failed),
        "metrics": out_metrics,
        "runs": [
            {
                "seed": r.get("seed"),
                "outcome": r.get("outcome"),
                "cause": r.get("cause"),
                "error": r.get("error"),
                "steps_run": (r.get("summary") or {}).get("steps_run"),
                "steps_planned": (r.get("summary") or {}).get("steps_planned"),
                "timing_group": r.get("timing_group"),
                "metrics": {
                    m: ((r.get("summary") or {}).get("metrics") or {}).get(m) for m in names
                },
            }
            for r in runs
        ],
    }


def format_interval(iv: Mapping[str, Any] | None, digits: int = 4, empty: str = "n/a") -> str:
    """`mean [low, high]` to `digits` significant digits; `empty` when there is no mean."""
    if not iv or iv.get("mean") is None:
        return empty
    g = f".{digits}g"
    if iv.get("low") is None:
        return f"{iv['mean']:{g}} (1 seed)"
    return f"{iv['mean']:{g}} [{iv['low']:{g}}, {iv['high']:{g}}]"
