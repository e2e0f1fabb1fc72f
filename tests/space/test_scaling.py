"""`probe.measure_scaling` and scaling_efficiency are refused at load where no trial could
measure them: a study optimising scaling_efficiency without measure_scaling ran every trial to
`infeasible: no finite scaling_efficiency` and exited 0; measure_scaling with one process timed
it against itself (a black-box review of DDP probes)."""

from __future__ import annotations

import pytest

from autotune import space as sp
from autotune.errors import SpaceError

DDP = """\
name: ddp
workload: {name: mlp, size: tiny}
probe: {steps: 20, batch: 16, world_size: 2}
objectives:
  - {metric: scaling_efficiency, direction: maximize}
knobs:
  bucket_cap_mb: {low: 1.0, high: 100.0, log: true}
"""

CONSTRAINED = """\
name: ddp
workload: {name: mlp, size: tiny}
probe: {steps: 20, batch: 16, world_size: 2}
constraints:
  - {metric: scaling_efficiency, op: '>=', value: 0.5}
"""


def _error(text: str, *overrides: str) -> str:
    with pytest.raises(SpaceError) as info:
        sp.loads(text, source="s.yaml", overrides=overrides)
    message = str(info.value)
    assert "\n" not in message, "an error is one line"
    return message


def test_an_objective_of_scaling_efficiency_needs_measure_scaling() -> None:
    message = _error(DDP)
    assert message.startswith("s.yaml: objectives.0.metric (line 5):")
    assert "probe.measure_scaling" in message


def test_a_constraint_on_scaling_efficiency_needs_measure_scaling() -> None:
    message = _error(CONSTRAINED)
    assert message.startswith("s.yaml: constraints.0.metric (line 5):")
    assert "probe.measure_scaling" in message


def test_measure_scaling_with_one_process_is_refused_naming_world_size() -> None:
    message = _error(DDP, "probe.world_size=1", "probe.measure_scaling=true")
    assert message.startswith("s.yaml: probe.measure_scaling (from --set):")
    assert "probe.world_size" in message and "(got 1)" in message


def test_measured_scaling_loads_and_a_studys_own_copy_opens_as_it_ran() -> None:
    space = sp.loads(DDP, overrides=["probe.measure_scaling=true"])
    assert space.probe.measure_scaling and space.objectives[0].metric == "scaling_efficiency"
    assert sp.loads(CONSTRAINED, stored=True).constraints[0].metric == "scaling_efficiency"
