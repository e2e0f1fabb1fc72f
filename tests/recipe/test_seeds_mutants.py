"""Intervals over seeds (`autotune.recipe.seeds`) where its mutants survived the other tests:
the empty and one-value intervals, the log scale's fallback with a zero and its `std`, a metric
with no range of its own, the paired differences (finite pairs only, seed by seed), the
prediction interval with a zero, the t table's ends, `ran_whole` at one and zero steps, and the
runs' own timing bounds that count, and a timing group's time. Pure functions; expected values
are worked from the formulas."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from typing import Any

import pytest

from autotune.recipe import seeds as sd


def test_an_empty_and_a_one_value_interval_in_full() -> None:
    empty = {"mean": None, "std": None, "low": None, "high": None, "n": 0}
    assert sd.interval([]) == empty
    assert sd.interval([None, math.nan, math.inf]) == empty  # nothing finite
    assert sd.interval([], scale="log") == empty
    assert sd.interval([2.5]) == {"mean": 2.5, "std": None, "low": None, "high": None, "n": 1}
    assert sd.interval([2.5, None]) == sd.interval([2.5])


def test_the_log_scale_keeps_the_raw_values_std_and_needs_every_value_above_zero() -> None:
    xs = [1.0, 2.0, 4.0]
    iv = sd.interval(xs, scale="log")
    assert iv["scale"] == "log" and iv["std"] == pytest.approx(statistics.stdev(xs))
    assert iv["mean"] == pytest.approx(2.0)  # the geometric mean
    two = sd.interval([1.0, 3.0], scale="log")
    assert two["std"] == pytest.approx(statistics.stdev([1.0, 3.0]))
    assert sd.interval([3.0], scale="log")["std"] is None  # one value: no spread
    # a zero among the values: no log, the linear interval (mean 1, s 1, t(2) = 4.303)
    zero = sd.interval([0.0, 1.0, 2.0], scale="log")
    assert "scale" not in zero
    half = 4.303 / math.sqrt(3)
    assert (zero["low"], zero["mean"], zero["high"]) == pytest.approx((1 - half, 1.0, 1 + half))


def test_a_metric_without_a_range_of_its_own_is_not_clipped() -> None:
    # every listed metric has a range now (scaling_efficiency, a ratio, is positive): a name
    # outside the list stands for one that has none
    assert "unlisted_metric" not in sd.RANGES
    iv = sd.interval([-1.0, 0.5, 2.0])
    out = sd.bounded(iv, "unlisted_metric")
    assert out == iv and "clipped" not in out
    # a listed one is clipped, and says so
    assert sd.bounded(iv, "clip_fraction")["low"] == 0.0
    assert sd.bounded(iv, "clip_fraction")["high"] == 1.0
    assert sd.bounded(iv, "clip_fraction")["clipped"] is True


def test_paired_keeps_only_pairs_finite_on_both_sides() -> None:
    got = sd.paired([1.0, math.nan, 2.0, 3.0, None], [0.5, 1.0, math.inf, -math.inf, 1.0])
    assert got["differences"] == [0.5]
    assert got["n"] == 1 and got["mean"] == 0.5


def test_paired_pairs_seed_by_seed_sequences_of_other_lengths_are_an_error() -> None:
    with pytest.raises(ValueError):
        sd.paired([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        sd.paired([1.0], [1.0, 2.0])


def test_the_prediction_interval_of_a_positive_metric_with_a_zero_is_linear() -> None:
    low, high = sd.prediction_interval([0.0, 1.0, 2.0], "final_loss")  # mean 1, s 1, n 3
    half = 4.303 * math.sqrt(1 + 1 / 3)
    assert (low, high) == pytest.approx((1 - half, 1 + half))
    with pytest.raises(ValueError, match=r"^a prediction interval needs at least 2 values$"):
        sd.prediction_interval([1.0], "final_loss")
    with pytest.raises(ValueError, match="at least 2 values"):
        sd.prediction_interval([], "loss_drop")


def test_the_t_table_at_its_ends() -> None:
    assert sd.t975(120) == 1.980  # the last tabulated df
    assert sd.t975(121) == 1.960  # beyond the table: the normal quantile
    assert sd.t975(119) == 2.000  # between 60 and 120: the smaller df's (conservative)
    for df in (0, -1):
        with pytest.raises(ValueError, match=r"^df must be >= 1$"):
            sd.t975(df)


def test_ran_whole_at_one_step_and_at_zero_steps() -> None:
    assert sd.ran_whole({"steps_run": 1, "steps_planned": 1}) is True
    assert sd.ran_whole({"steps_run": 0, "steps_planned": 0}) is False  # nothing planned
    assert sd.ran_whole({"steps_run": 5, "steps_planned": 0}) is False
    assert sd.ran_whole({"steps_run": 0, "steps_planned": 1}) is False


def run(seed: int, tp: float, **bounds: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "outcome": "complete",
        "summary": {"metrics": {"throughput": tp, **bounds}},
    }


def test_only_a_runs_complete_positive_timing_bounds_widen_the_interval() -> None:
    # one run's bounds without a high end, or with a low end of 0, are no timing interval:
    # the interval over seeds stands as it is
    for bounds in ({"throughput_low": 80.0}, {"throughput_low": 0.0, "throughput_high": 120.0}):
        runs = [run(1, 100.0, **bounds), run(2, 101.0, **bounds), run(3, 99.0, **bounds)]
        iv = sd.interval([100.0, 101.0, 99.0], scale="log")
        assert sd.with_timing(iv, runs, "throughput") == iv, bounds
    # small numbers (tokens per second of a big model, say): bounds below 1 count
    runs = [run(1, 0.5, throughput_low=0.4, throughput_high=0.6)]
    one = sd.interval([0.5], scale="log")
    got = sd.with_timing(one, runs, "throughput")
    assert (got["low"], got["high"], got["timing"]) == (0.4, 0.6, True)


def test_a_timing_group_names_where_and_when_in_utc_to_the_second() -> None:
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    group = sd.timing_group("in the verification phase")
    after = dt.datetime.now(dt.timezone.utc)
    where, when = group.split("@")
    assert where == "in the verification phase" == sd.timing_where(group)
    started = dt.datetime.fromisoformat(when)
    assert started.utcoffset() == dt.timedelta(0)  # aware, in UTC: the same on every host
    assert started.microsecond == 0 and before <= started <= after
