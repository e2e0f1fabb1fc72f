"""One number helper shared by every layer: a value as a finite float, or a default."""

from __future__ import annotations

import math
from typing import Any, TypeVar

D = TypeVar("D", float, None)


def finite(value: Any, default: D = None) -> float | D:  # type: ignore[assignment]
    """`value` as a float if it is a finite number (a bool is 0 or 1); else `default` (None and
    strings included)."""
    if value is None or isinstance(value, str):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default
