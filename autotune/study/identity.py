"""A study's identity: what its stored values depend on (`identity`), which a continued study
must keep (`differs`), and what changed when it did not (`edited_script`, `changed_parts`).

A script study's identity holds its script's SHA-256 too: the README promises each trial runs
the script unedited, and a study continued after an edit would compare trials of two versions
as one. A study made before the hash was recorded has none, and still continues."""

from __future__ import annotations

import json
from typing import Any

from autotune import space as sp
from autotune.errors import StudyError
from autotune.probe.script import file_sha256
from autotune.recipe.script_hash import SHORT

#: The identity's key for a script workload's SHA-256 (absent for a named workload).
SCRIPT_KEY = "script_sha256"


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
    sha = file_sha256(space.workload.script)
    if sha is not None:  # an unreadable script is the probe's own error, not a new identity
        d[SCRIPT_KEY] = sha
    return json.dumps(d, sort_keys=True)


def differs(before: str, now: str) -> bool:
    """Whether a study stored with identity `before` cannot continue with `now`. A record
    without the script's hash (made before it was kept) is compared without it."""
    old, new = _parsed(before), _parsed(now)
    if old is not None and new is not None and (SCRIPT_KEY not in old or SCRIPT_KEY not in new):
        return _without_script(old) != _without_script(new)
    return before != now


def edited_script(before: str, now: str, name: str, url: str) -> StudyError | None:
    """The refusal of study `name` (in storage `url`) whose space is the same but whose script
    was edited since its trials ran; None when something else differs (the space's refusal)."""
    old, new = _parsed(before), _parsed(now)
    if old is None or new is None or SCRIPT_KEY not in old or SCRIPT_KEY not in new:
        return None
    if _without_script(old) != _without_script(new):
        return None
    script = (new.get("workload") or {}).get("script")
    was, is_ = str(old[SCRIPT_KEY])[:SHORT], str(new[SCRIPT_KEY])[:SHORT]
    return StudyError(
        f"study '{name}' in {url}: its trials ran another version of the script {script} "
        f"(sha256 {was}, now {is_}); give the new one another name with --set "
        f"name={name}-2, or restore the script"
    )


def _parsed(record: str) -> dict[str, Any] | None:
    """An identity record as a dict; None when it is not one (a foreign or damaged record)."""
    try:
        d = json.loads(record)
    except (TypeError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _without_script(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != SCRIPT_KEY}


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
        if a == b or (key == SCRIPT_KEY and (a is None or b is None)):  # None: not recorded
            continue
        if key == "schedule_over":
            out.append("budget.target_steps (the LR schedule's length)")
        elif key == SCRIPT_KEY:
            out.append("workload.script (its content)")
        elif isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            out.append(key)
    return ", ".join(out) or "the space"
