"""Before a re-tune (`autotune migrate --space FILE`): the space file is the recipe's own
(`source_mismatch`), and the study it runs can run here (`check_retune`), checked before any
probe so that a wrong file is a usage error, not a failed migration."""

from __future__ import annotations

from typing import Any

from autotune.errors import UsageError
from autotune.recipe.file import Recipe


def check_retune(space: str, recipe: Recipe | None = None) -> None:
    """The space file reads and validates, is the recipe's (`source_mismatch`), and Ray, Optuna
    and MLflow are installed here."""
    import importlib.util

    from autotune import space as sp

    loaded = sp.load(space)
    wrong = source_mismatch(loaded, recipe) if recipe is not None else None
    if wrong:
        raise UsageError(
            f"--space {space}: not the space this recipe was tuned in ({wrong}); the re-tune "
            "searches the recipe's own space with its other knobs fixed at the recipe's values"
        )
    missing = [m for m in ("ray", "optuna", "mlflow") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"--space {space}: the re-tune runs a study, and this environment lacks "
            f"{', '.join(missing)}"
        )


def source_mismatch(space: Any, recipe: Recipe) -> str | None:
    """What says `space` is not the one the recipe was tuned in: another workload, or a knob
    the space fixes at another value than the recipe's (the re-tune would run at that value:
    a recipe for another job). None when it can be."""
    import math

    w, rw = space.workload, recipe.workload
    if (w.script or None) != (rw.get("script") or None):
        return f"workload.script is {w.script!r} there, {rw.get('script')!r} in the recipe"
    if not w.script and (w.name, w.size) != (rw.get("name"), rw.get("size", w.size)):
        return (
            f"workload is {w.name} ({w.size}) there, {rw.get('name')} ({rw.get('size')}) in "
            "the recipe"
        )
    searched = space.searched()
    for name, value in space.fixed_knobs().items():
        mine = recipe.knobs.get(name)
        if name in searched or value is None or mine is None:
            continue
        same = (
            math.isclose(float(value), float(mine), rel_tol=1e-9, abs_tol=1e-12)
            if isinstance(value, (int, float)) and isinstance(mine, (int, float))
            else value == mine
        )
        if not same:
            return f"knobs.{name} is {value!r} there, {mine!r} in the recipe"
    return None
