"""The sections an exported recipe has that a recipe given to `autotune migrate` may lack (one
written by hand, or a file cut short), and what each one's absence means for the verdict: the
report says so plainly rather than naming a machine `None` or blaming an old export."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from autotune.recipe import digest
from autotune.recipe.file import Recipe

#: Per section of a recipe file: what its absence means for the check here.
MEANS = {
    "fingerprint": 'the machine it was tuned on is unknown: no "What differs" section can be '
    "made, and a run that does not reproduce here cannot be put down to moved numerics",
    "achieved": "it promises nothing: `transfers` can only say that it runs here and is no "
    "worse than the baseline on the final loss and on divergence, not that it keeps a promise",
    "recorded": "no recorded run or verified seeds: neither cheap check can stand, so the "
    "recipe and the baseline run here over the seeds",
    "source": "its study is unknown: which knobs it searched (the baseline is PyTorch's "
    "defaults for every knob but lr and the batch layout), its Pareto neighbours (none to try) "
    "and what its study spent",
}


def lacking(recipe: Recipe) -> list[str]:
    """The sections of `MEANS` the recipe does not record (empty or absent), in that order."""
    have: dict[str, Any] = {
        "fingerprint": recipe.fingerprint,
        "achieved": recipe.achieved,
        "recorded": {k: v for k, v in recipe.recorded.items() if k in ("curve", "verified")},
        "source": recipe.source,
    }
    return [name for name in MEANS if not have[name]]


def origin(recipe: Recipe) -> str | None:
    """Why an exported recipe lacks its sections, when it says: one exported from its study's
    storage alone (`source.study` named, `source.study_dir` empty) had no trial records to read
    its fingerprint and loss curve from. None: the recipe does not say (by hand, or cut short)."""
    src = recipe.source or {}
    if src.get("study") and not src.get("study_dir"):
        return (
            f"it was exported from study {src['study']}'s storage alone, where the study's "
            "folder (its trial records) could not be reached; export it again where the folder "
            "is to record them"
        )
    return None


def set_aside(
    recipe: Recipe, say: Callable[[str], None] = lambda _t: None
) -> tuple[Recipe, list[str]]:
    """A recipe changed since its export (`Recipe.edited_sections`) without what was measured
    on the configuration exported: its promise (`achieved`) and its recorded run and seeds
    (its op audit is kept unless the precision changed). Returns it and the sections changed
    (`[]`: the recipe as it is)."""
    changed = recipe.edited_sections() or []
    if not changed:
        return recipe, []
    say(digest.text(changed))
    kept = {} if "precision" in changed else {"audit": recipe.recorded.get("audit")}
    recorded = {k: v for k, v in kept.items() if v}
    return dataclasses.replace(recipe, achieved={}, recorded=recorded), changed


def section(
    names: list[str], edited: list[str] | None = None, why_not: str | None = None
) -> list[str]:
    """The report's "What the recipe lacks" section ([] when it lacks nothing); `edited`: the
    sections changed since export, for which its promise and recordings were set aside;
    `why_not`: why export could not write them (`origin`), rather than blaming the user."""
    if not names:
        return []
    quoted = [f"`{n}`" for n in names]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    why = (
        f"the recipe was changed since its export ({', '.join(f'`{e}`' for e in edited)}): "
        "what it promised and recorded was measured on the configuration exported, and is set "
        "aside"
        if edited
        else why_not
        or "`autotune export` writes each: this recipe was written by hand, or the file was "
        "cut short"
    )
    return [
        "## What the recipe lacks",
        "",
        f"The recipe has no {listed} section ({why}). What that means here:",
        "",
        *(f"- no `{n}`: {MEANS[n]}." for n in names),
        "",
    ]


def note(names: list[str], verdict: str, edited: list[str] | None = None) -> str:
    """A sentence for the verdict's `why` when a missing section limits what it says: about
    the recipe, so not after a verdict that names a neighbour (`use trial N`), where it read as
    said of that trial. `edited`: the `achieved` values are there, set aside for the edit."""
    if "achieved" in names and verdict.startswith("transfers") and "use trial" not in verdict:
        has = (
            "The recipe's `achieved` values were set aside (it was changed since its export: "
            "they were measured on the configuration exported): it promises nothing here"
            if edited
            else "The recipe records no `achieved` values: it promised nothing"
        )
        return (
            f" {has}, so this says only that it runs here and is no worse than the baseline on "
            "the final loss and on divergence."
        )
    return ""


def set_aside_texts(holds: dict[str, Any], edited: list[str] | None) -> None:
    """What the check says of the recordings of a recipe changed since its export (`edited`):
    they are there, set aside (`set_aside`), not missing; its study's verdict against the
    baseline was measured on the configuration exported, not on this one."""
    if not edited:
        return
    if holds.get("not_reproduced") == "the recipe records no loss curve":
        holds["not_reproduced"] = (
            "its recorded loss curve was set aside: the recipe was changed since its export"
        )
    if holds.get("source_verdict"):
        holds["source_verdict"] = (
            f"{holds['source_verdict']} for the configuration exported (the recipe was changed "
            "since: not this one)"
        )
