"""The throughput interval from a probe's own step timings, on synthetic step-time series: the
order-statistic ranks, coverage under independent noise, width under a burst of load, and the
interval as `summarize` reports it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.probe import metrics as m
from autotune.probe import timing


def binom_below(n: int, j: int) -> float:
    return sum(math.comb(n, i) for i in range(j)) / 2**n


@pytest.mark.parametrize("n", range(1, 41))
def test_the_order_rank_is_the_largest_with_95_percent_coverage(n: int) -> None:
    j = timing.order_rank(n)
    if n < 6:
        assert j is None  # the extremes of 5 values cover 1 - 2/32 = 93.75%
        assert 1 - 2 * binom_below(n, 1) < 0.95
        return
    assert j is not None
    assert 1 - 2 * binom_below(n, j) >= 0.95  # [x_(j), x_(n+1-j)] covers the median
    assert 1 - 2 * binom_below(n, j + 1) < 0.95  # and one rank narrower would not


def test_ten_batches_give_the_second_smallest_and_second_largest_batch_median() -> None:
    assert timing.order_rank(10) == 2
    x = np.arange(100, dtype=float)  # batches of 10: medians 4.5, 14.5, ..., 94.5
    assert list(timing.batch_medians(x)) == [4.5 + 10 * k for k in range(10)]
    assert timing.median_interval(x) == (14.5, 84.5)
    # order matters (contiguous batches), the same values shuffled mix the batches
    assert timing.median_interval(x[::-1]) == (14.5, 84.5)


def test_too_few_steps_give_no_interval() -> None:
    lo, hi = timing.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert math.isnan(lo) and math.isnan(hi)
    assert timing.median_interval([5.0, 1.0, 4.0, 2.0, 3.0, 6.0]) == (1.0, 6.0)  # 6: extremes


def test_the_interval_covers_the_true_median_about_95_percent_of_the_time() -> None:
    # independent log-normal step times, 135 steady steps (a 150-step screen): the interval of
    # the median step time holds the distribution's median (0.1 s) in >= 95% of 400 series
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        t = 0.1 * np.exp(rng.normal(0.0, 0.2, 135))
        lo, hi = timing.median_interval(t)
        hits += lo <= 0.1 <= hi
    assert hits / 400 >= 0.93  # nominal >= 0.979 for 10 batches; a margin for 400 draws
    assert hits / 400 < 1.0  # not vacuous: the interval is not everything


def test_a_burst_of_load_widens_the_interval() -> None:
    rng = np.random.default_rng(3)
    quiet = 0.1 * np.exp(rng.normal(0.0, 0.05, 300))
    busy = quiet.copy()
    busy[120:200] *= 1.5  # another job took the cores for a quarter of the run
    q_lo, q_hi = timing.median_interval(quiet)
    b_lo, b_hi = timing.median_interval(busy)
    assert (b_hi - b_lo) > 3 * (q_hi - q_lo)
    assert b_lo <= float(np.median(busy)) <= b_hi


def test_throughput_interval_is_the_rate_of_the_step_time_interval_and_holds_the_point() -> None:
    rng = np.random.default_rng(11)
    t = np.r_[np.full(10, 2.0), 0.05 * np.exp(rng.normal(0.0, 0.1, 190))]  # 20 warm-up steps
    tp = m.throughput(t, 64)
    lo, hi = m.throughput_interval(t, 64)
    s_lo, s_hi = timing.median_interval(t[20:])
    assert (lo, hi) == pytest.approx((64 / s_hi, 64 / s_lo))
    assert lo < tp < hi
    assert hi / lo < 1.2  # 10% step-time noise over 180 steps: a few percent either side
    # the slow warm-up steps are left out, as throughput leaves them out
    assert lo > 64 / 0.2


def test_identical_configurations_under_drifting_load_overlap() -> None:
    # The same configuration twice on a busy machine: the second run meets a slow phase. The
    # medians differ by ~20%; each run's own timings show the load moving, and the intervals
    # overlap: a tie, not a difference.
    rng = np.random.default_rng(5)
    base = 0.1 * np.exp(rng.normal(0.0, 0.05, 200))
    first = base.copy()
    first[130:] *= 1.3
    second = base[::-1].copy()
    second[:130] *= 1.3
    a, b = m.throughput_interval(first, 32), m.throughput_interval(second, 32)
    assert abs(m.throughput(first, 32) / m.throughput(second, 32) - 1) > 0.15
    assert a[0] <= b[1] and b[0] <= a[1]


def test_the_interval_is_deterministic() -> None:
    t = 0.1 * np.exp(np.random.default_rng(0).normal(0.0, 0.3, 500))
    assert m.throughput_interval(t, 8) == m.throughput_interval(t.copy(), 8)
