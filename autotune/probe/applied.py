"""Which of a study's searched knobs a training script never applied.

A script applies a trial's knobs only through the recipe's helpers or an integration, and each
records that it did (`autotune.probe.script.mark_applied`: the summary's `script_applied`). A
searched knob whose helper the script never called was not what its trials ran: each ran the
script's own (its own scheduler, say), so the value a study reports for it means nothing.

The optimizer's, the schedule's and the clipping's helpers are recorded: a knob of another
group (the GradScaler, the batch, environment variables) is never said to be unapplied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autotune.knobs import KNOBS

#: A knob group -> the helper that applies its knobs in a script, and the marks of
#: `mark_applied` that say they were applied (an integration applies both groups, but
#: Lightning's own schedule unless its configure_optimizers calls the recipe's scheduler).
_GROUPS = {
    "optimizer": ("trial.recipe.optimizer", frozenset({"optimizer", "hf", "lightning"})),
    "schedule": ("trial.recipe.scheduler (or recipe.lr_at)", frozenset({"scheduler", "hf"})),
    "clipping": (
        "trial.recipe.clip_and_step (or recipe.clip_policy)",
        frozenset({"clip", "hf", "lightning"}),
    ),
}


def unapplied(applied: Iterable[str] | None, knobs: Iterable[str]) -> dict[str, str]:
    """Each of `knobs` (the searched ones) that a script with `applied` (its summary's
    `script_applied`) never applied -> the helper that would apply it. Empty for a built-in
    workload or a record without `script_applied` (None): autotune's own probe applies all."""
    if applied is None:
        return {}
    done = set(applied)
    missing: dict[str, str] = {}
    for name in sorted(knobs):
        info = KNOBS.get(name)
        if info is None or info.group not in _GROUPS:
            continue
        helper, marks = _GROUPS[info.group]
        if name == "lr":  # the schedule's peak: lr_at and the scheduler apply it too
            marks = marks | {"scheduler"}
        if not done & marks:
            missing[name] = helper
    return missing


def text(missing: Mapping[str, str]) -> str:
    """One sentence on the knobs of `unapplied`, naming the helper that applies each."""
    by_helper: dict[str, list[str]] = {}
    for name, helper in missing.items():
        by_helper.setdefault(helper, []).append(name)
    parts = "; ".join(f"{', '.join(names)} (applied by {h})" for h, names in by_helper.items())
    return (
        f"searched knob(s) never applied by the script: {parts}. The script never called that "
        "helper, so every trial ran the script's own setting and the values searched and "
        "reported for these knobs are not what ran"
    )
