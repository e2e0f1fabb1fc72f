"""The timing noise of a probe: a 95% interval for the median of its steady step times.

Step times on a shared machine are not independent draws: another job's burst slows a run of
consecutive steps, and the load drifts over a probe. The interval is therefore taken over
*batch medians* (the batch-means method of simulation output analysis, with medians): the steady
step times, in the order they ran, are cut into ``B = min(BATCHES, m)`` contiguous batches of
near-equal length (``m`` steady steps), each batch is summarised by its median, and the
interval is the distribution-free order-statistic interval of the median of those ``B`` values::

    [b_(j), b_(B + 1 - j)]     b_(1) <= ... <= b_(B) the sorted batch medians,
                               j the largest rank with P(Binomial(B, 1/2) < j) <= (1 - LEVEL) / 2

It covers the median with probability at least ``LEVEL`` (0.95) whatever the distribution of the
batch medians, as long as they are independent of one another; a burst or a drift that lasts
less than a batch moves one or two batch medians, which the interval then spans. With ``B = 10``
(``m >= 10``) ``j = 2``: from the second smallest batch median to the second largest (coverage
97.9%). With 6 to 9 steady steps each batch is one step: the plain order-statistic interval of
the median. Below 6 steps no pair of order statistics reaches 95% (the extremes of 5 cover
93.75%): no interval (NaN). Exact integer arithmetic, no randomness: the same series always gives
the same interval.

Pure numpy: this module must not import torch, ray, mlflow or optuna.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

LEVEL: Final[float] = 0.95
"""The coverage of the interval (two-sided)."""

BATCHES: Final[int] = 10
"""At most this many contiguous batches. Ten batches of a probe of a few hundred steps are
10-50 steps each: long enough that a batch median is steady under independent noise, short
enough that a burst of load of a few seconds shows as a batch of its own."""


def order_rank(n: int, level: float = LEVEL) -> int | None:
    """The rank ``j`` (1-based) of the lower end of the order-statistic interval of the median
    of ``n`` values: the largest ``j`` with ``P(Binomial(n, 1/2) < j) <= (1 - level) / 2``;
    the upper end is rank ``n + 1 - j``. None when even the extremes (``j = 1``) cover less than
    ``level`` (``n < 6`` at 95%)."""
    if n < 1:
        return None
    total = 2**n
    below = 0  # sum of C(n, i) for i < j, exact
    j = 0
    while j < n and (below + math.comb(n, j)) <= (1.0 - level) / 2.0 * total:
        below += math.comb(n, j)
        j += 1
    return j if j >= 1 else None


def batch_medians(x: npt.ArrayLike, batches: int = BATCHES) -> npt.NDArray[np.float64]:
    """The medians of ``min(batches, len(x))`` contiguous, near-equal batches of ``x`` (in
    order; ``np.array_split``)."""
    arr = np.asarray(x, dtype=np.float64)
    if not arr.size:
        return np.empty(0)
    parts = np.array_split(arr, min(batches, arr.size))
    return np.array([float(np.median(p)) for p in parts])


def median_interval(x: npt.ArrayLike, level: float = LEVEL) -> tuple[float, float]:
    """``(low, high)``: the interval of the median of ``x`` over its batch medians (see the
    module docstring), widened where needed to contain ``median(x)``; ``(nan, nan)`` when ``x``
    is too short (fewer than 6 values at 95%)."""
    arr = np.asarray(x, dtype=np.float64)
    meds = np.sort(batch_medians(arr))
    j = order_rank(meds.size, level)
    if j is None:
        return math.nan, math.nan
    centre = float(np.median(arr))
    return min(float(meds[j - 1]), centre), max(float(meds[meds.size - j]), centre)
