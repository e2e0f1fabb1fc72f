"""Trials whose knobs differ but whose loss series are the same, step for step: a sign that the
training script does not apply the trial's knobs (`trial.recipe`), so that every configuration
trained alike and the study could only tie with PyTorch's defaults.

Each trial's record carries a hash of its loss series (`attrs.LOSS_HASH`, `loss_hash`: SHA-256
of the float64 values), so the summary compares hashes, never the series: cheap for any number
of trials and steps. Only complete screen trials are compared, and only groups whose knobs
differ are named (two trials that sampled the same knobs may well train alike).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.probe.outcome import Outcome
from autotune.probe.summary import loss_of
from autotune.study import attrs as ua


def loss_hash(summary: Mapping[str, Any] | None) -> str | None:
    """A hash of a probe summary's loss series (None: it has none)."""
    loss = loss_of(summary)
    if not loss:
        return None
    values = [math.nan if v is None else float(v) for v in loss]
    return hashlib.sha256(struct.pack(f"<{len(values)}d", *values)).hexdigest()[:20]


def identical_losses(study: Any) -> list[list[int]]:
    """The groups (by trial number) of two or more complete screen trials with the same loss
    series and different knobs."""
    by_hash: dict[str, list[Any]] = {}
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        h = t.user_attrs.get(ua.LOSS_HASH)
        if h and t.state.is_finished() and ua.outcome(t) == Outcome.COMPLETE:
            by_hash.setdefault(str(h), []).append(t)
    groups = []
    for same in by_hash.values():
        knobs = {json.dumps(ua.knobs(t), sort_keys=True, default=str) for t in same}
        if len(same) > 1 and len(knobs) > 1:
            groups.append([t.number for t in same])
    return sorted(groups)


def warning_line(groups: Sequence[Sequence[int]] | None) -> str | None:
    """The summary's warning for `identical_losses`'s groups; None when there are none."""
    if not groups:
        return None
    named = "; ".join(f"trials {_listed(g)}" for g in groups)
    return (
        f"warning: {named} ran with different knobs and produced identical loss series: the "
        "script may not apply the recipe's knobs (build the optimizer, scheduler and clipping "
        "from `trial.recipe`, e.g. `trial.recipe.optimizer(...)`)"
    )


def _listed(numbers: Sequence[int]) -> str:
    shown = [str(n) for n in numbers]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
