"""Trials whose knobs differ but whose loss series are the same, step for step: for a script, a
sign that it does not apply the trial's knobs (`trial.recipe`), so that every configuration
trained alike and the study could only tie with PyTorch's defaults.

Each trial's record carries a hash of its loss series (`attrs.LOSS_HASH`, `loss_hash`: SHA-256
of the float64 values), so the summary compares hashes, never the series: cheap for any number
of trials and steps. Only complete screen trials are compared, and only groups whose knobs
differ in one that could have changed the loss are named: two trials that sampled the same
knobs may well train alike, and so may two that differ only in a DDP knob (communication), an
environment knob, a knob their clipping policy or schedule leaves unread, or a clipping knob
when no step of theirs was clipped. The warning names the knobs that differ; only a
`workload.script` study is told that its script may not apply them.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.knobs import CLIP_CHILDREN, DDP_KNOBS
from autotune.probe.outcome import Outcome
from autotune.probe.summary import loss_of
from autotune.recipe.inactive import active_knobs
from autotune.study import attrs as ua


def loss_hash(summary: Mapping[str, Any] | None) -> str | None:
    """A hash of a probe summary's loss series (None: it has none)."""
    loss = loss_of(summary)
    if not loss:
        return None
    values = [math.nan if v is None else float(v) for v in loss]
    return hashlib.sha256(struct.pack(f"<{len(values)}d", *values)).hexdigest()[:20]


def identical_losses(study: Any, script: bool) -> list[dict[str, Any]]:
    """The groups of two or more complete screen trials with the same loss series and knobs
    that differ in one that could have changed it: {"trials": their numbers, "knobs": those
    knobs, "script": `script`, whether the study trains a `workload.script`}."""
    by_hash: dict[str, list[Any]] = {}
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        h = t.user_attrs.get(ua.LOSS_HASH)
        if h and t.state.is_finished() and ua.outcome(t) == Outcome.COMPLETE:
            by_hash.setdefault(str(h), []).append(t)
    groups = []
    for same in by_hash.values():
        differ = _telling(same) if len(same) > 1 else []
        if differ:
            groups.append({"trials": [t.number for t in same], "knobs": differ, "script": script})
    return sorted(groups, key=lambda g: g["trials"])


def _telling(trials: Sequence[Any]) -> list[str]:
    """The knobs that differ among `trials` and could have changed their loss: not a knob its
    policy or schedule left unread, not a DDP knob (communication only: the same sums), and
    not a clipping knob when none of them clipped a step (a threshold never reached, or off)."""
    knobs = [active_knobs(ua.knobs(t)) for t in trials]
    names = {n for k in knobs for n in k}
    differ = [n for n in sorted(names) if len({_key(k.get(n)) for k in knobs}) > 1]
    quiet = all(_never_clipped(k, ua.metrics(t)) for k, t in zip(knobs, trials, strict=True))
    clipping = {"clip_policy", *CLIP_CHILDREN} if quiet else set()
    return [n for n in differ if n not in DDP_KNOBS and n not in clipping]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _never_clipped(knobs: Mapping[str, Any], metrics: Mapping[str, Any]) -> bool:
    """Whether a trial's clipping left every gradient as it was: off, or a clip_fraction of 0
    (a script that did not say whether it clipped has none: not known, so not assumed)."""
    policy = knobs.get("clip_policy") or "norm"
    if policy == "none" or (policy == "norm" and _number(knobs.get("clip_norm")) <= 0):
        return True
    fraction = metrics.get("clip_fraction")
    return isinstance(fraction, int | float) and fraction == 0


def _number(value: Any) -> float:
    """A knob's value as a number; NaN for one that is not (never <= 0: not assumed off)."""
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return math.nan


def warning_line(groups: Sequence[Any] | None) -> str | None:
    """The summary's warning for `identical_losses`'s groups; None when there are none. Only a
    script's study is told its script may not apply the knobs: a built-in workload applies
    every knob, so there the knobs that differ simply did not change the training."""
    if not groups:
        return None
    rows = [g if isinstance(g, Mapping) else {"trials": g, "script": True} for g in groups]
    named = "; ".join(_group_text(g) for g in rows)
    head = f"warning: {named} ran with different knobs and produced identical loss series"
    if any(g.get("script") for g in rows):
        return (
            f"{head}: the script may not apply the recipe's knobs (build the optimizer, "
            "scheduler and clipping from `trial.recipe`, e.g. `trial.recipe.optimizer(...)`)"
        )
    return f"{head}: those knobs did not change the training in these runs"


def _group_text(group: Mapping[str, Any]) -> str:
    knobs = list(group.get("knobs") or [])
    return f"trials {_listed(group['trials'])}" + (f" ({', '.join(knobs)})" if knobs else "")


def _listed(numbers: Sequence[int]) -> str:
    shown = [str(n) for n in numbers]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
