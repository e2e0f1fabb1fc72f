"""Figures of a study: the Pareto front, parameter importances, loss curves of the front.

Built with `matplotlib.figure.Figure` on the Agg canvas: pyplot is never imported, so no global
figure state leaks and nothing needs a display. Each function returns a Figure; `save()` writes
it. Artists carry a `gid` ("front", "baseline", "loss:7", ...) so tests and callers can find them.
"""

from __future__ import annotations

import math
import textwrap
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
_PICK = "#2ca02c"
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


#: Units of the metrics that have one (autotune.probe.metrics); the others are ratios or losses.
_UNITS = {
    "throughput": "samples/s",
    "tokens_per_s": "tokens/s",
    "peak_mem_mb": "MB",
    "steps_run": "steps",
    "spike_count": "spikes",
    "skipped_steps": "steps",
}


def _direction_label(objective: Mapping[str, Any]) -> str:
    metric = str(objective.get("metric", "objective"))
    unit = _UNITS.get(metric)
    better = "higher" if str(objective.get("direction", "minimize")).startswith("max") else "lower"
    return f"{metric} ({unit + ', ' if unit else ''}{better} is better)"


def _metrics(outcome: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's measured metrics: a full record's `summary.metrics`, a slim row's `metrics`."""
    return (outcome.get("summary") or {}).get("metrics") or outcome.get("metrics") or {}


def _objective_values(
    outcome: Mapping[str, Any], objectives: Sequence[Mapping[str, Any]]
) -> list[float | None]:
    """The outcome's measured value for each objective (None where it has none). Never its
    `values`: where a metric was NaN (diverged, did not learn) those hold the finite stand-in
    told to Optuna, which is no measurement."""
    metrics = _metrics(outcome)
    return [finite(metrics.get(str(objective.get("metric")))) for objective in objectives]


def _is_infeasible(outcome: Mapping[str, Any]) -> bool:
    return outcome.get("outcome") in _INFEASIBLE_OUTCOMES or outcome.get("feasible") is False


Point = tuple[float, float, int]  # x, y, trial number


def pareto_figure(
    outcomes: Sequence[Mapping[str, Any]],
    objectives: Sequence[Mapping[str, Any]],
    front_numbers: set[int],
    *,
    pick: int | None = None,
    length: str = "",
    left_out: str = "",
) -> Figure:
    """Trials on the first two objectives (one objective: value against trial number).

    `outcomes`: the records of the length the front was decided at, which `length` names in
    the title ("at 120 steps"); `left_out` says which trials did not run that long. Feasible
    trials grey, diverged/OOM/failed a red x, the Pareto front highlighted and joined, the
    baseline a labelled star, the `pick` ringed. Only measured values are drawn: the trials
    without a finite value of an objective are named in a note.
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
    drawn = [p for points in groups.values() for p in points]
    _draw_pick(ax, next((p for p in drawn if p[2] == pick), None))
    if not drawn:
        ax.text(
            0.5, 0.5, "no trial with a measured value of every objective", ha="center",
            va="center", transform=ax.transAxes, color="#555555",
        )  # fmt: skip
    notes = [n for n in (left_out, _missing_note(missing, used)) if n]
    _label_pareto_axes(ax, used, len(objectives), length, notes)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


def _group_points(
    outcomes: Sequence[Mapping[str, Any]],
    used: Sequence[Mapping[str, Any]],
    front_numbers: set[int],
) -> tuple[dict[str, list[Point]], list[tuple[int, bool, list[str]]], bool]:
    """Each trial's point by group (feasible, infeasible, front, baseline); the trials without
    a finite value of every objective (number, baseline, the objectives it lacks); and whether
    the baseline was infeasible."""
    two_d = len(used) >= 2
    groups: dict[str, list[Point]] = {"feasible": [], "infeasible": [], "front": [], "baseline": []}
    missing: list[tuple[int, bool, list[str]]] = []
    baseline_infeasible = False
    for outcome in outcomes:
        number = int(outcome.get("number", -1))
        measured = _objective_values(outcome, used)
        if any(v is None for v in measured):
            lacks = [str(o.get("metric")) for o, v in zip(used, measured, strict=True) if v is None]
            missing.append((number, bool(outcome.get("baseline")), lacks))
            continue
        values = [float(v) for v in measured if v is not None]
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


def _missing_note(missing: Sequence[tuple[int, bool, list[str]]], used: Sequence[Any]) -> str:
    """'2 trials without a finite value not drawn: #0 (baseline; noise_per_drop), #4 (...)'."""
    if not missing:
        return ""
    shown = []
    for number, baseline, lacks in sorted(missing)[:6]:
        what = ", ".join(lacks) if len(used) > 1 else ""
        inside = "; ".join(x for x in ("baseline" if baseline else "", what) if x)
        shown.append(f"#{number}" + (f" ({inside})" if inside else ""))
    more = f", +{len(missing) - 6} more" if len(missing) > 6 else ""
    n = len(missing)
    return (
        f"{n} trial{'s' if n != 1 else ''} without a finite value not drawn: "
        + ", ".join(shown)
        + more
    )


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


def _draw_pick(ax: Any, point: Point | None) -> None:
    """The picked trial ringed in green (named in the legend): what `autotune export` writes."""
    if point is None:
        return
    ax.scatter(
        [point[0]], [point[1]], s=260, facecolors="none", edgecolors=_PICK, linewidths=2.2,
        zorder=5, label=f"pick (#{point[2]})", gid="pick",
    )  # fmt: skip


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
    ax: Any, used: Sequence[Mapping[str, Any]], n_objectives: int, length: str, notes: list[str]
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
    ax.set_title(f"{title} {length}".strip())
    ax.grid(True, alpha=0.3)
    if notes:  # below the axes (under the x label): inside, they hid points; wrapped, as a
        # line wider than the figure would leave the layout no room for the axes
        text = "\n".join(textwrap.fill(n, 120) for n in notes)
        ax.annotate(
            text, xy=(0, 0), xycoords="axes fraction", xytext=(0, -32),
            textcoords="offset points", fontsize=8, color="#555555", va="top", gid="notes",
        )  # fmt: skip


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


def importance_figure(importances: Mapping[str, Mapping[str, float] | str]) -> Figure:
    """Horizontal bars of parameter importance, one panel per objective (shared parameter order).

    An objective given a sentence instead of numbers (the study's `importance.unranked`: too few
    trials to rank the knobs; or no knob stood out from chance) gets a panel with that sentence
    and no bars: bars would read as a finding. A knob an objective's importances leave out (it
    did not stand out from chance there) is labelled so, with no bar."""
    objectives = [name for name, values in importances.items() if values]
    ranked = {n: v for n, v in importances.items() if v and not isinstance(v, str)}
    params: list[str] = []
    for values in ranked.values():
        for param in values:
            if param not in params:
                params.append(param)
    if not objectives:
        fig = _figure(6.0, 2.5)
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no parameter importances", ha="center", va="center")
        ax.set_axis_off()
        return fig

    first = next(iter(ranked.values()), {})
    params.sort(key=lambda p: finite(first.get(p)) or 0.0)  # most important at the top
    height = max(2.5, 0.45 * len(params) + 1.4)
    width = max(6.0, 3.6 * len(objectives) + 2.0)
    fig = _figure(width, height)
    axes = fig.subplots(1, len(objectives), sharey=True, squeeze=False)[0]
    positions = list(range(len(params)))
    for index, (ax, name) in enumerate(zip(axes, objectives, strict=True)):
        ax.set_title(name)
        given = importances[name]
        if isinstance(given, str):
            _unranked_panel(ax, given)
            continue
        color = _CURVE_COLORS[index % len(_CURVE_COLORS)]
        bars_at = [finite(given.get(p)) or 0.0 for p in params]
        bars = ax.barh(positions, bars_at, color=color, gid=f"importance:{name}")
        # a knob left out of an objective's importances did not stand out from chance there
        labels = [
            f"{v:.2f}" if p in given else "within chance"
            for p, v in zip(params, bars_at, strict=True)
        ]
        ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
        ax.set_xlabel("importance (share of the total)")
        ax.set_xlim(0, max([*bars_at, 1e-9]) * 1.25)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(positions, params)  # none: no ticks beside panels of sentences only
    fig.suptitle("Parameter importance (the screen's trials)")
    return fig


def _unranked_panel(ax: Any, why: str) -> None:
    """A panel that says why it has no bars, wrapped to its width."""
    ax.text(
        0.5, 0.5, textwrap.fill(why, 34), transform=ax.transAxes,
        ha="center", va="center", fontsize=9, color="#555555", wrap=True, gid="unranked",
    )  # fmt: skip
    ax.set_xticks([])
    ax.tick_params(axis="y", length=0)


def _as_axis_float(value: Any) -> float:
    number = finite(value)
    return float("nan") if number is None else number


def loss_curves_figure(
    outcomes: Sequence[Mapping[str, Any]],
    front_numbers: set[int],
    baseline_number: int | None,
    *,
    pick: int | None = None,
    length: str = "",
) -> Figure:
    """Loss against step for the Pareto-front trials and the baseline; divergence marked with x.

    `outcomes`: the records of the length the front was decided at (`length` in the title:
    "at 120 steps"), so the curves are the runs the decision was made on; the `pick` drawn
    thicker and named so.

    The y axis is logarithmic when every finite loss is positive and they span more than a decade.
    At most MAX_CURVES front trials are drawn (lowest trial numbers first).
    """
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    by_number = {int(o.get("number", -1)): o for o in outcomes}
    front = sorted(n for n in front_numbers if n in by_number and n != baseline_number)
    shown = front[:MAX_CURVES]
    chosen: list[tuple[int, bool]] = [(n, False) for n in shown]
    if pick in by_number and pick not in shown and pick != baseline_number:
        chosen.append((int(pick), False))  # a pick off the front (`--pick trial N`) is drawn too
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
        label += " (pick)" if number == pick else ""
        ax.plot(
            range(len(loss)),
            loss,
            color="black" if is_baseline else _CURVE_COLORS[index % len(_CURVE_COLORS)],
            lw=2.6 if number == pick else 1.8 if is_baseline else 1.2,
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
    title = f"Loss curves{' ' + length if length else ''}: Pareto front vs baseline"
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
