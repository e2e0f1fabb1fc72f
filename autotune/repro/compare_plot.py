"""The plot of a comparison of two step series (`compare.compare_series`' result): both curves
over their whole lengths (top) and their relative difference, raw and smoothed (bottom).

A reproducibility plot must tell bit for bit from drift, so the difference is drawn at its
value on a log axis whose lower limit follows the data (a difference of 1e-7 sits below one of
4e-7, not on a common floor); a step where the two runs are equal (difference 0, which a log
axis cannot show) is marked apart at the axis' foot, and a plot where every step is equal says
"bit for bit". A step where one run's value is not finite and the other's is (or they are
different non-finite values) is marked at the axis' top. When the runs have different lengths
both are drawn whole and the title says so: a DIFFER over two identical common stretches
must show why. matplotlib is imported inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["draw_comparison", "plot_comparison"]

ZERO_GID = "zero"
NONFINITE_GID = "nonfinite"


def plot_comparison(result: dict[str, Any], path: str | Path) -> Path:
    """`draw_comparison(result)` written to `path` (a PNG)."""
    from autotune.tracking import plots

    # Values near the largest double put a log axis' autoscaled limits past it: matplotlib
    # overflows computing them (and warns on stderr); the plot is still right.
    with np.errstate(over="ignore", invalid="ignore"):
        return plots.save(draw_comparison(result), path)


def _arr(values: list[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _whole(result: dict[str, Any], side: str) -> tuple[np.ndarray, np.ndarray]:
    """Side `side`'s whole series (steps and values), or the common steps when the result
    does not carry it (one made before it did, or migrate's curve on its common steps)."""
    whole = result.get(f"series_{side}")
    s = result["series"]
    if whole:
        return np.asarray(whole["step"], dtype=float), _arr(whole["value"])
    return np.asarray(s["step"], dtype=float), _arr(s[side])


def lengths_text(result: dict[str, Any]) -> str | None:
    """ "lengths differ: 60 vs 30 steps" when one run has steps the other lacks, else None."""
    only_a, only_b = int(result.get("only_a") or 0), int(result.get("only_b") or 0)
    if not (only_a or only_b):
        return None
    n = int(result["common_steps"])
    return f"lengths differ: {n + only_a} vs {n + only_b} steps (a vs b)"


def draw_comparison(result: dict[str, Any]) -> Figure:
    """The figure (see the module docstring); the curves have gids `a` and `b`, the smoothed
    difference `smoothed`, the marks of equal steps `zero`, of non-finite ones `nonfinite`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from autotune.tracking import plots

    fig = Figure(figsize=(8, 6), dpi=plots.DPI, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    metric = result.get("metric", "value")
    (sa, a), (sb, b) = _whole(result, "a"), _whole(result, "b")
    top.plot(sa, a, label=f"a {str(result.get('run_a', ''))[:8]}", color="#1f77b4", gid="a")
    top.plot(sb, b, label=f"b {str(result.get('run_b', ''))[:8]}", color="#ff7f0e", gid="b")
    finite = np.concatenate([a[np.isfinite(a)], b[np.isfinite(b)]])
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 20:
        top.set_yscale("log")
    top.set_ylabel(str(metric))
    top.legend(loc="upper right")
    verdict = "agree" if result["agree"] else "differ"
    title = f"{metric}: {verdict} (rtol {result['rtol']:g}, window {result['window']})"
    lengths = lengths_text(result)
    top.set_title(title + (f"\n{lengths}" if lengths else ""))
    _draw_difference(bottom, result)
    first = result.get("first_divergence_step")
    if first is not None:
        for ax in (top, bottom):
            ax.axvline(first, color="#d62728", ls=":", lw=1.0)
    return fig


def _draw_difference(ax: Axes, result: dict[str, Any]) -> None:
    """The relative difference on the common steps, at its value (see the module docstring)."""
    s = result["series"]
    steps = np.asarray(s["step"], dtype=float)
    rel, smooth = _arr(s["rel_diff"]), _arr(s["smoothed"])
    rtol = float(result["rtol"])
    # rel_diff is None only where it is infinite: one side non-finite, or two that differ
    nonfinite = np.isnan(rel)
    zero = rel == 0
    positive = np.concatenate([rel[rel > 0], smooth[smooth > 0]])
    positive = positive[np.isfinite(positive)]
    low = min(float(positive.min()), rtol) / 3 if positive.size else rtol * 1e-3
    high = max(float(positive.max()) if positive.size else 0.0, rtol) * 3
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    # A log axis has no 0: the zeros are masked out of the lines and marked apart.
    ax.plot(
        steps,
        np.where(rel > 0, rel, np.nan),
        color="#9e9e9e",
        lw=0.8,
        marker=".",
        ms=3,
        label="|a-b| / max(|a|,|b|)",
    )
    ax.plot(
        steps,
        np.where(smooth > 0, smooth, np.nan),
        color="#d62728",
        label="rolling median",
        gid="smoothed",
    )
    ax.axhline(rtol, color="black", ls="--", lw=0.8, label=f"rtol {rtol:g}")
    foot = ax.get_xaxis_transform()  # x in steps, y from 0 (the axis' foot) to 1 (its top)
    if zero.any():
        ax.plot(
            steps[zero],
            np.full(int(zero.sum()), 0.03),
            ls="none",
            marker="|",
            ms=8,
            color="#2ca02c",
            transform=foot,
            gid=ZERO_GID,
            label="difference 0 (bit for bit)",
        )
    if nonfinite.any():
        ax.plot(
            steps[nonfinite],
            np.full(int(nonfinite.sum()), 0.95),
            ls="none",
            marker="v",
            color="#d62728",
            transform=foot,
            gid=NONFINITE_GID,
            label="non-finite on one side (or different non-finite values)",
        )
    if zero.all():
        ax.text(
            0.5,
            0.5,
            f"bit for bit: no difference at any of the {zero.size} common steps",
            transform=ax.transAxes,
            ha="center",
            va="center",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("relative difference")
    ax.legend(loc="best", fontsize="small")
