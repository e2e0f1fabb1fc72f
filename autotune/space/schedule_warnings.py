"""A space's warm-up against the schedule it runs in: a `warmup_steps` the probes can reach that
is as long as the learning-rate schedule (`budget.target_steps`, else `probe.steps`) never ends,
so those trials train at a rising learning rate to the end; and `rungs` settings in a space
without `budget.target_steps`, which has no rungs for them to act on. Warnings, not refusals: a
user may mean it (or set the target with `--set` later)."""

from __future__ import annotations

from autotune.space.schema import Domain, Space


def schedule_warnings(space: Space) -> list[str]:
    """One line when the largest warm-up the space can run is not shorter than its schedule;
    one when the space sets `rungs` keys but has no rungs."""
    return _warm_up(space) + _rungs_unused(space)


def _rungs_unused(space: Space) -> list[str]:
    """The `rungs` keys the space sets, when it has no target (no rungs: they do nothing)."""
    if space.budget.target_steps is not None:
        return []
    given = sorted(space.rungs.model_fields_set)
    if not given:
        return []
    keys = ", ".join(f"rungs.{k}" for k in given)
    return [
        f"{keys}: no effect without budget.target_steps (there are no rungs: every trial is "
        "decided at probe.steps)"
    ]


def _warm_up(space: Space) -> list[str]:
    """The warm-up line of `schedule_warnings`."""
    value = space.knobs.get("warmup_steps")
    if isinstance(value, Domain):
        values = value.choices or (value.high,)
        top = max(float(v) for v in values if isinstance(v, int | float))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        top = float(value)
    else:
        return []
    length = space.budget.target_steps or space.probe.steps
    if top < length:
        return []
    where = "budget.target_steps" if space.budget.target_steps else "probe.steps"
    return [
        f"knobs.warmup_steps: up to {top:g} steps, the schedule is {length} ({where}): those "
        "trials never finish warming up (their learning rate rises to the end)"
    ]
