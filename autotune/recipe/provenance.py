"""Where a recipe came from, checked where it is loaded: its `source` (what its study searched,
spent and judged) and its `fingerprint` (the machine it was tuned on). `autotune migrate`
computes with both (the share of the study's compute a check spent, the knobs a re-tune
searches, the study's verdict a reproduced run carries over, the differences between two
machines), so a malformed value is refused with its key named before any probe runs, not a
traceback after the probes or a report that prints it ("spent -1 samples", "portable: x")."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from autotune.errors import RecipeError
from autotune.recipe.paired import VERDICTS

#: The fingerprint's sections that are mappings (`fingerprint.collect`), and its lists.
_FP_MAPPINGS = ("versions", "host", "env", "conf_files", "determinism", "numerics", "driver")
_FP_LISTS = ("devices",)


def _count(x: Any) -> bool:
    """A number of samples: finite and >= 0."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def check_provenance(
    source: dict[str, Any], err: Callable[[Any, str], RecipeError]
) -> dict[str, Any]:
    """`source`'s `compute` (samples per phase: counts, or null), `searched` (knob names),
    `trial` (a trial number, or null) and `vs_baseline` (the study's paired verdict: one of
    `paired.VERDICTS`, its `worse_on` and `better_on` lists of metric names); `source` as given."""
    compute = source.get("compute")
    if compute is not None and not isinstance(compute, dict):
        raise err(["source", "compute"], f"must be a mapping of samples per phase, got {compute!r}")
    for key, value in (compute or {}).items():
        if value is not None and not _count(value):
            raise err(["source", "compute", str(key)], f"must be a count of samples, got {value!r}")
    searched = source.get("searched")
    if searched is not None and not (
        isinstance(searched, list) and all(isinstance(k, str) and k for k in searched)
    ):
        raise err(["source", "searched"], f"must be a list of knob names, got {searched!r}")
    trial = source.get("trial")
    if trial is not None and (not isinstance(trial, int) or isinstance(trial, bool) or trial < 0):
        raise err(["source", "trial"], f"must be a trial number (0, 1, ...), got {trial!r}")
    vs = source.get("vs_baseline")
    if vs is None:
        return source
    if not isinstance(vs, dict):
        raise err(["source", "vs_baseline"], f"must be a mapping (the paired verdict), got {vs!r}")
    if vs.get("verdict") is not None and vs["verdict"] not in VERDICTS:
        raise err(
            ["source", "vs_baseline", "verdict"],
            f"must be one of {', '.join(VERDICTS)}, got {vs['verdict']!r}",
        )
    for key in ("worse_on", "better_on"):
        names = vs.get(key)
        if names is not None and not (
            isinstance(names, list) and all(isinstance(m, str) for m in names)
        ):
            raise err(["source", "vs_baseline", key], f"must be a list of metrics, got {names!r}")
    return source


def check_fingerprint(fp: Any, err: Callable[[Any, str], RecipeError]) -> dict[str, Any] | None:
    """The recipe's `fingerprint` (None when absent): a mapping whose sections are mappings
    (`versions`, `host`, ...) or null, `devices` a list of mappings, `hash` and `platform` text."""
    if fp is None:
        return None
    if not isinstance(fp, dict):
        raise err(["fingerprint"], "must be a mapping")
    for key in _FP_MAPPINGS:
        if fp.get(key) is not None and not isinstance(fp[key], dict):
            raise err(["fingerprint", key], f"must be a mapping, got {fp[key]!r}")
    for key in _FP_LISTS:
        if fp.get(key) is not None and not (
            isinstance(fp[key], list) and all(isinstance(d, dict) for d in fp[key])
        ):
            raise err(["fingerprint", key], f"must be a list of mappings, got {fp[key]!r}")
    for key in ("hash", "platform"):
        if fp.get(key) is not None and not isinstance(fp[key], str):
            raise err(["fingerprint", key], f"must be text, got {fp[key]!r}")
    return fp
