"""Whether a recipe is still the configuration its study measured: a digest of each section
that decides what a run does, recorded at export (`source.digests`) and compared on reading.

What a recipe promises (`achieved`) and what it recorded (`recorded`: the loss curve, the
verified seeds) were measured on the configuration exported. A recipe edited since (another
workload, a knob changed by hand) keeps those numbers, and `autotune verify` would judge the
edited configuration against another one's promise: "as promised" of a model it never ran.
`edited` names the sections that changed; a recipe without digests (written by hand, or by an
autotune before they were recorded) is taken as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: The sections whose values decide what a run of the recipe does (`Recipe.to_dict` keys).
SECTIONS = ("workload", "precision", "micro_batch", "knobs", "env", "world_size", "probe")
KEY = "digests"  # under `source`
_HEX = 16


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:_HEX]


def digests(recipe_dict: Mapping[str, Any]) -> dict[str, str]:
    """Each section of `SECTIONS` of a recipe (`Recipe.to_dict()`), as a short sha256."""
    return {name: _digest(recipe_dict.get(name)) for name in SECTIONS}


def edited(recipe_dict: Mapping[str, Any]) -> list[str] | None:
    """The sections changed since export (`[]`: none); None when the recipe records no digests
    (or records them malformed: a hand-written source is not evidence either way)."""
    recorded = (recipe_dict.get("source") or {}).get(KEY)
    if not isinstance(recorded, Mapping) or not recorded:
        return None
    now = digests(recipe_dict)
    return [name for name in SECTIONS if recorded.get(name) != now[name]]


def text(sections: list[str]) -> str:
    """What an edited recipe's check says of its promise and recordings."""
    listed = ", ".join(f"`{s}`" for s in sections)
    return (
        f"the recipe was changed since its export ({listed}): what it promised and recorded "
        "was measured on the configuration exported, not this one, so it is not compared"
    )
