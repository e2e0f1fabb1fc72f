"""What a study's identity (the space fingerprint a resumed study must match) includes."""

from __future__ import annotations

import pytest

from autotune import space as sp
from autotune.study.identity import identity

SPACE = """
name: ident
workload: {{name: mlp, size: tiny}}
probe: {{steps: 20, batch: 16}}
budget: {{trials: {trials}, target_steps: {target}}}
knobs:
  lr: 0.01
  clip_norm: {{low: 0.1, high: 1.0}}
{schedule}
"""


def ident(schedule: str, target: int, trials: int = 4) -> str:
    text = SPACE.format(schedule=schedule, target=target, trials=trials)
    return identity(sp.loads(text, source="test"))


def test_more_trials_or_a_new_target_keep_a_constant_schedules_identity() -> None:
    assert ident("", 60) == ident("", 60, trials=9) == ident("", 120)
    assert ident("  schedule: constant", 60) == ident("  schedule: constant", 120)


@pytest.mark.parametrize(
    "schedule",
    ["  schedule: cosine", "  schedule: linear", "  schedule: {choices: [constant, cosine]}"],
)
def test_a_schedule_that_stretches_makes_the_target_part_of_the_identity(schedule: str) -> None:
    # every probe schedules its lr over the target: another target is another measurement
    assert ident(schedule, 60) != ident(schedule, 120)
    assert ident(schedule, 60) == ident(schedule, 60, trials=9)


def test_the_refusal_names_what_changed() -> None:
    """A review: the message listed "knobs, probe, objectives, sampler, or the target" but not
    the constraints, and never which one changed."""
    from autotune.study.identity import changed_parts

    base = SPACE.format(schedule="  schedule: linear", target=60, trials=4)
    a = identity(sp.loads(base, source="a"))
    wider = base.replace("high: 1.0", "high: 2.0")
    assert changed_parts(a, identity(sp.loads(wider, source="b"))) == "knobs.clip_norm"
    longer = SPACE.format(schedule="  schedule: linear", target=90, trials=4)
    said = changed_parts(a, identity(sp.loads(longer, source="c")))
    assert said == "budget.target_steps (the LR schedule's length)"
    held = base + "constraints:\n  - {metric: loss_drop, op: '>=', value: 0.1}\n"
    assert changed_parts(a, identity(sp.loads(held, source="d"))) == "constraints"
    assert changed_parts("not json", a) == "the space"
