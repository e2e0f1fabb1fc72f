"""A failed query loses one field, not the fingerprint: `guard` records `{"error": ...}`, and
the identity reads any error as "unavailable".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ERROR_MAX = 300


# In identity(), any failed query reads as this, so an error's wording cannot split a platform.
UNAVAILABLE = "unavailable"


def guard(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or ``{"error": "..."}`` when it raises: one failed query loses one field."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"error": error_text(exc)}


def first_ok(values: list[Any]) -> Any:
    """The first value that is not an error; the first error when all failed; None when empty."""
    return next((v for v in values if not is_error(v)), values[0] if values else None)


def is_error(value: Any) -> bool:
    return isinstance(value, dict) and "error" in value


def stable(value: Any) -> Any:
    return UNAVAILABLE if is_error(value) else value


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_MAX]
