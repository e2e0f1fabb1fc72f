"""The recipe: the file (`Recipe`, load and dump), its runtime API for a user's training loop,
the exporters to other formats, and `autotune verify` (re-measuring a recipe over seeds)."""

from autotune.recipe.file import FORMAT_KEY, RECIPE_VERSION, Recipe, now_iso

__all__ = ["FORMAT_KEY", "RECIPE_VERSION", "Recipe", "now_iso"]
