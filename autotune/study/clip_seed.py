"""`clip_norm: auto`: the clip_norm range seeded from the baseline's own gradient norms.

A fixed threshold acts on the scale of the gradient, which a space author can only guess. With
`clip_norm: auto` the driver runs the baseline (trial 0: no clipping) first, and the range the
sampler searches becomes a log range from the median of its total gradient norms (a clip that
acts on about half the steps) to their 99th percentile (one that cuts only the spikes). The
measurement is kept in the study (`attrs.CLIP_NORM_AUTO`), so a resumed study searches the same
range, and the summary says what was measured.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from autotune import space as sp
from autotune.study import attrs as ua
from autotune.study.records import read_outcome

#: The range's ends when the norms barely vary: the median / SPREAD to the median x SPREAD.
SPREAD = 4.0


def pending(searched: dict[str, sp.Domain]) -> bool:
    """Whether the searched clip_norm is `auto` and not seeded yet."""
    domain = searched.get("clip_norm")
    return domain is not None and domain.auto


def measured_range(norms: list[Any]) -> dict[str, Any] | None:
    """{steps, median, p99, low, high} of the finite positive norms (None: none there)."""
    finite = [float(x) for x in norms if x is not None and math.isfinite(float(x)) and x > 0]
    if not finite:
        return None
    median = float(np.percentile(finite, 50))
    p99 = float(np.percentile(finite, 99))
    low, high = median, p99
    if high < low * 1.5:  # a flat run: still a range around its scale
        low, high = median / SPREAD, median * SPREAD
    return {"steps": len(finite), "median": median, "p99": p99, "low": low, "high": high}


def seed(study: Any, study_dir: Path, searched: dict[str, sp.Domain]) -> dict[str, Any] | None:
    """Seed the searched clip_norm (in place) from the study's record of the baseline's gradient
    norms, measuring it from trial 0's record the first time. None: nothing to seed, or the
    baseline left no finite norm (the placeholder range stays; the caller says so)."""
    if not pending(searched):
        return None
    info = study.user_attrs.get(ua.CLIP_NORM_AUTO)
    if info is None:
        record = read_outcome(study_dir, 0) or {}
        series = ((record.get("summary") or {}).get("series") or {}).get("grad_norm") or []
        info = measured_range(list(series))
        if info is None:
            return None
        study.set_user_attr(ua.CLIP_NORM_AUTO, info)
    searched["clip_norm"] = sp.Domain(low=info["low"], high=info["high"], log=True)
    return dict(info)


def text(info: dict[str, Any]) -> str:
    """What was measured, as the driver and the summary say it."""
    return (
        f"clip_norm: auto: the baseline's total gradient norm over {info['steps']} steps had "
        f"median {info['median']:.4g} and 99th percentile {info['p99']:.4g}; clip_norm searched "
        f"in [{info['low']:.4g}, {info['high']:.4g}] (log)"
    )
