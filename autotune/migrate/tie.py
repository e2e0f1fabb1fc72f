"""A recipe that is PyTorch's defaults by a tie.

A study keeps the defaults when its first choice shows no difference from them that its
verification seeds can measure (`paired.PREFER_DEFAULTS`), and the export then records the
defaults with `source.defaults` and the first choice (`source.first_choice`, its paired verdict in
`source.vs_baseline`). On another machine `transfers` can only say of such a recipe that the
defaults still run: not that nothing beats them there. The verdict's `why` says so, naming the
first choice and the closest its comparison came to a difference, so that a user does not read
"transfers" as "already tuned" (`benchmarks/RESULTS.md`, "Migration": a clip with about a third
of the defaults' noise_per_drop on average tied with them over 2, 3 and 5 verification seeds)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.recipe import Recipe


def source_tie(recipe: Recipe) -> dict[str, Any] | None:
    """`first_choice` (the trial), `seeds` (the verification seeds it was compared over) and
    `closest` (the metric whose paired ratio leaned furthest its way: `metric`, `ratio`, `low`,
    `high`, or None) when the recipe is the defaults because its study's first choice tied with
    them; None otherwise (a recipe that is not the defaults, or was chosen as them)."""
    source = recipe.source or {}
    first = source.get("first_choice")
    if not source.get("defaults") or first is None or first == source.get("trial"):
        return None
    vs = source.get("vs_baseline") or {}
    return {
        "first_choice": first,
        "seeds": list(vs.get("seeds") or []),
        "closest": _closest(vs.get("metrics") or {}),
    }


def _closest(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metric whose paired ratio (first choice / defaults) leaned furthest toward the first
    choice (below 1 for a metric minimized, above for one maximized); None if none did."""
    best: tuple[float, dict[str, Any]] | None = None
    for name, row in metrics.items():
        ratio = (row or {}).get("ratio") or {}
        values = [ratio.get(k) for k in ("mean", "low", "high")]
        positive = [float(x) for x in values if isinstance(x, int | float) and x > 0]
        if len(positive) != len(values):
            continue
        mean, low, high = positive
        lean = math.log(mean) * (-1 if row.get("direction", "minimize") == "minimize" else 1)
        if lean > 0 and (best is None or lean > best[0]):
            best = (lean, {"metric": name, "ratio": mean, "low": low, "high": high})
    return best[1] if best else None


def note(recipe: Recipe, verdict: str) -> str:
    """A sentence for the `why` of a `transfers` verdict on a recipe that is the defaults by a
    tie ('' otherwise, and after a verdict that names a neighbour: `use trial N`)."""
    tie = source_tie(recipe)
    if tie is None or not verdict.startswith("transfers") or "use trial" in verdict:
        return ""
    seeds = tie["seeds"]
    over = f"over its {len(seeds)} verification seeds" if seeds else "over its verification"
    closest = tie["closest"]
    came = (
        f" ({closest['metric']} x{closest['ratio']:.3g} the defaults' "
        f"[x{closest['low']:.3g}, x{closest['high']:.3g}])"
        if closest
        else ""
    )
    first = tie["first_choice"]
    return (
        f" The recipe is PyTorch's defaults by a tie: its study's first choice, trial {first}, "
        f"showed no difference from them it could measure {over}{came}, and a tie goes to the "
        "defaults. So this says the defaults still run here, not that nothing beats them: a "
        f"study here, with more verification seeds, would say whether trial {first} or "
        "another does."
    )
