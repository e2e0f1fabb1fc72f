"""What a recipe records for `autotune migrate` (`recorded`), checked where the recipe is
loaded: a malformed `recorded.verified` or `recorded.curve` is refused with the key named, not a
traceback in migrate, which computes with them (the spread bound, the curve comparison)."""

from __future__ import annotations

import itertools
from typing import Any


def verified_problem(v: Any) -> str | None:
    """What is wrong with a recipe's `recorded.verified` (None: absent or well formed): a
    mapping of `steps` (an integer) and `runs`, each a mapping whose `metrics` map names to
    numbers (`autotune migrate` computes with them)."""
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("runs"), list):
        return "must be a mapping with a list of runs"
    if isinstance(v.get("steps"), bool) or not isinstance(v.get("steps"), int):
        return f"steps must be an integer, not {v.get('steps')!r}"
    for i, r in enumerate(v["runs"]):
        metrics = r.get("metrics") if isinstance(r, dict) else None
        if not isinstance(metrics, dict) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in metrics.values()
        ):
            return f"runs[{i}] must be a mapping whose metrics are numbers"
    return None


def curve_problem(c: Any) -> str | None:
    """What is wrong with a recipe's `recorded.curve` (None: absent or well formed): a mapping
    of `step` (step numbers, rising) and `value` (a number or null per step, as many), `seed`
    and `steps_run` integers or null (`autotune migrate` compares a run with it)."""
    if c is None:
        return None
    if not isinstance(c, dict):
        return "must be a mapping of step and value lists"
    steps, values = c.get("step"), c.get("value")
    if not isinstance(steps, list) or not all(_is_int(x) and x >= 0 for x in steps):
        return "step must be a list of step numbers"
    if any(b <= a for a, b in itertools.pairwise(steps)):
        return "step must rise"
    if not isinstance(values, list) or len(values) != len(steps):
        return f"value must be a list as long as step ({len(steps)})"
    if not all(
        x is None or (isinstance(x, int | float) and not isinstance(x, bool)) for x in values
    ):
        return "value must hold numbers (or null)"
    for key in ("seed", "steps_run"):
        if c.get(key) is not None and not _is_int(c.get(key)):
            return f"{key} must be an integer, not {c.get(key)!r}"
    if not isinstance(c.get("metric", "loss"), str):
        return "metric must be a name"
    return None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
