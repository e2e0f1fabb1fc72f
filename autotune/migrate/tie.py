"""A recipe that is PyTorch's defaults by a tie.

A study keeps the defaults when its first choice shows no difference from them that its
verification seeds can measure (`paired.PREFER_DEFAULTS`), and the export then records the
defaults with `source.defaults` and the first choice (`source.first_choice`, its paired verdict in
`source.vs_baseline`). On another machine `transfers` can only say of such a recipe that the
defaults still run: not that nothing beats them there. The verdict's `why` says so, naming the
first choice and the closest its comparison came to a difference, so that a user does not read
"transfers" as "already tuned" (`benchmarks/RESULTS.md`, "Migration": a clip with about a third
of the defaults' noise_per_drop on average tied with them over 2, 3 and 5 verification seeds).

Given the source study's space (`--space`), such a recipe that holds here after a check that
re-ran it (not one whose recorded run reproduced or ended within its seeds' spread: there the
study's tie stands as it was; one that ran out of memory and held at a layout that fits, even on
one probe by the spread, counts as re-run: its study measured the tie at a layout that does not
fit here) goes to
the reduced re-tune (`retune_plan`): its first choice and Pareto neighbours, at a layout that fits
here, against the defaults, verified as any study verifies. Its pick replaces the recipe only when
it beat the defaults there (`after_retune`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.migrate import knob_classes
from autotune.migrate.layout import NO_RETUNE
from autotune.recipe import Recipe
from autotune.space.seeds import MAX_VERIFY_SEEDS


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


def retune_plan(
    recipe: Recipe, verdict: str, holds: Mapping[str, Any], searched: list[str]
) -> dict[str, Any] | None:
    """The reduced re-tune of a recipe that is the defaults by a tie and holds here (`transfers`
    or `transfers with these changes` other than a neighbour's), as `knob_classes.retune_plan`
    gives one: the hardware-bound knobs its study searched and, where its micro-batch ran out of
    memory here, `accum_steps` (`oom_micro_batch`: only those that fit); its portable knobs
    are chosen among its Pareto neighbours' values (`retune.reduced_overrides`). None when
    there is no tie, no re-run here (the recorded run reproduced, or within its seeds' spread:
    the study's tie stands), or no neighbour that differs from the recipe to try."""
    tie = source_tie(recipe)
    if tie is None or not verdict.startswith("transfers") or "use trial" in verdict:
        return None
    if holds.get("path") in ("reproduced", "within_spread"):
        return None
    neighbours = (recipe.source or {}).get("neighbours") or []
    if not any(
        any(v != recipe.knobs.get(k) for k, v in (n.get("knobs") or {}).items()) for n in neighbours
    ):
        return None
    by = knob_classes.classes(searched, recipe.env)
    knobs = list(by["hardware-bound"])
    why = {k: "hardware-bound" for k in knobs}
    plan: dict[str, Any] = {"knobs": knobs, "why": why, "classes": by, "tie": tie}
    oom = holds.get("oom")
    if oom:  # the layout that held here, or a smaller micro-batch: never the one that failed
        knob_classes.add_oom(knobs, why, list(searched), oom)
        plan["oom_micro_batch"] = oom["micro_batch"]
    first = tie["first_choice"]
    seeds = len(tie["seeds"])
    if seeds:  # the same seeds again would measure the same tie (a layout that fits computes the
        plan["verify_seeds"] = min(2 * seeds, MAX_VERIFY_SEEDS)  # same arithmetic): twice
    over = f" over {plan['verify_seeds']} verification seeds" if seeds else ""
    plan["note"] = (
        f"The recipe is PyTorch's defaults by a tie, so with the source study's space this "
        f"machine's own study tries its first choice (trial {first}) and its Pareto neighbours "
        f"against the defaults{over}: the portable knobs at the recipe's or a neighbour's values."
    )
    return plan


def after_retune(verdict: str, why: str, retuned: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict and its `why` after the re-tune `retune_plan` planned: `re-tuned: ...` when
    its pick beat the defaults here (paired over its verification seeds); otherwise the verdict
    stands and the `why` says what the study found."""
    why = why.replace(NO_RETUNE, "")  # one ran
    study = (
        f" Given the space, that study ran here: {retuned['trials']} trial(s) "
        f"({retuned['source_trials']} in the space's budget), warm-started from the recipe's first "
        f"choice and Pareto neighbours, searching {', '.join(retuned['searched'])}"
    )
    if retuned["recipe"] is None:
        return verdict, why + f"{study}: nothing in it held here ({retuned['failed']})."
    vs = retuned.get("vs_baseline") or {}
    over = f" over seeds {vs['seeds']}" if vs.get("seeds") else ""
    if retuned.get("defaults"):
        first = retuned.get("first_choice")
        came = (
            f"; its first choice, trial {first}, paired against them{over}: {vs['verdict']}"
            if vs.get("verdict") and first is not None and first != retuned.get("trial")
            else ""
        )
        return (
            verdict,
            why + f"{study}: it kept PyTorch's defaults too{came} ({retuned['recipe']}).",
        )
    paired = (
        f"its pick, trial {retuned.get('trial')}, paired against the defaults{over}: "
        f"{vs.get('verdict') or 'not compared'}"
    )
    if vs.get("verdict") != "better":  # not verified better: it does not replace a recipe
        return verdict, why + f"{study}: {paired}, not better, so the verdict stands."
    return (
        f"re-tuned: {', '.join(retuned['searched'])}",
        why + f"{study}: {paired}; use {retuned['recipe']}.",
    )
