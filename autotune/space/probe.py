"""A space's probe: the `ProbeConfig` one trial of the space runs (`probe_config`).

It lives with the space, not the probe: the probe layer knows nothing of spaces, and every
trial, rung, verification seed and export builds its probe here, so they agree on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.probe.config import REFERENCE_CHUNKS, ProbeConfig, steps_at_batch
from autotune.space.schema import Space


def probe_config(
    space: Space,
    knobs: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    seed: int | None = None,
    steps: int | None = None,
    schedule_steps: int | None = None,
) -> ProbeConfig:
    """The probe of `space` with the given knob values (default: the space's defaults), at
    `steps` (default: probe.steps), a length at the reference batch probe.batch. A trial sees
    `knobs.batch` samples per optimizer step (default probe.batch), its micro-batch is
    batch / accum_steps, and it runs the steps that see the length's samples. Its initial-loss
    reference is the space's, the same for every trial: `probe.reference_batch` (default: the
    smallest micro-batch of the space) and `probe.reference_samples` (default
    REFERENCE_CHUNKS x probe.batch).

    Its LR schedule runs over `schedule_steps` (default: budget.target_steps, else the probe's
    own steps), also a length at probe.batch: every probe of a study is then the first steps of
    the run the user trains."""
    p = space.probe
    knobs = dict(space.fixed_knobs() if knobs is None else knobs)
    batch = int(knobs.get("batch") or p.samples_per_step)
    length = p.steps if steps is None else steps
    schedule = space.budget.target_steps if schedule_steps is None else schedule_steps
    return ProbeConfig(
        workload=space.workload.display,
        size=space.workload.size,
        steps=steps_at_batch(length, p.samples_per_step, batch),
        schedule_steps=(
            None if schedule is None else steps_at_batch(schedule, p.samples_per_step, batch)
        ),
        micro_batch=max(1, batch // max(1, int(knobs.get("accum_steps") or 1))),
        precision=p.precision,
        seed=p.seed if seed is None else seed,
        device=p.device,
        deterministic=p.deterministic,
        telemetry_every=p.telemetry_every,
        threads=p.threads,
        divergence=p.divergence.model_dump(),
        knobs=knobs,
        env={k: str(v) for k, v in (space.fixed_env() if env is None else env).items()},
        world_size=p.world_size,
        oom_retry=p.oom_retry,
        measure_scaling=p.measure_scaling,
        script=space.workload.script,
        args=list(space.workload.args),
        preload=list(space.workload.preload),
        first_report_s=space.budget.first_report_s if space.workload.script else None,
        reference_batch=p.reference_batch or space.smallest_micro_batch(),
        reference_samples=p.reference_samples or REFERENCE_CHUNKS * p.samples_per_step,
    )
