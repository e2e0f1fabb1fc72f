"""Whether `autotune repro --seeds` shows the seed matters: the runs on different seeds must
differ by more than two runs of one seed do.

A script that ignores its seed but adds a little run-to-run noise (a value from os.urandom, a
timer, a nondeterministic kernel) gives runs on different seeds that differ, by that noise
alone; a bit-for-bit check alone would take that for the seed's effect. So `run_repro` also
runs the first seed a second time, and per reported series (loss, gradient norm) the largest
difference between the seeds' runs is compared with the largest difference between the two runs
of one seed: the seed matters when, in every series reported, it is more than `FACTOR` times
that noise (any difference at all, when the two runs of one seed are bitwise equal). A
gradient-norm series equal across seeds therefore says the seed is ignored, whatever the loss
does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.series_equal import compare_run_series

#: How many times one seed's run-to-run difference the seeds' difference must exceed.
FACTOR = 10.0


def judge(
    runs: Sequence[Mapping[str, Any]], repeat: Mapping[str, Any], series: Sequence[str]
) -> dict[str, Any]:
    """`matters` and, per series reported by every run, `between_seeds` and `same_seed` (the
    largest absolute difference; inf where a value is finite in one run and not the other, or
    the lengths differ) and `above` (the seeds' difference beyond the noise)."""
    per: dict[str, Any] = {}
    for name in series:
        values = [list(r["series"].get(name) or []) for r in runs]
        again = list(repeat["series"].get(name) or [])
        if not all(_reported(v) for v in [*values, again]):
            continue  # not reported (a script's grad_norm, say): nothing to judge by
        effect = _gap(compare_run_series(values))
        noise = _gap(compare_run_series([values[0], again]))
        above = effect > FACTOR * noise if noise > 0 else effect > 0
        per[name] = {"between_seeds": effect, "same_seed": noise, "above": bool(above)}
    matters = bool(per) and all(p["above"] for p in per.values())
    return {"matters": matters, "factor": FACTOR, "series": per}


def text(effect: Mapping[str, Any], seed: int) -> str:
    """The verdict line of `repro --seeds`, with the numbers it is judged by."""
    parts = [
        f"{name} {_num(p['between_seeds'])} between seeds, {_num(p['same_seed'])} between two "
        f"runs of seed {seed}"
        for name, p in effect["series"].items()
    ]
    numbers = "; ".join(parts) or "no series reported"
    if effect["matters"]:
        return (
            "different seeds: the runs differ, as they should, beyond one seed's run-to-run "
            f"noise ({numbers})"
        )
    if all(p["between_seeds"] == 0 for p in effect["series"].values()):
        return f"different seeds: the runs are identical: the seed has no effect ({numbers})"
    return (
        f"different seeds: the runs differ no more than {effect['factor']:g}x two runs of one "
        f"seed do ({numbers}): the workload ignores its seed, or its noise hides the seed's "
        "effect, so runs over seeds (verification, the paired verdicts) measure nothing of it"
    )


def _reported(values: Sequence[Any]) -> bool:
    return any(v is not None for v in values)


def _gap(s: Mapping[str, Any]) -> float:
    """The largest difference of a comparison: 0 when bitwise equal, inf where it is not a
    number (a value finite in one run only, runs of different lengths)."""
    if s["bitwise_equal"]:
        return 0.0
    if s["length_mismatch"] or s.get("one_finite_steps"):
        return math.inf
    return float(s["max_abs_diff"] or 0.0)


def _num(x: float) -> str:
    return "identical" if x == 0 else ("a non-finite gap" if math.isinf(x) else f"{x:.3g}")
