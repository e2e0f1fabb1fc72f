"""Upper bounds of the integer settings of a space or recipe: the most a real machine can run.
A larger value is a typo, refused at load with its key named, not a job to start."""

from __future__ import annotations

#: The most samples one optimizer step (or micro-batch) of one process takes: the batch knob's
#: top (autotune.knobs).
MAX_BATCH = 1_048_576
#: The most CPU threads one probe may ask for: more cores than the largest machines have.
MAX_THREADS = 4096
#: The most GPUs one trial may ask for (budget.gpus_per_trial): as probe.world_size, more than one
#: node has.
MAX_GPUS = 1024
#: The fewest steps a probe runs (probe.steps, budget.target_steps, `autotune verify --steps`).
MIN_STEPS = 10
#: The most steps anything counts (probe.steps, budget.target_steps, telemetry_every).
MAX_STEPS = 10_000_000
