"""autotune: search training-stability and speed knobs with short probes.

Optuna decides, Ray runs, the probe measures, MLflow remembers, the recipe carries the result out.
`from autotune import Recipe` is the runtime API for a user's own training loop.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Diverged", "Recipe", "RecipeEnvWarning", "__version__", "trial"]


def __getattr__(name: str) -> Any:  # lazy: `autotune --help` must not import yaml or pydantic
    if name == "Recipe":
        from autotune.recipe import Recipe

        return Recipe
    if name == "RecipeEnvWarning":  # to filter what `Recipe.load` warns of a recipe's env:
        from autotune.errors import RecipeEnvWarning

        return RecipeEnvWarning
    if name in ("trial", "Diverged"):  # the trial API of a training script
        from autotune.recipe import trial as trial_api

        return getattr(trial_api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
