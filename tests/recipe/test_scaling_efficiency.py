"""scaling_efficiency is a ratio of two throughputs: positive, and made of timings.

A review verified a DDP study over 2 seeds (0.3527 and 0.2599) and got the arithmetic
t-interval [-0.2832, 0.8958], exported as the recipe's `verified.low`: a ratio of throughputs
below zero. Its interval is on the log scale, as the other positive quantities' are; and the
paired verdict compares it only between runs timed together, as it does throughput."""

from __future__ import annotations

from typing import Any

from autotune.recipe import paired
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
