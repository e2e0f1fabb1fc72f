"""What a recipe promises (`achieved`) and records for `autotune migrate` (`recorded`), checked
where the recipe is loaded: a malformed `achieved`, `recorded.verified`, `recorded.curve` or
`recorded.audit` is refused with the key named, before any probe runs, not a traceback (or a
false verdict) in verify, `study --warm-start` or migrate, which compute with them."""

from __future__ import annotations

import itertools
import math
from typing import Any

from autotune.probe.outcome import Outcome
from autotune.space.limits import MAX_STEPS
from autotune.space.seeds import seed_problem

#: Where a problem is (key path below the section) and what it is.
Problem = tuple[list[Any], str]

DIRECTIONS = ("minimize", "maximize")
OUTCOMES = tuple(o.value for o in Outcome)  # how a verified seed's run ended


def verified_problem(v: Any) -> str | None:
    """What is wrong with a recipe's `recorded.verified` (None: absent or well formed): a
    mapping of `steps` (an integer) and `runs`, each a mapping whose `metrics` map names to
    numbers (`autotune migrate` computes with them)."""
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("runs"), list):
        return "must be a mapping with a list of runs"
    if not is_steps(v.get("steps"), 1):
        got = steps_text(v.get("steps"))
        return f"steps must be an integer from 1 to {MAX_STEPS:,}, not {got}"
    for i, r in enumerate(v["runs"]):
        metrics = r.get("metrics") if isinstance(r, dict) else None
        if not isinstance(metrics, dict) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in metrics.values()
        ):
            return f"runs[{i}] must be a mapping whose metrics are numbers"
        if r.get("outcome") is not None and r["outcome"] not in OUTCOMES:
            return f"runs[{i}].outcome must be one of {', '.join(OUTCOMES)}, not {r['outcome']!r}"
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
    if not isinstance(steps, list) or not all(is_steps(x) for x in steps):
        return f"step must be a list of step numbers (0 to {MAX_STEPS:,})"
    if any(b <= a for a, b in itertools.pairwise(steps)):
        return "step must rise"
    if not isinstance(values, list) or len(values) != len(steps):
        return f"value must be a list as long as step ({len(steps)})"
    if not all(
        x is None or (isinstance(x, int | float) and not isinstance(x, bool)) for x in values
    ):
        return "value must hold numbers (or null)"
    if c.get("seed") is not None and not _is_int(c.get("seed")):
        return f"seed must be an integer, not {c.get('seed')!r}"
    if c.get("steps_run") is not None and not is_steps(c["steps_run"]):
        got = steps_text(c["steps_run"])
        return f"steps_run must be an integer from 0 to {MAX_STEPS:,}, not {got}"
    if c.get("seed") is not None and seed_problem(c["seed"]):
        return f"seed: {seed_problem(c['seed'])}"
    if not isinstance(c.get("metric", "loss"), str):
        return "metric must be a name"
    return None


def achieved_problem(a: dict[Any, Any]) -> Problem | None:
    """What is wrong with a recipe's `achieved` mapping (None: well formed): per metric a
    mapping whose `direction` (when given) is minimize or maximize, `value` a finite number (or
    null: not measured) and `verified` null or the interval over seeds `autotune export`
    writes: mean, low, high (and std) finite numbers or null, low <= high, `n` a count,
    `diverged_share` a share from 0 to 1, `seeds` a list of seeds."""
    for metric, p in a.items():
        if not isinstance(metric, str):
            return [metric], "a metric name must be a string"
        if not isinstance(p, dict):
            return [metric], f"must be a mapping of direction, value and verified, got {p!r}"
        if "direction" in p and p["direction"] not in DIRECTIONS:
            return [metric, "direction"], f"must be minimize or maximize, got {p['direction']!r}"
        if p.get("value") is not None and not _is_finite(p["value"]):
            return [metric, "value"], f"must be a finite number, got {p['value']!r}"
        wrong = _verified_interval_problem(p.get("verified"))
        if wrong is not None:
            return [metric, "verified", *wrong[0]], wrong[1]
    return None


def _verified_interval_problem(v: Any) -> Problem | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        return [], f"must be a mapping (mean, low, high, n, seeds, diverged_share), got {v!r}"
    for key in ("mean", "low", "high", "std"):
        if v.get(key) is not None and not _is_finite(v[key]):
            return [key], f"must be a finite number (or null), got {v[key]!r}"
    if v.get("low") is not None and v.get("high") is not None and v["low"] > v["high"]:
        return ["low"], f"{v['low']!r} is above high ({v['high']!r})"
    if v.get("n") is not None and not (_is_int(v["n"]) and v["n"] >= 0):
        return ["n"], f"must be a count of seeds (a whole number >= 0), got {v['n']!r}"
    share = v.get("diverged_share")
    if share is not None and not (_is_finite(share) and 0 <= share <= 1):
        return ["diverged_share"], f"must be a share from 0 to 1 (or null), got {share!r}"
    seeds = v.get("seeds")
    if seeds is not None and not (
        isinstance(seeds, list) and all(x is None or (_is_int(x) and 0 <= x < 2**32) for x in seeds)
    ):
        return [
            "seeds"
        ], f"must be a list of seeds (whole numbers from 0 to 2**32 - 1), got {seeds!r}"
    return None


def is_steps(x: Any, low: int = 0) -> bool:
    """`x` is a count of steps a recipe may record: a whole number from `low` to MAX_STEPS (the
    bound of probe.steps: anything larger is a typo or a cut, not a run a machine made)."""
    return _is_int(x) and low <= x <= MAX_STEPS


def steps_text(x: Any) -> str:
    """A count of steps as an error message shows it: a whole number past MAX_STEPS is not
    written out (10**300 is 301 digits; Python refuses to print one of over 4,300)."""
    if _is_int(x) and abs(x) > MAX_STEPS:
        return f"a number above {MAX_STEPS:,}" if x > 0 else f"a number below -{MAX_STEPS:,}"
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
