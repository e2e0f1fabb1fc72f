"""One paired verdict compares several metrics (the final loss and each objective) and reads
`better` if any is better: each metric's interval is at 1 - 0.05 / m, so that the verdict says
`better` or `worse` for a configuration no different from the baseline at most 5% of the time
(a black-box review: a study's "BETTER on final_loss" from 3 seeds, x0.886 [x0.795, x0.988],
did not hold on 4 fresh seeds, x0.958 [x0.867, x1.06])."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from autotune.recipe import paired
from autotune.recipe.seeds import summarize_seeds

THREE = [("final_loss", "minimize"), ("noise_per_drop", "minimize"), ("loss_cv", "minimize")]


def runs(rows: list[dict[str, float]]) -> dict[str, Any]:
    return summarize_seeds(
        [
            {
                "seed": seed,
                "outcome": "complete",
                "summary": {"steps_run": 10, "steps_planned": 10, "metrics": metrics},
            }
            for seed, metrics in enumerate(rows, 1)
        ],
        metrics=[m for m, _ in THREE],
    )


def test_the_level_of_each_metric_is_shared_out_over_the_metrics_judged() -> None:
    assert paired.family_level(["final_loss"]) == pytest.approx(0.95)
    assert paired.family_level(["final_loss", "noise_per_drop"]) == pytest.approx(0.975)
    assert paired.family_level([m for m, _ in THREE]) == pytest.approx(1 - 0.05 / 3)
    assert paired.family_level([]) == pytest.approx(0.95)


# The pick's final loss, per seed, x0.90 / x0.92 / x0.95 the baseline's: its log ratios' 95%
# interval excludes 1, their 98.3% one does not.
SHIFT = [math.exp(-0.105), math.exp(-0.08), math.exp(-0.055)]


def test_a_shift_that_one_metric_shows_at_95_is_not_enough_among_three() -> None:
    base = runs(
        [{"final_loss": 1.0, "noise_per_drop": 0.1 + i, "loss_cv": 0.2 + i} for i in (0, 1, 2)]
    )
    mine = runs(
        [
            {"final_loss": r, "noise_per_drop": 0.1 + i, "loss_cv": 0.2 + i}
            for i, r in enumerate(SHIFT)
        ]
    )
    alone = paired.compare(mine, base, THREE[:1])
    assert alone["level"] == pytest.approx(0.95)
    assert alone["verdict"] == "better", "one metric judged at 95%"
    three = paired.compare(mine, base, THREE)
    assert three["level"] == pytest.approx(1 - 0.05 / 3)
    assert three["metrics"]["final_loss"]["level"] == three["level"]
    assert three["verdict"] == "no detectable difference", three["metrics"]["final_loss"]


def test_no_difference_reads_better_or_worse_at_most_5_percent_of_the_time() -> None:
    """Three independent metrics, three seeds, the pick no different from the baseline: the
    verdict says something other than "no detectable difference" in ~5% of draws (at 95% for
    each metric it did in ~14%)."""
    rng = random.Random(7)
    said = 0
    draws = 1000
    for _ in range(draws):
        rows = [
            [{m: math.exp(rng.gauss(0.0, 0.1)) for m, _ in THREE} for _ in range(3)]
            for _ in range(2)
        ]
        v = paired.compare(runs(rows[0]), runs(rows[1]), THREE)
        said += v["verdict"] != "no detectable difference"
    assert said / draws < 0.08, said / draws


def test_the_line_says_at_what_level_each_metric_was_judged() -> None:
    base = runs([{"final_loss": 1.0, "noise_per_drop": 0.1, "loss_cv": 0.2 + i} for i in (0, 1)])
    mine = runs(
        [{"final_loss": 0.5 + i / 10, "noise_per_drop": 0.1, "loss_cv": 0.2} for i in (0, 1)]
    )
    line = paired.format_line(paired.compare(mine, base, THREE))
    assert line.endswith("(each metric's interval at 98.3%: 3 metrics compared)"), line
    alone = paired.format_line(paired.compare(mine, base, THREE[:1]))
    assert "each metric's interval" not in alone, "95% for one metric: nothing to say"


def test_the_line_gives_the_figure_of_the_metric_that_decided() -> None:
    """A blind user check: `BETTER: better than the baseline: noise_per_drop; final_loss x0.221
    the baseline's [x0.0145, x3.37]`: the figure beside the verdict held no change. The line
    gives the deciding metric's figure where the final loss did not decide."""
    mine = runs(
        [
            {"final_loss": f, "noise_per_drop": 0.01 * k, "loss_cv": 0.1}
            for f, k in ((0.5, 1.0), (2.0, 1.1), (0.9, 0.9))
        ]
    )
    base = runs(
        [
            {"final_loss": f, "noise_per_drop": 0.05 * k, "loss_cv": 0.1}
            for f, k in ((1.0, 1.0), (1.0, 1.1), (1.0, 0.9))
        ]
    )
    v = paired.compare(mine, base, THREE)
    assert v["verdict"] == "better" and v["metrics"]["final_loss"]["verdict"] != "better"
    line = paired.format_line(v)
    assert "; noise_per_drop x0.2 the baseline's [x0.2, x0.2]" in line, line
    assert "; final_loss" not in line
    # where the final loss decided, its figure, as before
    v = paired.compare(base, base, THREE)
    assert "; final_loss x1 the baseline's" in paired.format_line(v)
