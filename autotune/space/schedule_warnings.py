"""A space's warm-up against the schedule it runs in: a `warmup_steps` the probes can reach that
is as long as the learning-rate schedule (`budget.target_steps`, else `probe.steps`) never ends,
so those trials train at a rising learning rate to the end. A warning, not a refusal: a user
may mean it."""

from __future__ import annotations

from autotune.space.schema import Domain, Space


def schedule_warnings(space: Space) -> list[str]:
    """One line when the largest warm-up the space can run is not shorter than its schedule."""
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
