"""A study's identity: what its stored values depend on (`identity`), which a continued study
must keep, and what changed when it did not (`changed_parts`, for the refusal's message)."""

from __future__ import annotations

import json

from autotune import space as sp


def identity(space: sp.Space) -> str:
    """What a study's stored values depend on: the space without its budget, verification and
    rung settings (a study can be continued with more trials or a new target), except that
    every probe schedules its learning rate over `budget.target_steps`: when the schedule can
    stretch (linear or cosine, fixed or searched), the target is part of what was measured."""
    d = {
        k: v
        for k, v in space.to_dict().items()
        if k not in ("budget", "description", "verify", "rungs")
    }
    sched = space.knobs.get("schedule")
    values = sched.choices if isinstance(sched, sp.Domain) else [space.default_value("schedule")]
    if any(v != "constant" for v in values or ["linear"]):
        d["schedule_over"] = space.budget.target_steps
    return json.dumps(d, sort_keys=True)


def changed_parts(before: str, now: str) -> str:
    """What differs between two `identity` records, as keys (`knobs.clip_norm`, `objectives`;
    `budget.target_steps` for the LR schedule's length); "the space" when one is unreadable."""
    try:
        old, new = json.loads(before), json.loads(now)
    except (TypeError, ValueError):
        return "the space"
    if not isinstance(old, dict):
        return "the space"
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "schedule_over":
            out.append("budget.target_steps (the LR schedule's length)")
        elif isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            out.append(key)
    return ", ".join(out) or "the space"
