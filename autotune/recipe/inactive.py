"""Knobs that a configuration's other knobs switch off: a clipping policy's child under another
policy (`clip_norm` under `agc`) and `min_lr_ratio` under a constant schedule. The probe never
reads them, so any value trains the same; a study's trial still gets one (the space's midpoint
of a domain that leaves out the default, or a sampled one), which a record or a recipe would
present as a chosen value.

`active_knobs` puts each such knob back at the catalogue's default (clip_norm 0 = off, the
default PyTorch value of the others): the probe runs exactly as before, and the value recorded
and exported is the one the run used, the baseline's, so it reads as untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.knobs import CLIP_CHILDREN, KNOBS


def inactive(knobs: Mapping[str, Any]) -> list[str]:
    """The knobs of `knobs` that its clipping policy or schedule leaves unread, in its order."""
    policy = str(knobs.get("clip_policy") or "norm")
    out = [n for n in knobs if n in CLIP_CHILDREN and CLIP_CHILDREN[n] != policy]
    if "min_lr_ratio" in knobs and knobs.get("schedule", "constant") == "constant":
        out.append("min_lr_ratio")
    return out


def active_knobs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """`knobs` with each `inactive` one at the catalogue's default (its value otherwise)."""
    off = set(inactive(knobs))
    return {n: (KNOBS[n].default if n in off else v) for n, v in knobs.items()}
