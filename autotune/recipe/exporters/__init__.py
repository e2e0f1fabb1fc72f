"""A recipe in the shapes other tools read: `autotune export --format FMT`.

- yaml: the recipe file itself (`Recipe.dump`), the only format `Recipe.load` reads back.
- env: a POSIX shell file of `export NAME=value` lines for the environment knobs; source it
  before launching training.
- python: a standalone snippet (torch, math and os only; no autotune) with the recipe's values as
  constants and the functions that apply them the way the probe measured them: AdamW, the
  GradScaler, the warm-up/decay schedule, autocast, clipping and the end of a step.
- hf: JSON with Hugging Face `TrainingArguments` fields, and notes on what they cannot express.
- lightning: JSON with `lightning.Trainer` arguments, the optimizer and the learning-rate
  schedule, and notes on what Lightning cannot express.

The JSON formats say in their `notes` where the tool differs from the recipe and how to close the
gap (usually: take the function from the python export).
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.errors import RecipeError, did_you_mean
from autotune.recipe.exporters.frameworks import render_hf, render_lightning
from autotune.recipe.exporters.python import render_python
from autotune.recipe.exporters.shell import render_env, render_yaml
from autotune.recipe.file import Recipe

FORMATS = ("yaml", "env", "python", "hf", "lightning")

_RENDERERS: dict[str, Callable[[Recipe], str]] = {
    "yaml": render_yaml,
    "env": render_env,
    "python": render_python,
    "hf": render_hf,
    "lightning": render_lightning,
}


def render(recipe: Recipe, fmt: str) -> str:
    """`recipe` as text in format `fmt` (one of FORMATS), ending with a newline."""
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise RecipeError(
            f"unknown export format {fmt!r}{did_you_mean(str(fmt), FORMATS)}; "
            f"formats are: {', '.join(FORMATS)}"
        )
    return renderer(recipe)


__all__ = ["FORMATS", "render"]
