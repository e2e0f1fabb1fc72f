"""A timed metric (throughput) is paired only between runs timed together.

The study runs the baseline's verification seeds beside its top rung and the candidates' in
the verification phase (`autotune.study.beside`): a change in the machine's load between the
two reads as a throughput difference. `paired.compare` leaves such pairs out of a timed metric
(`timing_group`), and says so; the loss metrics are paired as before."""

from __future__ import annotations

import math
from typing import Any

import pytest

from autotune.recipe import paired
from autotune.recipe.seeds import summarize_seeds, timing_group, timing_where

METRICS = [("final_loss", "minimize"), ("throughput", "maximize")]


def runs(losses: list[float], speeds: list[float], groups: list[str | None]) -> dict[str, Any]:
    return summarize_seeds(
        [
            {
                "seed": seed,
                "outcome": "complete",
                "timing_group": group,
                "summary": {
                    "steps_run": 100,
                    "steps_planned": 100,
                    "metrics": {"final_loss": loss, "throughput": speed},
                },
            }
            for seed, (loss, speed, group) in enumerate(zip(losses, speeds, groups, strict=True), 1)
        ],
        metrics=["final_loss", "throughput"],
    )


BESIDE = timing_group("beside the top rung")
VERIFICATION = timing_group("in the verification phase")
LOSSES = [1.0, 1.1, 0.9]
SLOWER = [900.0, 905.0, 902.0]  # the pick's runs: 10% slower than the baseline's on each seed
BASE_SPEED = [1000.0, 1004.0, 1001.0]


def test_timing_groups_name_where_and_when() -> None:
    assert BESIDE.startswith("beside the top rung@20") and "T" in BESIDE
    assert timing_where(BESIDE) == "beside the top rung"
    assert timing_where(None) == "at another time"


def test_throughput_timed_together_is_judged() -> None:
    mine = runs(LOSSES, SLOWER, [VERIFICATION] * 3)
    base = runs(LOSSES, BASE_SPEED, [VERIFICATION] * 3)
    v = paired.compare(mine, base, METRICS)
    assert v["metrics"]["throughput"]["verdict"] == "worse"
    assert "apart_seeds" not in v["metrics"]["throughput"]
    assert v["verdict"] == "worse" and v["worse_on"] == ["throughput"]


def test_runs_recorded_without_a_group_are_one_batch() -> None:
    """`autotune verify` and migrate interleave both arms in one batch and record no group."""
    v = paired.compare(
        runs(LOSSES, SLOWER, [None] * 3), runs(LOSSES, BASE_SPEED, [None] * 3), METRICS
    )
    assert v["metrics"]["throughput"]["verdict"] == "worse"


def test_throughput_timed_apart_is_not_compared_and_counts_for_nothing() -> None:
    mine = runs([0.5, 0.55, 0.45], SLOWER, [VERIFICATION] * 3)
    base = runs(LOSSES, BASE_SPEED, [BESIDE] * 3)
    v = paired.compare(mine, base, METRICS)
    row = v["metrics"]["throughput"]
    assert row["verdict"] == "not compared"
    assert row["apart_seeds"] == [1, 2, 3]
    assert "beside the top rung" in row["apart"] and "in the verification phase" in row["apart"]
    assert row["difference"]["n"] == 0
    # the loss is still paired: a 2x lower final loss on each seed is better, not mixed
    assert v["metrics"]["final_loss"]["verdict"] == "better"
    assert v["verdict"] == "better" and v["worse_on"] == []
    assert "throughput not compared" in v["why"] and "autotune verify" in v["why"]


def test_no_difference_says_which_metrics_it_judged() -> None:
    v = paired.compare(
        runs(LOSSES, SLOWER, [VERIFICATION] * 3), runs(LOSSES, BASE_SPEED, [BESIDE] * 3), METRICS
    )
    assert v["verdict"] == "no detectable difference"
    assert "(final_loss)" in v["why"], v["why"]
    assert "throughput not compared" in v["why"]


def test_only_the_seeds_timed_together_pair_a_timed_metric() -> None:
    mine = runs(LOSSES, SLOWER, [VERIFICATION] * 3)
    base = runs(LOSSES, BASE_SPEED, [VERIFICATION, VERIFICATION, BESIDE])
    row = paired.compare(mine, base, METRICS)["metrics"]["throughput"]
    assert row["apart_seeds"] == [3]
    assert row["difference"]["n"] == 2
    assert row["verdict"] == "worse", "two seeds timed together, 10% slower on both"
    assert "seed [3]" in row["apart"]


def test_the_level_is_the_same_whether_throughput_was_timed_apart_or_together() -> None:
    """A review: a study (the baseline's seeds beside the top rung) read the pick's final loss
    BETTER at 97.5% ("2 metrics compared"), `autotune verify` of the same final losses (timed
    interleaved) NO DETECTABLE DIFFERENCE at 98.3% ("3 metrics compared"): the timed metric
    left the study's family. It counts in both, so the same losses give one verdict."""
    shift = [math.exp(-0.105), math.exp(-0.08), math.exp(-0.055)]  # x0.90, x0.92, x0.95
    apart = paired.compare(
        runs(shift, SLOWER, [VERIFICATION] * 3), runs([1.0] * 3, BASE_SPEED, [BESIDE] * 3), METRICS
    )
    together = paired.compare(
        runs(shift, SLOWER, [None] * 3), runs([1.0] * 3, BASE_SPEED, [None] * 3), METRICS
    )
    assert apart["metrics"]["throughput"]["verdict"] == "not compared"
    assert apart["level"] == together["level"] == pytest.approx(0.975)
    fl_apart, fl_together = apart["metrics"]["final_loss"], together["metrics"]["final_loss"]
    assert fl_apart["ratio"] == fl_together["ratio"]
    assert fl_apart["verdict"] == fl_together["verdict"] == "no detectable difference"
    line = paired.format_line(apart)
    assert line.endswith(
        "(each metric's interval at 97.5%: 2 metrics measured on both sides, 1 compared)"
    ), line
    assert paired.format_line(together).endswith("97.5%: 2 metrics compared)")
