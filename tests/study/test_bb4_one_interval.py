"""Black-box finding bb4 (g4, near the end): in `show --json` the pick's throughput carried two
intervals over the same seeds, [10279, 20451] in `vs_baseline.metrics.throughput.pick` and
[10279, 23103] in `verified[]` and the recipe's `achieved`. The second is the one the README
documents (over verification seeds, throughput's interval is the wider of the one over seeds and
the runs' own timing intervals); the paired verdict's rows now carry it too wherever they are
over the same seeds, and keep their own where they are not (a seed timed apart). The verdict is
still the per-seed ratio's. A real SQLite Optuna study told through the study's own code, its
verification summarised by the real `summarize_seeds`; `show` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from assets import studies as h
from assets.cli import invoke

from autotune.recipe.seeds import summarize_seeds
from autotune.study import attrs as ua
from autotune.study.export import recipe_from_study

SEEDS = (1, 2, 3)
# Per seed: (final_loss, loss_cv, throughput); each run's own throughput interval is +-50%,
# much wider than the spread over the seeds, so the verification's interval is widened.
PICK = {1: (0.20, 0.010, 1000.0), 2: (0.21, 0.011, 1100.0), 3: (0.19, 0.012, 1050.0)}
BASE = {1: (1.00, 0.050, 900.0), 2: (1.01, 0.051, 950.0), 3: (1.02, 0.052, 920.0)}


def verified(per_seed: dict[int, tuple[float, float, float]], apart: int | None) -> dict:
    runs = []
    for seed in SEEDS:
        fl, cv, tp = per_seed[seed]
        metrics = {"final_loss": fl, "loss_cv": cv, "loss_drop": 0.5, "throughput": tp}
        metrics.update(throughput_low=tp * 0.5, throughput_high=tp * 1.5)
        group = "beside the top rung@t0" if seed == apart else "in the verification phase@t1"
        summary = {"metrics": metrics, "steps_run": 30, "steps_planned": 30}
        runs.append(
            {"seed": seed, "outcome": "complete", "timing_group": group, "summary": summary}
        )
    res = summarize_seeds(runs)
    res.update(steps=h.SHARED_STEPS, all_feasible=True)
    return res


def study_with_verification(tmp_path: Path, apart: int | None = None) -> Path:
    """Trial 2 and the baseline verified over seeds 1-3 (the baseline's seed `apart`, if given,
    timed apart from trial 2's)."""
    study_dir = h.recorded_study(tmp_path, "iv", trials=3, finished=3)
    study = optuna.load_study(study_name="iv", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr(ua.verified_key(2), verified(PICK, None))
    study.set_user_attr(ua.verified_key(0), verified(BASE, apart))
    return study_dir


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def show_json() -> dict[str, Any]:
    result = invoke("show", "iv", "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_the_picks_throughput_has_one_interval_over_the_same_seeds(here: Path) -> None:
    study_with_verification(here)
    data = show_json()
    vs = data["vs_baseline"]
    assert data["pick"]["number"] == 2 and vs["seeds"] == list(SEEDS)
    rows = {r["number"]: r for r in data["verified"]}
    row = vs["metrics"]["throughput"]
    assert rows[2]["metrics"]["throughput"]["timing"] is True, "the runs' own intervals widen it"
    assert row["pick"] == rows[2]["metrics"]["throughput"]
    assert row["baseline"] == rows[0]["metrics"]["throughput"]
    lows = (500.0 * 550.0 * 525.0) ** (1 / 3)  # the geometric mean of the runs' own lows
    assert row["pick"]["low"] == pytest.approx(lows)
    assert row["ratio"]["n"] == 3 and row["verdict"] == "better", "judged per seed, as before"
    # The other metrics too: the same seeds, the same interval.
    assert vs["metrics"]["loss_cv"]["pick"] == rows[2]["metrics"]["loss_cv"]
    assert vs["metrics"]["final_loss"]["pick"] == rows[2]["final_loss"]
    # The recipe says the same of the same runs.
    recipe = recipe_from_study("iv")
    achieved = recipe.achieved["throughput"]["verified"]
    paired = recipe.source["vs_baseline"]["metrics"]["throughput"]["pick"]
    assert (paired["low"], paired["high"]) == (achieved["low"], achieved["high"])


def test_a_row_over_other_seeds_keeps_its_own_interval(here: Path) -> None:
    """The baseline's seed 3 timed apart: throughput is compared over seeds 1 and 2 only, whose
    interval is not the verification's (over 1, 2 and 3)."""
    study_with_verification(here, apart=3)
    data = show_json()
    rows = {r["number"]: r for r in data["verified"]}
    row = data["vs_baseline"]["metrics"]["throughput"]
    assert row["apart_seeds"] == [3]
    assert row["pick"]["n"] == 2 and row["pick"] != rows[2]["metrics"]["throughput"]
    assert row["baseline"]["n"] == 2
    # final_loss is no timed metric: over all three seeds, one interval.
    assert data["vs_baseline"]["metrics"]["final_loss"]["pick"] == rows[2]["final_loss"]
