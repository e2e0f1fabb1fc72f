"""The yaml export (the recipe file itself, the only format `Recipe.load` reads back) and the env
export (a POSIX shell file of `export NAME=value` lines for the environment knobs)."""

from __future__ import annotations

import re
import shlex

from autotune.errors import RecipeError
from autotune.recipe.exporters.common import one_line, origin, tuned_on
from autotune.recipe.file import Recipe

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def render_yaml(r: Recipe) -> str:
    return r.dump()


def render_env(r: Recipe) -> str:
    lines = [
        f"# autotune recipe {one_line(repr(r.name))}: environment knobs "
        f"(autotune {one_line(r.autotune_version)}).",
        f"# From {origin(r)}; tuned on {tuned_on(r)}.",
        "# Source it in the shell that launches training, before torch starts:  . ./FILE",
        "# (NCCL/RCCL read these when the process group starts, ROCm libraries when they load.)",
    ]
    if not r.env:
        lines.append("# This recipe sets no environment knobs: there is nothing to export.")
    for name, value in r.env.items():
        if not _ENV_NAME.match(name):
            raise RecipeError(f"recipe {r.name}: env.{name}: not a valid variable name")
        lines.append(f"export {name}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"
