"""Two or more runs' step series compared bit for bit: what `autotune repro` judges determinism
by, and what tells a study's verification and `autotune verify` that a workload ignores its
seed (`recipe.seed_effect`). Here, below both, so that the two use one check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def compare_run_series(runs: Sequence[Sequence[float | None]]) -> dict[str, Any]:
    """Compare each run's series with the first, step by step.

    Two values are equal when their float64 bits are (a NaN equals a NaN of the same bits).
    Returns `bitwise_equal`, `steps` (compared: the shortest run), `length_mismatch`,
    `differing_steps`, `first_diff_step`, `first_diff_values` (each run's value there, a
    non-finite one as the string "nan", "inf" or "-inf": a NaN against a number is no
    difference of 0), `max_abs_diff` (over steps where both are finite; None when a difference
    is only in non-finite values), `one_finite_steps` (steps where a run is finite and the
    first is not, or the reverse) and `per_step_max_abs` (per step, the largest difference of
    any run from the first; None where only one side is finite).
    """
    arrays = [np.array([np.nan if v is None else v for v in r], dtype=np.float64) for r in runs]
    n = min(a.size for a in arrays)
    ref = arrays[0][:n]
    differs = np.zeros(n, dtype=bool)
    per_step = np.zeros(n, dtype=np.float64)
    for other in arrays[1:]:
        o = other[:n]
        differs |= ref.view(np.int64) != o.view(np.int64)
        finite = np.isfinite(ref) & np.isfinite(o)
        gap = np.where(finite, np.abs(ref - o), np.where(np.isnan(ref) & np.isnan(o), 0.0, np.inf))
        gap = np.where(ref.view(np.int64) == o.view(np.int64), 0.0, gap)
        per_step = np.maximum(per_step, gap)
    length_mismatch = len({a.size for a in arrays}) > 1
    idx = np.flatnonzero(differs)
    finite_gaps = per_step[np.isfinite(per_step)]
    return {
        "bitwise_equal": not idx.size and not length_mismatch,
        "steps": int(n),
        "lengths": [int(a.size) for a in arrays],
        "length_mismatch": length_mismatch,
        "differing_steps": int(idx.size),
        "first_diff_step": int(idx[0]) if idx.size else None,
        "first_diff_values": [_plain(a[idx[0]]) for a in arrays] if idx.size else None,
        "one_finite_steps": int(np.count_nonzero(np.isinf(per_step))),
        "max_abs_diff": float(finite_gaps.max()) if finite_gaps.size else None,
        "per_step_max_abs": [float(x) if np.isfinite(x) else None for x in per_step],
    }


def _plain(x: float) -> float | str:
    """A value for JSON: a float, or a non-finite one by name (JSON has no NaN)."""
    return float(x) if np.isfinite(x) else str(float(x))
