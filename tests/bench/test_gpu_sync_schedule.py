"""The GPU sync check's bound is the probe's own fetch schedule: the number of telemetry fetches
`benchmarks/gpu_sync_check.py` allows the step loop is the number the loop makes, counted here
on the CPU (the sync itself needs a GPU; the schedule does not)."""

from __future__ import annotations

from typing import Any

import pytest
from assets.bench import imported

from autotune.probe import ProbeConfig, run_probe


@pytest.mark.parametrize(("steps", "every"), [(40, 10), (57, 7), (12, 25)])
def test_the_allowed_fetches_are_the_loops(steps: int, every: int) -> None:
    events: list[dict[str, Any]] = []
    cfg = ProbeConfig(
        workload="mlp", size="tiny", steps=steps, micro_batch=8, telemetry_every=every
    )
    run_probe(cfg, report=events.append)
    fetched = [e for e in events if e.get("event") == "telemetry"]
    assert sum(len(e["loss"]) for e in fetched) == steps  # every step fetched once
    with imported("gpu_sync_check") as check:
        assert check._fetches(steps, every) == len(fetched)
