"""The probe layer: one short, instrumented training run in this process (`run_probe`).

`config` (what a probe needs, how it reports), `loop` (the training loop), `steps` (the pieces
of an optimizer step), `clipping` (the clipping policies), `telemetry`, `metrics` (summary
metrics of the step series) and
`divergence` (the online divergence monitor), `summary` (the typed `ProbeSummary` a run reports,
with its `ProbeStatus`). Nothing here imports Ray, Optuna, MLflow, or any
layer of autotune above it.
"""

from autotune.probe.config import ProbeConfig, Rank, Report, steps_at_batch
from autotune.probe.loop import needs_processes, run_probe
from autotune.probe.steps import (
    NoGradient,
    NonFiniteLoss,
    apply_clipping,
    build_optimizer,
    build_scaler,
    clip_gradients,
    clip_policy,
    clips,
    forward_backward,
    lr_at,
    peak_memory_mb,
    pick_device,
    resolve_knobs,
    seed_everything,
    set_deterministic,
)
from autotune.probe.summary import ProbeStatus, ProbeSummary

__all__ = [
    "NoGradient",
    "NonFiniteLoss",
    "ProbeConfig",
    "ProbeStatus",
    "ProbeSummary",
    "Rank",
    "Report",
    "apply_clipping",
    "build_optimizer",
    "build_scaler",
    "clip_gradients",
    "clip_policy",
    "clips",
    "forward_backward",
    "lr_at",
    "needs_processes",
    "peak_memory_mb",
    "pick_device",
    "resolve_knobs",
    "run_probe",
    "seed_everything",
    "set_deterministic",
    "steps_at_batch",
]
