"""scaling_efficiency is a ratio of two throughputs: positive, and made of timings.

A review verified a DDP study over 2 seeds (0.3527 and 0.2599) and got the arithmetic
t-interval [-0.2832, 0.8958], exported as the recipe's `verified.low`: a ratio of throughputs
below zero. Its interval is on the log scale, as the other positive quantities' are; and the
paired verdict compares it only between runs timed together, as it does throughput.

verify and migrate showed it only where it was an objective: a recipe of a `measure_scaling`
study paid for the one-process run in every probe and threw the figure away."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from assets.recipes import make_recipe

from autotune.recipe import paired, verify
from autotune.recipe.seeds import summarize_seeds, timing_group
from autotune.space import POSITIVE_METRICS


def runs(values: list[float], group: str) -> dict[str, Any]:
    return summarize_seeds(
        [
            {
                "seed": seed,
                "outcome": "complete",
                "timing_group": group,
                "summary": {
                    "steps_run": 100,
                    "steps_planned": 100,
                    "metrics": {"final_loss": 1.0 + seed / 10, "scaling_efficiency": v},
                },
            }
            for seed, v in enumerate(values, 1)
        ],
        metrics=["final_loss", "scaling_efficiency"],
    )


def test_the_interval_of_two_seeds_stays_above_zero() -> None:
    assert "scaling_efficiency" in POSITIVE_METRICS
    iv = runs([0.3527, 0.2599], "in the verification phase")["metrics"]["scaling_efficiency"]
    assert iv["scale"] == "log"
    assert 0 < iv["low"] < iv["mean"] < iv["high"]
    assert abs(iv["mean"] - (0.3527 * 0.2599) ** 0.5) < 1e-9  # the geometric mean


def test_timed_apart_it_is_not_compared() -> None:
    metrics = [("final_loss", "minimize"), ("scaling_efficiency", "maximize")]
    mine = runs([0.30, 0.31, 0.29], timing_group("in the verification phase"))
    base = runs([0.60, 0.61, 0.62], timing_group("beside the top rung"))
    v = paired.compare(mine, base, metrics)
    row = v["metrics"]["scaling_efficiency"]
    assert row["verdict"] == "not compared" and row["apart_seeds"] == [1, 2, 3]
    assert v["worse_on"] == [] and "scaling_efficiency not compared" in v["why"]


def test_timed_together_it_is_judged_on_its_ratio() -> None:
    metrics = [("final_loss", "minimize"), ("scaling_efficiency", "maximize")]
    group = timing_group("in the verification phase")
    v = paired.compare(runs([0.30, 0.31, 0.29], group), runs([0.60, 0.61, 0.62], group), metrics)
    row = v["metrics"]["scaling_efficiency"]
    assert row["verdict"] == "worse" and row["ratio"]["scale"] == "log"


@pytest.mark.parametrize("scaling", [True, False])
def test_verify_reports_it_for_recipe_and_baseline_when_the_recipe_measures_scaling(
    scaling: bool,
) -> None:
    recipe = replace(make_recipe(), world_size=2, probe={"steps": 50, "measure_scaling": scaling})
    assert "scaling_efficiency" not in recipe.achieved  # not an objective of its study
    metrics = verify.metrics_of(recipe)
    assert ("scaling_efficiency" in metrics) is scaling

    def seeds(values: list[float]) -> dict[str, Any]:
        group = timing_group("in the verification phase")
        return summarize_seeds(
            [
                {
                    "seed": seed,
                    "outcome": "complete",
                    "timing_group": group,
                    "summary": {"metrics": {"loss_cv": 0.1, "scaling_efficiency": v}},
                }
                for seed, v in enumerate(values, 1)
            ],
            metrics,
        )

    report = {
        "recipe": "t",
        "seeds": [1, 2],
        "steps": 50,
        "recipe_result": seeds([0.40, 0.42]),
        "baseline_result": seeds([0.30, 0.31]),
        "drift": [],
        "recipe_fingerprint_hash": None,
    }
    rows = [x.split() for x in verify.format_report(report).splitlines()]
    row = next((r for r in rows if r[0] == "scaling_efficiency"), None)
    if not scaling:
        assert row is None
        return
    assert row is not None, "the table has a scaling_efficiency row"
    # both columns: the geometric means of the recipe's seeds and of the baseline's
    assert float(row[1]) == pytest.approx((0.40 * 0.42) ** 0.5, rel=1e-3)
    assert float(row[4]) == pytest.approx((0.30 * 0.31) ** 0.5, rel=1e-3)
