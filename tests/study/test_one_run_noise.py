"""Black-box finding on the summary's `vs baseline` percentage of one run against one run: a
pick not verified over seeds printed `throughput pick 9682 baseline 7922 (+22.2%)` where the
baseline's own seeds spread wider than that difference (a review: 9682 [6748, 12890] against
7922 [5583, 9986]). Such a percentage now says what noise it was measured against: within the
baseline's seed-to-seed spread it is no difference (said so; no MLflow `change_pct`, a tag
says why), beyond it it says so, and with nothing measured it says one run against one run.

A real SQLite Optuna study told through the study's own code (`recorded_study`, decided at the
screen, `verify.top_k: 0`), the baseline's screen over seeds kept by the real yardstick code
(`reference_over_seeds`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from assets import studies as h

from autotune import space as sp
from autotune import tracking
from autotune.study import attrs as ua
from autotune.study import yardstick as yd
from autotune.study.summary import summarize
from autotune.study.summary_text import format_summary

SEEDS = (1, 2, 3)
# trial 1 beats the baseline on both objectives, on its one screen run: it is the pick
SCREEN = [
    {"loss_cv": 0.10, "throughput": 7922.0, "loss_drop": 0.5},
    {"loss_cv": 0.05, "throughput": 9682.0, "loss_drop": 0.5},
    {"loss_cv": 0.20, "throughput": 5000.0, "loss_drop": 0.5},
]


def open_study(tmp_path: Path) -> tuple[Any, sp.Space]:
    study_dir = h.recorded_study(tmp_path, "one", trials=3, finished=3, metrics=SCREEN)
    study = optuna.load_study(study_name="one", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    return study, sp.loads(h.mlp_space("one", trials=3), source="one")


def yardstick(per_seed: dict[int, dict[str, float]]) -> dict[str, Any]:
    """The baseline's screen over its seed 0 run (SCREEN[0]) and the seeds `per_seed`, as the
    yardstick phase keeps it (`yardstick.reference_over_seeds`)."""
    space = sp.loads(h.mlp_space("one", trials=3), source="one")
    runs = [
        {"seed": s, "outcome": "complete", "summary": {"metrics": {"loss_drop": 0.5, **m}}}
        for s, m in {0: SCREEN[0], **per_seed}.items()
    ]
    return yd.reference_over_seeds(space, runs)


def mlflow_figures(tmp_path: Path, summary: dict[str, Any]) -> tuple[dict, dict]:
    client = tracking.connect(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id = tracking.ensure_experiment(client, "one")
    parent = tracking.ensure_study_run(
        client, experiment_id, "one", space_yaml="name: one\n", params={}, tags={}
    )
    tracking.log_study_summary(client, parent, summary, [], None)
    run = client.get_run(parent)
    return run.data.metrics, run.data.tags


def line_of(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


def test_a_percentage_within_the_baselines_seed_spread_is_no_difference(tmp_path: Path) -> None:
    """The baseline's screen ran over seeds 1-3 too, the yardstick (its throughput 6000-9500
    there), and the pick was not verified (the verification has not run): the pick's +22.2%
    throughput is within where another seed of it falls; its loss_cv, half the baseline's, is
    beyond its tight spread."""
    study, space = open_study(tmp_path)
    per_seed = {
        1: {"loss_cv": 0.10, "throughput": 6000.0},
        2: {"loss_cv": 0.11, "throughput": 9500.0},
        3: {"loss_cv": 0.09, "throughput": 8300.0},
    }
    study.set_user_attr(ua.SCREEN_YARDSTICK, yardstick(per_seed))
    summary = summarize(study, space)
    assert summary["pick"]["number"] == 1 and not summary["pick"]["verified"]
    tp, cv = summary["improvement"]["throughput"], summary["improvement"]["loss_cv"]
    assert tp["source"] == "screen" and tp["change_pct"] == pytest.approx(22.2, abs=0.05)
    assert tp["within_noise"] is True and cv["within_noise"] is False
    noise = tp["baseline_noise"]
    assert noise["basis"] == "seeds" and noise["seeds"] == [0, 1, 2, 3]
    assert noise["low"] < 9682.0 < noise["high"]
    text = format_summary(summary)
    tp_line = line_of(text, "  throughput")
    assert tp_line.startswith(
        "  throughput   pick 9682  baseline 7922  (+22.2%, within the baseline's seed-to-seed "
        f"spread [{noise['low']:.4g}, {noise['high']:.4g}] over seeds [0, 1, 2, 3]: not a "
        "difference)"
    ), tp_line
    assert "(-50.0%, beyond the baseline's seed-to-seed spread [" in line_of(text, "  loss_cv")

    metrics, tags = mlflow_figures(tmp_path, summary)
    assert "change_pct.throughput" not in metrics, "a difference within noise is no metric"
    assert metrics["best.throughput"] == pytest.approx(9682.0)
    assert tags["autotune.change_pct.throughput"].startswith(
        "+22.2%, within the baseline's seed-to-seed spread ["
    )
    assert metrics["change_pct.loss_cv"] == pytest.approx(-50.0)
    assert tags["autotune.change_pct.loss_cv"].startswith("beyond the baseline's seed-to-seed")


def test_with_no_spread_measured_it_is_one_run_against_one_run(tmp_path: Path) -> None:
    """`verify.top_k: 0` and no yardstick: nothing says how far the baseline's seeds spread,
    and the made-up runs carry no timing interval."""
    study, space = open_study(tmp_path)
    summary = summarize(study, space)
    tp = summary["improvement"]["throughput"]
    assert tp["within_noise"] is None and tp["baseline_noise"]["basis"] is None
    line = line_of(format_summary(summary), "  throughput")
    assert line.endswith(
        "(+22.2%, one run against one run: the baseline's seed-to-seed spread was not measured)"
    ), line
    metrics, tags = mlflow_figures(tmp_path, summary)
    assert metrics["change_pct.throughput"] == pytest.approx(22.2, abs=0.05)
    assert tags["autotune.change_pct.throughput"] == (
        "one run against one run: the baseline's seed-to-seed spread was not measured"
    )


def test_overlapping_timing_intervals_are_within_timing_noise(tmp_path: Path) -> None:
    """No seeds, but each run has its own timing interval, and they overlap (the review's
    9682 [6748, 12890] against 7922 [5583, 9986]): the pick ties them, and so does the line."""
    screen = [dict(m) for m in SCREEN]
    screen[0].update(throughput_low=5583.0, throughput_high=9986.0)
    screen[1].update(throughput_low=6748.0, throughput_high=12890.0)
    screen[2].update(throughput_low=4000.0, throughput_high=6000.0)
    study_dir = h.recorded_study(tmp_path, "one", trials=3, finished=3, metrics=screen)
    study = optuna.load_study(study_name="one", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    summary = summarize(study, sp.loads(h.mlp_space("one", trials=3), source="one"))
    tp = summary["improvement"]["throughput"]
    assert tp["within_noise"] is True and tp["baseline_noise"]["basis"] == "timing"
    assert line_of(format_summary(summary), "  throughput").endswith(
        "(+22.2%, one run against one run, within their timing noise (pick [6748, 1.289e+04], "
        "baseline [5583, 9986]): not a difference)"
    )


def test_the_screen_line_of_a_rung_study_says_it_too(tmp_path: Path) -> None:
    """Decided at 60 steps (trials 0 and 1 promoted): the screen's secondary line, its best per
    objective against the baseline's screen run, is judged against the yardstick's seeds, and
    so is MLflow's `screen.change_pct`."""
    study_dir = h.recorded_study(
        tmp_path, "one", trials=3, finished=3, metrics=SCREEN, overrides=["budget.target_steps=60"]
    )
    study = optuna.load_study(study_name="one", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(
        h.mlp_space("one", trials=3), source="one", overrides=["budget.target_steps=60"]
    )
    for n in (0, 1):
        metrics = {**SCREEN[n], "loss_cv": SCREEN[n]["loss_cv"] / 2}
        row = {"number": n, "rung": 1, "steps": 60, "baseline": n == 0, "outcome": "complete"}
        values = [metrics["loss_cv"], metrics["throughput"]]
        row.update(metrics=metrics, values=values, feasible=True)
        study.set_user_attr(ua.rung_key(n, 60), row)
    study.set_user_attr(ua.RUNGS, [{"rung": 1, "steps": 60, "numbers": [0, 1]}])
    decided = {"steps": 60, "rung": 1, "reason": "target", "tau": None, "target_steps": 60}
    study.set_user_attr(ua.DECIDED, decided)
    study.set_user_attr(
        ua.SCREEN_YARDSTICK,
        yardstick(
            {1: {"loss_cv": 0.1, "throughput": 6000.0}, 2: {"loss_cv": 0.11, "throughput": 9500.0}}
        ),
    )
    summary = summarize(study, space)
    tp = summary["screen_improvement"]["throughput"]
    assert tp["within_noise"] is True and tp["baseline_noise"]["seeds"] == [0, 1, 2]
    line = line_of(format_summary(summary), "at the screen (30 steps; not what the pick")
    assert "best throughput 9682 vs baseline 7922 (+22.2%, within the baseline's seed-to-seed " in (
        line
    ), line
    metrics, tags = mlflow_figures(tmp_path, summary)
    assert "screen.change_pct.throughput" not in metrics and "screen.best.throughput" in metrics
    assert tags["autotune.screen.change_pct.throughput"].startswith("+22.2%, within the baseline")
