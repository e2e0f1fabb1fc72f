"""The paired verdict (`autotune.recipe.paired`) where its mutants survived the other tests: the
per-seed ratio of a positive metric (no ratio with a value <= 0, seeds paired one to one, the
record's shape), the two sides' intervals on the log scale, the seeds compared (both whole), a
verdict over no paired seed or with nothing run whole, the verdict line of a final loss judged
by its difference, and the reason two timed metrics measured apart are not compared. Pure
functions; expected values are worked from the formulas, not read back from the code."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from autotune.recipe import paired as pd
from autotune.recipe.seeds import summarize_seeds, timing_group

T2 = 4.303  # t(0.975, 2): three seeds
FINAL = [("final_loss", "minimize")]


def result(finals: list[float], outcomes: list[str] | None = None) -> dict[str, Any]:
    """Seeds 1, 2, ... with these final losses; a seed that is not complete stopped early."""
    outcomes = outcomes or ["complete"] * len(finals)
    runs = [
        {
            "seed": seed,
            "outcome": outcome,
            "summary": {
                "metrics": {"final_loss": final, "loss_cv": 0.1, "loss_drop": 1 - final / 3},
                "steps_run": 30 if outcome == "complete" else 12,
                "steps_planned": 30,
            },
        }
        for seed, (final, outcome) in enumerate(zip(finals, outcomes, strict=True), 1)
    ]
    return summarize_seeds(runs, ["final_loss", "loss_cv", "loss_drop"])


def log_interval(values: list[float]) -> tuple[float, float, float]:
    """(low, geometric mean, high) of three positive values: t(2) on the logs, mapped back."""
    logs = [math.log(v) for v in values]
    mid = statistics.fmean(logs)
    half = T2 * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mid - half), math.exp(mid), math.exp(mid + half)


def test_the_ratio_record_is_the_geometric_mean_of_the_per_seed_ratios_on_the_log_scale() -> None:
    mine, base = [1.5, 1.6, 1.4], [2.0, 2.1, 1.9]
    lo, geo, hi = log_interval([a / b for a, b in zip(mine, base, strict=True)])
    got = pd.paired_ratio(mine, base)
    assert got is not None
    assert got.keys() == {"mean", "low", "high", "n", "scale"}
    assert got["scale"] == "log" and got["n"] == 3
    assert (got["low"], got["mean"], got["high"]) == pytest.approx((lo, geo, hi))
    out = pd.compare(result(mine), result(base), FINAL)
    assert out["metrics"]["final_loss"]["ratio"] == got


def test_a_pair_holding_zero_or_a_negative_value_has_no_ratio() -> None:
    # a zero on either side (log 0, a division by 0) and negatives on both (a positive ratio
    # of values that are no positive quantity) give no ratio; nor does no pair at all
    assert pd.paired_ratio([0.0, 1.0], [1.0, 2.0]) is None
    assert pd.paired_ratio([1.0, 1.0], [0.0, 2.0]) is None
    assert pd.paired_ratio([-1.0, -2.0], [-2.0, -4.0]) is None
    assert pd.paired_ratio([None, math.nan], [1.0, 1.0]) is None
    assert pd.paired_ratio([], []) is None
    # a non-finite or missing value leaves its seed out; the others still give a ratio
    one = pd.paired_ratio([2.0, None, math.inf], [1.0, 1.0, 1.0])
    assert one == {"mean": pytest.approx(2.0), "low": None, "high": None, "n": 1, "scale": "log"}


def test_the_ratio_pairs_seed_by_seed_sequences_of_other_lengths_are_an_error() -> None:
    # pairs are by seed: a missing seed is None in its place, never a shorter list cut short
    with pytest.raises(ValueError):
        pd.paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        pd.paired_ratio([1.0], [1.0, 2.0])


def test_both_sides_intervals_of_a_positive_metric_are_on_the_log_scale() -> None:
    mine, base = [1.5, 1.6, 1.4], [2.0, 2.1, 1.9]
    out = pd.compare(result(mine), result(base), FINAL)["metrics"]["final_loss"]
    for side, values in (("pick", mine), ("baseline", base)):
        lo, geo, hi = log_interval(values)
        assert out[side]["scale"] == "log", side
        assert (out[side]["low"], out[side]["mean"], out[side]["high"]) == pytest.approx(
            (lo, geo, hi)
        ), side
    # a metric that can be 0 or negative keeps linear intervals, its values here all > 0
    drop = pd.compare(result(mine), result(base), [("loss_drop", "maximize")])["metrics"]
    for side in ("pick", "baseline"):
        assert drop["loss_drop"][side]["n"] == 3 and "scale" not in drop["loss_drop"][side]


def test_the_compared_seeds_are_those_both_sides_ran_whole() -> None:
    # seed 2 of the baseline stopped early (diverged): it counts for divergence, not metrics
    mine = result([1.5, 1.6, 1.4])
    base = result([2.0, 9.0, 1.9], ["complete", "diverged", "complete"])
    out = pd.compare(mine, base, FINAL)
    assert out["seeds"] == [1, 2, 3]
    assert out["compared_seeds"] == [1, 3]
    assert out["metrics"]["final_loss"]["difference"]["n"] == 2
    # and the other way round
    assert pd.compare(base, mine, FINAL)["compared_seeds"] == [1, 3]
    line = pd.format_line(out, "trial 4")
    assert line.startswith(
        "trial 4 vs baseline (paired over seeds [1, 3] of [1, 2, 3]: the others did not run "
        "whole): BETTER: better than the baseline: "
    )


def test_a_metric_neither_side_recorded_is_no_detectable_difference_over_0_paired_seeds() -> None:
    # both ran whole on every seed, but the objective compared is in neither's records: no
    # pair to judge it by, no divergence on either side
    out = pd.compare(result([1.5, 1.6]), result([2.0, 2.1]), [("noise_per_drop", "minimize")])
    assert out["compared_seeds"] == [1, 2]
    assert out["metrics"]["noise_per_drop"]["difference"]["n"] == 0
    assert out["verdict"] == "no detectable difference"
    assert out["why"] == (  # the metric asked for is named as not compared, not as compared
        "no difference beyond the seed noise over 0 paired seeds (no metric with a finite "
        "pair); noise_per_drop not compared: no finite pair"
    )
    both = [("final_loss", "minimize"), ("noise_per_drop", "minimize")]
    out = pd.compare(result([1.5, 1.6]), result([1.55, 1.58]), both)
    assert out["why"] == (
        "no difference beyond the seed noise over 2 paired seeds (final_loss); noise_per_drop "
        "not compared: no finite pair"
    )


def test_a_final_loss_with_a_zero_is_judged_and_printed_by_its_difference() -> None:
    mine, base = [0.0, 0.5, 0.25], [1.0, 1.2, 1.1]
    out = pd.compare(result(mine), result(base), FINAL)
    fl = out["metrics"]["final_loss"]
    assert "ratio" not in fl
    diffs = [a - b for a, b in zip(mine, base, strict=True)]  # -1, -0.7, -0.85
    mean = statistics.fmean(diffs)
    half = T2 * statistics.stdev(diffs) / math.sqrt(3)
    assert fl["difference"]["mean"] == pytest.approx(mean)
    assert fl["verdict"] == "better"  # the interval [-1.22, -0.48] lies below 0
    assert pd.format_line(out) == (
        "pick vs baseline (paired over seeds [1, 2, 3]): BETTER: better than the baseline: "
        f"final_loss; final_loss difference {mean:+.4g} [{mean - half:+.4g}, {mean + half:+.4g}]"
    )
    one = pd.compare(result([0.0]), result([1.0]), FINAL)
    assert "ratio" not in one["metrics"]["final_loss"]
    assert pd.format_line(one, "recipe") == (
        "recipe vs baseline (paired over seeds [1]): NO DETECTABLE DIFFERENCE: no difference "
        "beyond the seed noise over 1 paired seed (final_loss); final_loss difference -1 "
        "(1 pair: no interval)"
    )


def timed(speeds: list[float], group: str) -> dict[str, Any]:
    """Seeds 1, 2, ... of equal final loss, timed in `group`, with these throughputs."""
    runs = [
        {
            "seed": seed,
            "outcome": "complete",
            "timing_group": group,
            "summary": {
                "metrics": {"final_loss": 1.0, "throughput": v, "tokens_per_s": 8 * v},
                "steps_run": 30,
                "steps_planned": 30,
            },
        }
        for seed, v in enumerate(speeds, 1)
    ]
    return summarize_seeds(runs, ["final_loss", "throughput", "tokens_per_s"])


def test_two_timed_metrics_measured_apart_are_named_with_the_seeds_they_were_apart_on() -> None:
    mine = timed([900.0, 905.0], timing_group("in the verification phase"))
    base = timed([1000.0, 1004.0], timing_group("beside the top rung"))
    metrics = [*FINAL, ("throughput", "maximize"), ("tokens_per_s", "maximize")]
    out = pd.compare(mine, base, metrics)
    assert [out["metrics"][m]["verdict"] for m in ("throughput", "tokens_per_s")] == [
        "not compared",
        "not compared",
    ]
    assert out["verdict"] == "no detectable difference"
    assert out["why"] == (
        "no difference beyond the seed noise over 2 paired seeds (final_loss); "
        "throughput, tokens_per_s not compared: the runs of seeds [1, 2] were timed apart "
        "(this configuration's in the verification phase, the baseline's beside the top rung), "
        "so a change in the machine's load would read as a difference; `autotune verify` times "
        "both interleaved"
    )


def test_nothing_run_whole_on_either_side_says_how_each_seed_ended() -> None:
    def ended(seed: int, outcome: str | None) -> dict[str, Any]:
        return {"seed": seed, "outcome": outcome, "summary": None}

    mine = summarize_seeds([ended(1, "failed"), ended(2, None)])  # seed 2: no outcome recorded
    base = summarize_seeds([ended(1, "failed"), ended(2, "failed")])
    out = pd.compare(mine, base, FINAL)
    assert out["verdict"] == "not compared" and out["compared_seeds"] == []
    assert out["why"] == (
        "no seed ran its whole length on both sides: this configuration failed on 1 of 2 seeds, "
        "did not run on 1 of 2 seeds; the baseline failed on 2 of 2 seeds"
    )
