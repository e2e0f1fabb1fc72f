"""The paired verdict against runs labelled diverged that ran their whole length: their final
loss counts (the baseline as yardstick), their throughput and every other metric do not, so a
recipe is never judged on speed against a baseline that blew up, and the per-side rows are the
numbers the verification's table shows. Pure functions on hand-made run records (a black-box
review: `MIXED: better on final_loss, divergence, worse on throughput` against a baseline that
diverged on every seed, whose table cells were all n/a)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.recipe import paired as pd
from autotune.recipe.seeds import summarize_seeds

METRICS = [("final_loss", "minimize"), ("noise_per_drop", "minimize"), ("throughput", "maximize")]


def result(rows: list[tuple[str, float, float]]) -> dict[str, Any]:
    """Seeds 100, 101, ... as (outcome, final loss, throughput), each run its whole length (a
    late blow-up: labelled diverged, run on to the end); noise_per_drop only where complete."""
    runs = []
    for seed, (outcome, final, tp) in enumerate(rows, 100):
        m: dict[str, Any] = {"final_loss": final, "throughput": tp}
        m["noise_per_drop"] = 0.0065 if outcome == "complete" else None
        runs.append(
            {
                "seed": seed,
                "outcome": outcome,
                "cause": "loss_explosion" if outcome == "diverged" else None,
                "timing_group": "verify@t",
                "summary": {"metrics": m, "steps_run": 400, "steps_planned": 400},
            }
        )
    return summarize_seeds(runs, [m for m, _ in METRICS])


RECIPE = result(
    [("complete", 0.114, 6.85e4), ("complete", 0.117, 7.65e4), ("complete", 0.114, 7e4)]
)


def test_throughput_is_not_compared_with_a_baseline_that_diverged_on_every_seed() -> None:
    base = result(
        [("diverged", 4.55e4, 1.2e5), ("diverged", 4.53e4, 1.12e5), ("diverged", 4.53e4, 1.1e5)]
    )
    out = pd.compare(RECIPE, base, METRICS)
    tp = out["metrics"]["throughput"]
    assert tp["verdict"] == "not compared"
    assert tp["not_completed"] == "the baseline diverged on every seed"
    assert tp["difference"]["n"] == 0
    # the verdict's baseline row is the table's: nothing measured (n/a), not the blow-ups' speed
    assert tp["baseline"]["mean"] is None and base["metrics"]["throughput"]["mean"] is None
    # the final loss of a run that ran on is real: the recipe is better, and diverged less
    assert out["metrics"]["final_loss"]["verdict"] == "better"
    assert out["verdict"] == "better" and out["worse_on"] == []
    assert out["why"] == (
        "better than the baseline: final_loss, diverged on 0 vs 3 seeds (the baseline diverged "
        "on every seed); noise_per_drop, throughput not compared: the baseline diverged on every "
        "seed"
    )
    assert out["judged_metrics"] == 1  # only the final loss was measured on both sides
    report = {"recipe_result": RECIPE, "vs_baseline": out}
    assert pd.verify_problems(report) == []


def test_throughput_is_compared_over_the_seeds_both_sides_completed() -> None:
    # the baseline blew up on seed 101 only: throughput over seeds 100 and 102, as its table
    base = result([("complete", 0.2, 6.9e4), ("diverged", 4.5e4, 1.9e5), ("complete", 0.21, 7.1e4)])
    out = pd.compare(RECIPE, base, METRICS)
    tp = out["metrics"]["throughput"]
    assert tp["difference"]["n"] == 2 and "not_completed" not in tp
    assert tp["baseline"] == base["metrics"]["throughput"]
    assert tp["baseline"]["n"] == 2
    assert tp["baseline"]["mean"] == pytest.approx((6.9e4 * 7.1e4) ** 0.5)
    assert out["metrics"]["final_loss"]["difference"]["n"] == 3  # the one that ran on counts
    assert out["worse_on"] == []


def test_a_recipe_that_diverged_on_every_seed_is_not_judged_on_its_speed() -> None:
    gone = result([("diverged", 50.0, 2e5)] * 3)
    out = pd.compare(gone, RECIPE, METRICS)
    assert out["metrics"]["throughput"]["not_completed"] == (
        "this configuration diverged on every seed"
    )
    assert out["verdict"] == "worse" and out["better_on"] == []


def test_no_seed_completed_on_both_sides_says_how_each_ended() -> None:
    mine = result([("diverged", 1.0, 9e4), ("complete", 0.1, 7e4)])
    base = result([("complete", 0.2, 7e4), ("diverged", 2.0, 9e4)])
    out = pd.compare(mine, base, METRICS)
    assert out["metrics"]["throughput"]["not_completed"] == (
        "no seed completed on both sides (this configuration diverged on 1 of 2 seeds, complete "
        "on 1 of 2 seeds; the baseline complete on 1 of 2 seeds, diverged on 1 of 2 seeds)"
    )
    assert out["metrics"]["throughput"]["verdict"] == "not compared"
