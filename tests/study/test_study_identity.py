"""What a study's identity (the space fingerprint a resumed study must match) includes."""

from __future__ import annotations

import pytest

from autotune import space as sp
from autotune.study.driver import identity

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
