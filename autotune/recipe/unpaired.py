"""Two intervals of a mean over different seeds (or the same seeds at another time, on another
machine: nothing pairs a run of one with a run of the other) compared: Welch's t interval of
the difference of their means, from what each side records of itself (its mean, its 95%
interval and its number of seeds: `seeds.interval`'s mean ± t(0.975, n - 1) · se gives back
se), on the log scale (a ratio, as `paired.paired_ratio`) for a positive metric
(`POSITIVE_METRICS`) whose means and ends are all > 0, as its intervals over seeds are taken:

    d = a - b,   se = √(se_a² + se_b²),
    df = se⁴ / (se_a⁴ / (n_a - 1) + se_b⁴ / (n_b - 1))    (Welch-Satterthwaite),
    d ± t(level, ⌊df⌋) · se

(the t of the df below, as `seeds.t975` takes its table: never narrower than Welch's). What
`autotune verify` judges a promise by (`promise.compare_promise`).

An interval's standard error is read from the wider of its two halves: one clipped to what its
metric can be (`seeds.bounded`) or a timed one widened to its runs' own timings
(`seeds.with_timing`) is then never read as tighter than it was measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.recipe.seeds import t_quantile
from autotune.space import POSITIVE_METRICS


def on_log_scale(metric: str, *ivs: Mapping[str, Any]) -> bool:
    """Whether `ivs` of `metric` are compared as a ratio: a positive metric whose every mean
    and end given is > 0."""
    if metric not in POSITIVE_METRICS:
        return False
    values = [iv.get(k) for iv in ivs for k in ("mean", "low", "high")]
    return all(v > 0 for v in values if v is not None)


def standard_error(iv: Mapping[str, Any], n: int, log: bool) -> float | None:
    """The standard error of the mean behind `iv`, an interval of the mean over `n` seeds at
    95% (on the log scale when `log`), from the wider of its halves; None with no end or fewer
    than 2 seeds."""
    mean = iv.get("mean")
    if mean is None or n < 2:
        return None
    f = math.log if log else float
    halves = [
        abs(f(mean) - f(iv[k])) for k in ("low", "high") if iv.get(k) is not None
    ]  # an end missing: the other one's half
    return max(halves) / t_quantile(0.95, n - 1) if halves else None


def difference(
    metric: str,
    a: Mapping[str, Any],
    n_a: int,
    b: Mapping[str, Any],
    n_b: int,
    level: float = 0.95,
) -> dict[str, Any] | None:
    """Welch's `level` interval of a's mean against b's (the module): `mean`, `low`, `high` of
    a - b, or of a / b with `scale` "log" (the ratio), `df` (None when neither side varied: the
    interval is the difference itself) and `level`. None when a side has no interval (one seed,
    or no end recorded)."""
    log = on_log_scale(metric, a, b)
    se_a, se_b = standard_error(a, n_a, log), standard_error(b, n_b, log)
    if se_a is None or se_b is None:
        return None
    f = math.log if log else float
    d = f(a["mean"]) - f(b["mean"])
    var_a, var_b = se_a**2, se_b**2
    if var_a + var_b == 0:
        df, half = None, 0.0
    else:
        df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))
        half = t_quantile(level, max(1, math.floor(df))) * math.sqrt(var_a + var_b)
    out = {"mean": d, "low": d - half, "high": d + half}
    if log:
        out = {k: math.exp(v) for k, v in out.items()}
    return {**out, "df": df, "level": level, "scale": "log" if log else "linear"}


def no_change(diff: Mapping[str, Any]) -> float:
    """What the interval reads as no difference: a ratio of 1, a difference of 0."""
    return 1.0 if diff.get("scale") == "log" else 0.0


def difference_text(diff: Mapping[str, Any]) -> str:
    """`x1.04 [x0.81, x1.33]` (a ratio) or `+0.012 [-0.03, +0.05]` (a difference)."""
    if diff.get("scale") == "log":
        return f"x{diff['mean']:.3g} [x{diff['low']:.3g}, x{diff['high']:.3g}]"
    return f"{diff['mean']:+.3g} [{diff['low']:+.3g}, {diff['high']:+.3g}]"
