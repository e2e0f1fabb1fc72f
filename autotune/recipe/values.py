"""A recipe's knob and environment values, checked by the space's rules: one value per knob,
named with the recipe file and the key path on one line (`autotune.recipe.file` reads them)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from autotune import __version__
from autotune import space as sp
from autotune.errors import RecipeError, did_you_mean
from autotune.space import yaml_reader


def error_at(source: str) -> Callable[[Any, str], RecipeError]:
    """Errors that name the recipe file and the key path, on one line (the space's rules)."""

    def err(path: Any, message: str) -> RecipeError:
        dotted = ".".join(yaml_reader.key_text(p) for p in path)
        return RecipeError(yaml_reader.one_line(f"{source}: {dotted}: {message}", None))

    return err


def check_knobs(raw: Any, source: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise RecipeError(f"{source}: knobs: must be a mapping of knob: value")
    err = error_at(source)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        name = str(name)
        if name not in sp.KNOBS:
            raise err(
                ["knobs", name],
                f"unknown knob{did_you_mean(name, sp.KNOBS)} (this autotune {__version__} "
                f"knows: {', '.join(sp.KNOBS)}); was the recipe written by a newer autotune?",
            )
        if isinstance(value, dict | list):
            raise err(["knobs", name], "a recipe holds one value per knob, not a domain")
        out[name] = sp.check_value(sp.KNOBS[name], value, ["knobs", name], err)
    missing = [
        n
        for n, info in sp.KNOBS.items()
        if n not in out and info.default is None and n != "batch"  # batch: micro x accum
    ]
    if missing:
        raise RecipeError(f"{source}: knobs: missing {', '.join(missing)} (no default to assume)")
    assumed = [n for n, info in sp.KNOBS.items() if n not in out and info.default is not None]
    if assumed:  # an exported recipe lists every knob: one missing was deleted, or is newer
        shown = ", ".join(f"{n} ({sp.KNOBS[n].default!r})" for n in assumed[:6])
        more = f" and {len(assumed) - 6} more" if len(assumed) > 6 else ""
        print(
            f"autotune: warning: {source}: knobs: {shown}{more} missing: PyTorch's default "
            "used (an exported recipe lists every knob: was this one edited?)",
            file=sys.stderr,
        )
    for name, info in sp.KNOBS.items():
        out.setdefault(name, info.default)
    return out


def check_env(raw: Any, source: str) -> dict[str, str]:
    """Environment knobs by the space's rules (names, prefixes, values), one value each."""
    if not isinstance(raw, dict):
        raise RecipeError(f"{source}: env: must be a mapping of VARIABLE: value")
    err = error_at(source)
    out: dict[str, str] = {}
    for name, value in raw.items():
        name = str(name)
        if isinstance(value, dict | list) or value is None:
            raise err(["env", name], f"must be one value, got {value!r}")
        out[name] = str(sp.env_value(name, value, ["env", name], err))
    return out
