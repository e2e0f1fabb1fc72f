"""`probe.measure_scaling` and the metric it makes: refused at load where it cannot mean anything.

scaling_efficiency = throughput(N) / (N x throughput(1)) exists only when a probe of N > 1
processes also times one process (`probe.measure_scaling`). A space that optimises or constrains
it without that setting ran every trial to `infeasible: no finite scaling_efficiency` and ended
with no feasible trial: all its compute wasted. One that measures scaling with one process gets
a constant 1.0 that says nothing. Both are refused before anything runs."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.space.schema import Constraint, Objective, ProbeSettings
from autotune.space.values import ErrorAt

SCALING_METRIC = "scaling_efficiency"


def check_scaling(
    probe: ProbeSettings,
    objectives: Sequence[Objective],
    constraints: Sequence[Constraint],
    err: ErrorAt,
) -> None:
    """Refuse measure_scaling with one process, and scaling_efficiency named by an objective or
    a constraint of a space that does not measure it. A study's own stored copy opens as it
    ran (`loads(stored=True)`): its trials are there to read, whatever they measured."""
    if getattr(err, "stored", False):
        return
    if probe.measure_scaling and probe.world_size < 2:
        raise err(
            ["probe", "measure_scaling"],
            f"true needs probe.world_size > 1 (got {probe.world_size}): one process against "
            "itself scales by 1.0 whatever the knobs; raise world_size or set it false",
        )
    named = [("objectives", i, o.metric) for i, o in enumerate(objectives)]
    named += [("constraints", i, c.metric) for i, c in enumerate(constraints)]
    for section, i, metric in named:
        if metric == SCALING_METRIC and not probe.measure_scaling:
            raise err(
                [section, i, "metric"],
                f"{SCALING_METRIC} is measured only with probe.measure_scaling: true (and "
                "probe.world_size > 1): without it no trial has a value and none is feasible",
            )
