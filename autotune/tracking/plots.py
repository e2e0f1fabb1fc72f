"""Figures of a study: the Pareto front, parameter importances, loss curves of the front.

Built with `matplotlib.figure.Figure` on the Agg canvas: pyplot is never imported, so no global
figure state leaks and nothing needs a display. Each function returns a Figure; `save()` writes
it. Artists carry a `gid` ("front", "baseline", "loss:7", ...) so tests and callers can find them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autotune.numbers import finite
from autotune.probe.outcome import Outcome

DPI = 120
MAX_CURVES = 10

_GREY = "#9e9e9e"
_RED = "#d62728"
_FRONT = "#1f77b4"
_BASELINE = "#ff9f1c"
_CURVE_COLORS = (
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#7f7f7f",
    "#aec7e8",
    "#98df8a",
)
_INFEASIBLE_OUTCOMES = {Outcome.DIVERGED, Outcome.OOM, Outcome.FAILED}


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` to `path` (format from the suffix, PNG by default); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=DPI)
    return target


def _direction_label(objective: Mapping[str, Any]) -> str:
    metric = str(objective.get("metric", "objective"))
    if str(objective.get("direction", "minimize")).startswith("max"):
        return f"{metric} (higher is better)"
    return f"{metric} (lower is better)"


def _objective_values(
    outcome: Mapping[str, Any], objectives: Sequence[Mapping[str, Any]]
) -> list[float | None]:
    """The outcome's value for each objective: `values`, else the summary metric of that name."""
    values = list(outcome.get("values") or [])
    metrics = (outcome.get("summary") or {}).get("metrics") or {}
    result: list[float | None] = []
    for i, objective in enumerate(objectives):
        value = finite(values[i]) if i < len(values) else None
        if value is None:
            value = finite(metrics.get(objective.get("metric")))
        result.append(value)
    return result


def _is_infeasible(outcome: Mapping[str, Any]) -> bool:
    return outcome.get("outcome") in _INFEASIBLE_OUTCOMES or outcome.get("feasible") is False


Point = tuple[float, float, int]  # x, y, trial number


def pareto_figure(
    outcomes: Sequence[Mapping[str, Any]],
    objectives: Sequence[Mapping[str, Any]],
    front_numbers: set[int],
) -> Figure:
    """Trials on the first two objectives (one objective: value against trial number).

    Feasible trials grey, diverged/OOM/failed a red x, the Pareto front highlighted and joined,
    the baseline a labelled star. Trials without values are counted in a note.
    """
    fig = _figure(8.0, 5.5)
    ax = fig.add_subplot()
    objectives = list(objectives) or [{"metric": "objective", "direction": "minimize"}]
    two_d = len(objectives) >= 2
    used = objectives[:2] if two_d else objectives[:1]
    groups, missing, baseline_infeasible = _group_points(outcomes, used, front_numbers)
    if groups["feasible"]:
        pts = groups["feasible"]
        ax.scatter(_xs(pts), _ys(pts), s=28, c=_GREY, alpha=0.8, label="trial", gid="feasible")
    if groups["infeasible"]:
        pts = groups["infeasible"]
        ax.scatter(
            _xs(pts), _ys(pts), s=40, c=_RED, marker="x", label="diverged / OOM", gid="infeasible"
        )
    if not two_d:
        _draw_running_best(ax, _running_best(outcomes, used[0]))
    if groups["front"]:
        _draw_front(ax, sorted(groups["front"]), two_d)
    if groups["baseline"]:
        _draw_baseline(ax, groups["baseline"], baseline_infeasible)
    _label_pareto_axes(ax, used, len(objectives), missing)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


def _group_points(
    outcomes: Sequence[Mapping[str, Any]],
    used: Sequence[Mapping[str, Any]],
    front_numbers: set[int],
) -> tuple[dict[str, list[Point]], int, bool]:
    """Each trial's point by group (feasible, infeasible, front, baseline), the count of trials
    without values, and whether the baseline was infeasible."""
    two_d = len(used) >= 2
    groups: dict[str, list[Point]] = {"feasible": [], "infeasible": [], "front": [], "baseline": []}
    missing = 0
    baseline_infeasible = False
    for outcome in outcomes:
        number = int(outcome.get("number", -1))
        values = [v for v in _objective_values(outcome, used) if v is not None]
        if len(values) < len(used):
            missing += 1
            continue
        point = (values[0], values[1], number) if two_d else (float(number), values[0], number)
        if outcome.get("baseline"):
            groups["baseline"].append(point)
            baseline_infeasible = _is_infeasible(outcome)
            if number in front_numbers:
                groups["front"].append(point)
        elif number in front_numbers:
            groups["front"].append(point)
        elif _is_infeasible(outcome):
            groups["infeasible"].append(point)
        else:
            groups["feasible"].append(point)
    return groups, missing, baseline_infeasible


def _xs(points: Iterable[Point]) -> list[float]:
    return [p[0] for p in points]


def _ys(points: Iterable[Point]) -> list[float]:
    return [p[1] for p in points]


def _draw_running_best(ax: Any, best: list[tuple[float, float]]) -> None:
    if best:
        ax.plot(
            [b[0] for b in best],
            [b[1] for b in best],
            drawstyle="steps-post",
            color=_FRONT,
            lw=1.2,
            alpha=0.6,
            label="best so far",
            gid="front-line",
        )


def _draw_front(ax: Any, pts: list[Point], two_d: bool) -> None:
    if two_d and len(pts) > 1:
        ax.plot(_xs(pts), _ys(pts), color=_FRONT, lw=1.4, alpha=0.7, gid="front-line")
    ax.scatter(
        _xs(pts),
        _ys(pts),
        s=70,
        c=_FRONT,
        edgecolors="black",
        linewidths=0.6,
        zorder=3,
        label="Pareto front" if two_d else "best",
        gid="front",
    )
    for x, y, number in pts:
        ax.annotate(f"#{number}", (x, y), xytext=(5, 5), textcoords="offset points", fontsize=8)


def _draw_baseline(ax: Any, pts: list[Point], infeasible: bool) -> None:
    number = pts[0][2]
    label = f"baseline (#{number}" + (", infeasible)" if infeasible else ")")
    ax.scatter(
        _xs(pts),
        _ys(pts),
        s=220,
        marker="*",
        c=_BASELINE,
        edgecolors="black",
        linewidths=0.8,
        zorder=4,
        label=label,
        gid="baseline",
    )
    ax.annotate(
        "baseline",
        (pts[0][0], pts[0][1]),
        xytext=(8, -12),
        textcoords="offset points",
        fontsize=9,
        fontweight="bold",
    )


def _label_pareto_axes(
    ax: Any, used: Sequence[Mapping[str, Any]], n_objectives: int, missing: int
) -> None:
    if len(used) >= 2:
        ax.set_xlabel(_direction_label(used[0]))
        ax.set_ylabel(_direction_label(used[1]))
        title = "Trials and Pareto front"
        if n_objectives > 2:
            title += f" (first 2 of {n_objectives} objectives)"
    else:
        ax.set_xlabel("trial number")
        ax.set_ylabel(_direction_label(used[0]))
        title = "Trials and best value"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if missing:
        ax.text(
            0.01,
            0.01,
            f"{missing} trial(s) without objective values not shown (failed before measuring)",
            transform=ax.transAxes,
            fontsize=8,
            color="#555555",
            va="bottom",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 2},
        )


def _running_best(
    outcomes: Sequence[Mapping[str, Any]], objective: Mapping[str, Any]
) -> list[tuple[float, float]]:
    maximize = str(objective.get("direction", "minimize")).startswith("max")
    best: float | None = None
    points: list[tuple[float, float]] = []
    for outcome in sorted(outcomes, key=lambda o: int(o.get("number", -1))):
        if _is_infeasible(outcome):
            continue
        value = _objective_values(outcome, [objective])[0]
        if value is None:
            continue
        if best is None or (value > best if maximize else value < best):
            best = value
        points.append((float(outcome.get("number", -1)), best))
    return points


def importance_figure(importances: Mapping[str, Mapping[str, float]]) -> Figure:
    """Horizontal bars of parameter importance, one panel per objective (shared parameter order)."""
    objectives = [name for name, values in importances.items() if values]
    params: list[str] = []
    for name in objectives:
        for param in importances[name]:
            if param not in params:
                params.append(param)
    if not objectives:
        fig = _figure(6.0, 2.5)
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no parameter importances", ha="center", va="center")
        ax.set_axis_off()
        return fig

    first = importances[objectives[0]]
    params.sort(key=lambda p: finite(first.get(p)) or 0.0)  # most important at the top
    height = max(2.5, 0.45 * len(params) + 1.4)
    width = max(6.0, 3.6 * len(objectives) + 2.0)
    fig = _figure(width, height)
    axes = fig.subplots(1, len(objectives), sharey=True, squeeze=False)[0]
    positions = list(range(len(params)))
    for index, (ax, name) in enumerate(zip(axes, objectives, strict=True)):
        color = _CURVE_COLORS[index % len(_CURVE_COLORS)]
        values = [finite(importances[name].get(p)) or 0.0 for p in params]
        bars = ax.barh(positions, values, color=color, gid=f"importance:{name}")
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=3, fontsize=8)
        ax.set_title(name)
        ax.set_xlabel("importance")
        ax.set_xlim(0, max([*values, 1e-9]) * 1.25)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(positions, params)
    fig.suptitle("Parameter importance")
    return fig


def _as_axis_float(value: Any) -> float:
    number = finite(value)
    return float("nan") if number is None else number


def loss_curves_figure(
    outcomes: Sequence[Mapping[str, Any]],
    front_numbers: set[int],
    baseline_number: int | None,
) -> Figure:
    """Loss against step for the Pareto-front trials and the baseline; divergence marked with x.

    The y axis is logarithmic when every finite loss is positive and they span more than a decade.
    At most MAX_CURVES front trials are drawn (lowest trial numbers first).
    """
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    by_number = {int(o.get("number", -1)): o for o in outcomes}
    front = sorted(n for n in front_numbers if n in by_number and n != baseline_number)
    shown = front[:MAX_CURVES]
    chosen: list[tuple[int, bool]] = [(n, False) for n in shown]
    if baseline_number is not None and baseline_number in by_number:
        chosen.append((baseline_number, True))

    all_finite: list[float] = []
    divergence: list[tuple[float, float]] = []
    drawn = 0
    for index, (number, is_baseline) in enumerate(chosen):
        outcome = by_number[number]
        summary = outcome.get("summary") or {}
        loss = [_as_axis_float(v) for v in (summary.get("series") or {}).get("loss") or []]
        finite = [v for v in loss if not math.isnan(v)]
        if not finite:
            continue
        all_finite.extend(finite)
        label = f"baseline (#{number})" if is_baseline else f"trial #{number}"
        ax.plot(
            range(len(loss)),
            loss,
            color="black" if is_baseline else _CURVE_COLORS[index % len(_CURVE_COLORS)],
            lw=1.8 if is_baseline else 1.2,
            ls="--" if is_baseline else "-",
            alpha=0.9,
            label=label,
            gid=f"loss:{number}",
        )
        drawn += 1
        point = _divergence_point(loss, summary.get("diverged_at_step"))
        if point is not None:
            divergence.append(point)

    if divergence:
        ax.scatter(
            [p[0] for p in divergence],
            [p[1] for p in divergence],
            marker="x",
            s=90,
            linewidths=2.2,
            c=_RED,
            zorder=4,
            label="divergence",
            gid="divergence",
        )
    if all_finite and min(all_finite) > 0 and max(all_finite) / min(all_finite) > 10:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    title = "Loss curves: Pareto front vs baseline"
    if len(front) > len(shown):
        title += f" ({len(shown)} of {len(front)} front trials)"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    if drawn:
        ax.legend(loc="best", fontsize=8, ncol=1 if drawn <= 6 else 2, framealpha=0.85)
    else:
        ax.text(
            0.5, 0.5, "no loss series recorded", transform=ax.transAxes, ha="center", va="center"
        )
    return fig


def _divergence_point(loss: Sequence[float], step: Any) -> tuple[float, float] | None:
    """Where to mark a divergence at `step`: the last finite loss at or before it."""
    if step is None or isinstance(step, bool):
        return None
    try:
        at = int(step)
    except (TypeError, ValueError):
        return None
    if at < 0 or not loss:
        return None
    at = min(at, len(loss) - 1)
    for i in range(at, -1, -1):
        if not math.isnan(loss[i]):
            return (float(at), loss[i])
    return None
