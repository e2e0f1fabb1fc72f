"""autotune.tracking.plots on synthetic outcomes: the right artists, and PNGs that are written."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from autotune.tracking import plots

OBJECTIVES = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "tokens_per_s", "direction": "maximize"},
]
STEPS = 60


def _loss(rate: float, diverge_at: int | None = None) -> list[float]:
    loss = [3.0 * math.exp(-rate * i) + 0.05 for i in range(STEPS)]
    if diverge_at is not None:
        loss = loss[:diverge_at] + [loss[diverge_at] * 50, float("inf")] + [float("nan")] * 3
    return loss


def _outcome(
    number: int,
    kind: str = "complete",
    *,
    values: list[float] | None = None,
    diverge_at: int | None = None,
    rate: float = 0.05,
) -> dict[str, Any]:
    measured = dict(zip(("loss_cv", "tokens_per_s"), values or [], strict=False))
    summary: dict[str, Any] | None = {
        "metrics": {"loss_cv": None, "tokens_per_s": None, **measured},
        "series": {"loss": _loss(rate, diverge_at)},
        "diverged_at_step": diverge_at,
    }
    if kind == "failed":
        summary = None
    return {
        "number": number,
        "outcome": kind,
        "baseline": number == 0,
        "values": values,
        "feasible": kind == "complete",
        "summary": summary,
    }


def _study() -> tuple[list[dict[str, Any]], set[int]]:
    """A baseline that diverges, 3 front trials, 4 other feasible, 2 diverged, 1 failed."""
    outcomes = [_outcome(0, "diverged", values=[0.9, 900.0], diverge_at=30, rate=0.08)]
    front = {1: [0.10, 1000.0], 2: [0.15, 1200.0], 3: [0.25, 1400.0]}
    for number, values in front.items():
        outcomes.append(_outcome(number, values=values, rate=0.04 + 0.01 * number))
    for number in range(4, 8):
        outcomes.append(_outcome(number, values=[0.3 + 0.05 * number, 950.0 + 20 * number]))
    outcomes.append(_outcome(8, "diverged", values=[1.5, 800.0], diverge_at=10))
    outcomes.append(_outcome(9, "oom", values=[0.5, 300.0]))
    outcomes.append(_outcome(10, "failed"))
    return outcomes, set(front)


def _by_gid(fig: Figure, gid: str) -> list[Any]:
    return [a for a in fig.findobj() if a.get_gid() == gid]


def _points(fig: Figure, gid: str) -> int:
    artists = _by_gid(fig, gid)
    return sum(len(a.get_offsets()) for a in artists)


def test_pareto_figure_two_objectives(tmp_path: Path) -> None:
    outcomes, front = _study()
    fig = plots.pareto_figure(outcomes, OBJECTIVES, front)
    assert isinstance(fig, Figure)
    assert _points(fig, "front") == 3
    assert _points(fig, "baseline") == 1
    assert _points(fig, "feasible") == 4
    assert _points(fig, "infeasible") == 2  # trial 8 (diverged) and 9 (oom); 10 has no values
    (line,) = _by_gid(fig, "front-line")
    assert len(line.get_xdata()) == 3
    ax = fig.axes[0]
    assert ax.get_xlabel() == "loss_cv (lower is better)"
    assert ax.get_ylabel() == "tokens_per_s (tokens/s, higher is better)"
    png = plots.save(fig, tmp_path / "out" / "pareto.png")
    assert png.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pareto_figure_single_objective_uses_trial_number() -> None:
    outcomes = [_outcome(n, values=[v]) for n, v in enumerate([0.5, 0.4, 0.45, 0.2, 0.3])]
    fig = plots.pareto_figure(outcomes, OBJECTIVES[:1], {3})
    ax = fig.axes[0]
    assert ax.get_xlabel() == "trial number"
    (front,) = _by_gid(fig, "front")
    assert [tuple(p) for p in front.get_offsets()] == [(3.0, 0.2)]
    (best,) = _by_gid(fig, "front-line")
    assert list(best.get_ydata()) == [0.5, 0.4, 0.4, 0.2, 0.2]


def test_pareto_figure_draws_measurements_not_the_stand_ins_told_to_optuna() -> None:
    """A NaN objective (diverged, did not learn) is told to Optuna as a finite stand-in, kept in
    the record's `values`: the plot draws `metrics` alone, and names the trials it left out."""
    outcomes, front = _study()
    for number in (0, 2, 5):  # the baseline, a front trial and an ordinary one lack loss_cv
        outcomes[number]["summary"]["metrics"]["loss_cv"] = float("nan")
    fig = plots.pareto_figure(outcomes, OBJECTIVES, front)
    assert _points(fig, "front") == 2 and _points(fig, "feasible") == 3
    assert not _by_gid(fig, "baseline")
    assert "baseline" not in " ".join(fig.axes[0].get_legend_handles_labels()[1])
    (note,) = _by_gid(fig, "notes")
    assert note.get_text().replace("\n", " ") == (  # wrapped to the figure's width
        "4 trials without a finite value not drawn: #0 (baseline; loss_cv), #2 (loss_cv), "
        "#5 (loss_cv), #10 (loss_cv, tokens_per_s)"
    )


def test_pareto_figure_all_diverged_draws_nothing_and_lists_no_front() -> None:
    outcomes = [_outcome(n, "diverged", values=[1e9, 5.0], diverge_at=0) for n in range(4)]
    for outcome in outcomes:
        outcome["summary"]["metrics"] = {"loss_cv": float("nan"), "tokens_per_s": 5.0}
    fig = plots.pareto_figure(outcomes, OBJECTIVES, {0, 1})
    assert fig.axes[0].get_legend() is None  # nothing drawn, nothing in a legend
    assert _by_gid(fig, "notes")[0].get_text().startswith("4 trials without a finite value")


def test_pareto_figure_marks_the_pick_and_names_the_length() -> None:
    outcomes, front = _study()
    fig = plots.pareto_figure(
        outcomes, OBJECTIVES, front, pick=2, length="at 120 steps", left_out="3 trials not run"
    )
    ax = fig.axes[0]
    (ring,) = _by_gid(fig, "pick")
    assert [tuple(p) for p in ring.get_offsets()] == [(0.15, 1200.0)]
    assert "pick (#2)" in ax.get_legend_handles_labels()[1]
    assert ax.get_title() == "Trials and Pareto front at 120 steps"
    assert _by_gid(fig, "notes")[0].get_text().startswith("3 trials not run\n")
    assert "throughput (samples/s" in plots._direction_label({"metric": "throughput"})


def test_pareto_figure_reads_summary_metrics_when_values_missing() -> None:
    outcome = _outcome(4, values=None)
    outcome["summary"]["metrics"] = {"loss_cv": 0.2, "tokens_per_s": 500.0}
    fig = plots.pareto_figure([outcome], OBJECTIVES, set())
    assert _points(fig, "feasible") == 1


def test_importance_figure_bars_per_objective(tmp_path: Path) -> None:
    importances = {
        "loss_cv": {"clip_norm": 0.6, "warmup_steps": 0.3, "adam_eps": 0.1},
        "tokens_per_s": {"clip_norm": 0.1, "warmup_steps": 0.2, "adam_eps": 0.7},
    }
    fig = plots.importance_figure(importances)
    for name, values in importances.items():
        bars = _by_gid(fig, f"importance:{name}")  # one Rectangle per parameter
        assert len(bars) == 3
        assert sorted(p.get_width() for p in bars) == sorted(values.values())
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[-1] == "clip_norm"  # the most important for the first objective on top
    assert plots.save(fig, tmp_path / "imp.png").stat().st_size > 1000


def test_importance_figure_says_when_the_knobs_could_not_be_ranked() -> None:
    importances = {
        "loss_cv": {"clip_norm": 0.6, "warmup_steps": 0.4},
        "tokens_per_s": "too few trials to rank the knobs for tokens_per_s",
    }
    fig = plots.importance_figure(importances)
    assert len(_by_gid(fig, "importance:loss_cv")) == 2
    assert not _by_gid(fig, "importance:tokens_per_s")  # no equal bars read as a finding
    (said,) = _by_gid(fig, "unranked")
    assert said.get_text().replace("\n", " ") == importances["tokens_per_s"]


def test_a_knob_within_chance_is_labelled_so_not_drawn_as_zero(tmp_path: Path) -> None:
    importances = {
        "loss_cv": {"clip_norm": 0.6},  # warmup_steps did not stand out from chance here
        "tokens_per_s": {"clip_norm": 0.1, "warmup_steps": 0.8},
    }
    fig = plots.importance_figure(importances)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "within chance" in texts and "0.60" in texts and "0.00" not in texts, texts
    assert "within chance" not in [t.get_text() for t in fig.axes[1].texts]
    plots.save(fig, tmp_path / "imp.png")


def test_importance_figure_empty() -> None:
    fig = plots.importance_figure({})
    assert isinstance(fig, Figure)


def test_loss_curves_figure_front_and_baseline(tmp_path: Path) -> None:
    outcomes, front = _study()
    fig = plots.loss_curves_figure(outcomes, front, 0)
    ax = fig.axes[0]
    curves = [line for line in ax.get_lines() if str(line.get_gid()).startswith("loss:")]
    assert sorted(line.get_gid() for line in curves) == ["loss:0", "loss:1", "loss:2", "loss:3"]
    (baseline,) = _by_gid(fig, "loss:0")
    assert baseline.get_linestyle() == "--"
    (marks,) = _by_gid(fig, "divergence")
    assert [tuple(p) for p in marks.get_offsets()] == [(30.0, pytest.approx(_loss(0.08)[30] * 50))]
    assert ax.get_yscale() == "log"  # positive losses spanning more than a decade
    assert ax.get_title() == "Loss curves: Pareto front vs baseline"
    assert plots.save(fig, tmp_path / "loss.png").stat().st_size > 1000


def test_loss_curves_linear_when_flat_and_capped() -> None:
    rng = random.Random(0)
    outcomes = [
        {
            "number": n,
            "summary": {"series": {"loss": [1.0 + 0.1 * rng.random() for _ in range(20)]}},
        }
        for n in range(15)
    ]
    fig = plots.loss_curves_figure(outcomes, set(range(1, 15)), None)
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    assert len(ax.get_lines()) == plots.MAX_CURVES
    assert "of 14 front trials" in ax.get_title()


def test_loss_curves_name_the_length_and_the_pick() -> None:
    outcomes, front = _study()
    fig = plots.loss_curves_figure(outcomes, front, 0, pick=5, length="at 120 steps")
    ax = fig.axes[0]
    assert ax.get_title() == "Loss curves at 120 steps: Pareto front vs baseline"
    (picked,) = _by_gid(fig, "loss:5")  # the pick is drawn though off the front
    assert picked.get_label() == "trial #5 (pick)"
