"""Black-box findings on the summary's `vs baseline` lines: each figure carries its pairing.

- The throughput percentage (and MLflow's `change_pct.throughput`) compared runs the paired
  line of the same summary said were timed apart (the baseline's beside the top rung, the
  pick's in the verification phase): `throughput pick 6.665e+04 baseline 7.505e+04 (-11.2%)`,
  re-timed together no different. Now `(timed apart: not compared)`, and no metric.
- The stability percentage compared the pick's mean over seeds {2, 3} with the baseline's over
  {3} alone: it is now over the seeds both have a value on, and says so.
- A baseline that diverged on every verification seed (and ran on): the paired line printed
  its final loss `n/a` beside a ratio computed from its final losses, and `vs baseline`
  printed the pick's value alone, without why.

A real SQLite Optuna study told through the study's own code (`recorded_study`), its
verification summarised by the real `summarize_seeds`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from assets import studies as h

from autotune import space as sp
from autotune import tracking
from autotune.recipe.seeds import summarize_seeds
from autotune.study import attrs as ua
from autotune.study.summary import summarize
from autotune.study.summary_text import format_summary

SEEDS = (1, 2, 3)
IN_PHASE = "in the verification phase@t1"


def verified(per_seed: dict[int, dict[str, Any]], groups: dict[int, str] | None = None) -> dict:
    """A verified result over SEEDS: per seed its metrics and optionally `outcome`."""
    runs = []
    for seed in SEEDS:
        row = dict(per_seed[seed])
        outcome = row.pop("outcome", "complete")
        metrics = {"loss_drop": 0.5, **row}
        summary = {"metrics": metrics, "steps_run": 30, "steps_planned": 30}
        group = (groups or {}).get(seed, IN_PHASE)
        run = {"seed": seed, "outcome": outcome, "timing_group": group, "summary": summary}
        runs.append({**run, "cause": "loss_explosion"} if outcome == "diverged" else run)
    res = summarize_seeds(runs)
    res.update(steps=h.SHARED_STEPS, all_feasible=all(r["outcome"] == "complete" for r in runs))
    for row in res["runs"]:
        row["feasible"] = row["outcome"] == "complete"
    return res


def summary_of(tmp_path: Path, pick: dict, base: dict) -> dict[str, Any]:
    """The summary of a 3-trial study whose trial 2 and baseline were verified as given."""
    study_dir = h.recorded_study(tmp_path, "vs", trials=3, finished=3)
    study = optuna.load_study(study_name="vs", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr(ua.verified_key(2), pick)
    study.set_user_attr(ua.verified_key(0), base)
    space = sp.loads(h.mlp_space("vs", trials=3), source="vs")
    return summarize(study, space)


def line_of(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(start))


def mlflow_figures(tmp_path: Path, summary: dict[str, Any]) -> tuple[dict, dict]:
    client = tracking.connect(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id = tracking.ensure_experiment(client, "vs")
    parent = tracking.ensure_study_run(
        client, experiment_id, "vs", space_yaml="name: vs\n", params={}, tags={}
    )
    tracking.log_study_summary(client, parent, summary, [], None)
    run = client.get_run(parent)
    return run.data.metrics, run.data.tags


def seeds(fl: float, cv: float, tp: float) -> dict[int, dict[str, Any]]:
    return {s: {"final_loss": fl, "loss_cv": cv + s * 1e-3, "throughput": tp + s} for s in SEEDS}


def test_throughput_timed_apart_has_no_percentage(tmp_path: Path) -> None:
    apart = dict.fromkeys(SEEDS, "beside the top rung@t0")
    summary = summary_of(
        tmp_path, verified(seeds(0.2, 0.01, 66650.0)), verified(seeds(1.0, 0.05, 75050.0), apart)
    )
    row = summary["improvement"]["throughput"]
    assert row["source"] == "verified" and row["timed_apart"] == list(SEEDS)
    assert row["change_pct"] is None
    assert summary["vs_baseline"]["metrics"]["throughput"]["verdict"] == "not compared"
    text = format_summary(summary)
    assert line_of(text, "  throughput").endswith("(timed apart: not compared)"), text
    # loss_cv is no timed metric: its percentage stands, over all three seeds
    cv = summary["improvement"]["loss_cv"]
    assert cv["change_pct"] == pytest.approx(100 * (cv["best"] - cv["baseline"]) / cv["baseline"])
    assert "paired over" not in line_of(text, "  loss_cv")
    metrics, tags = mlflow_figures(tmp_path, summary)
    assert "change_pct.throughput" not in metrics and "change_pct.loss_cv" in metrics
    assert tags["autotune.change_pct.throughput"] == "timed apart: not compared"


def test_a_percentage_is_over_the_seeds_both_have_a_value_on(tmp_path: Path) -> None:
    """The pick has no loss_cv on seed 1, the baseline none on seeds 1 and 2: the change is
    seed 3's alone (-53%), not the pick's mean over {2, 3} against the baseline's {3}."""
    pick, base = seeds(0.2, 0.0, 1000.0), seeds(1.0, 0.0, 1000.0)
    for s, v in zip(SEEDS, (None, 1502.0, 1162.0), strict=True):
        pick[s]["loss_cv"] = v
    for s, v in zip(SEEDS, (None, None, 2472.0), strict=True):
        base[s]["loss_cv"] = v
    summary = summary_of(tmp_path, verified(pick), verified(base))
    row = summary["improvement"]["loss_cv"]
    assert row["change_pct"] == pytest.approx(100 * (1162 - 2472) / 2472)
    assert row["paired_seeds"] == [3] and row["left_out"] == [1, 2]
    text = line_of(format_summary(summary), "  loss_cv")
    assert "(-53.0% paired over seed [3]: pick 1162 baseline 2472 there; seeds [1, 2] left out" in (
        text
    ), text
    metrics, tags = mlflow_figures(tmp_path, summary)
    assert metrics["change_pct.loss_cv"] == pytest.approx(-53.0, abs=0.1)
    assert tags["autotune.change_pct.loss_cv"].startswith("paired over seeds [3]: pick 1162")


def test_a_baseline_diverged_on_every_seed_says_so(tmp_path: Path) -> None:
    base = seeds(45000.0, 0.0, 1000.0)
    for s in SEEDS:
        base[s].update(outcome="diverged", loss_cv=None)
    summary = summary_of(tmp_path, verified(seeds(0.11, 0.01, 1000.0)), verified(base))
    text = format_summary(summary)
    assert line_of(text, "  loss_cv").endswith(
        "vs baseline: baseline diverged on 3 of 3 verification seeds [1, 2, 3]: no value to "
        "compare with"
    ), text
    # the ratio's baseline final losses are printed, not `n/a`
    assert "final_loss x2.44e-06 the baseline's" in text
    side = line_of(text, "  baseline trial 0: final_loss ")
    assert side.startswith(
        "  baseline trial 0: final_loss 4.5e+04 [4.5e+04, 4.5e+04] (as the ratio counts it: the "
        "seeds it diverged on ran their whole length) at 30 steps; diverged on 100% of seeds"
    ), side
