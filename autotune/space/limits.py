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
#: The most seconds one screen probe may run (budget.trial_timeout_s): 30 days. Python's timers
#: refuse a wait of more than ~9.2e9 s (OverflowError: timestamp out of range for platform time_t).
MAX_TIMEOUT_S = 30 * 24 * 3600
#: The most seconds any probe may be given: a rung probe's limit is budget.trial_timeout_s scaled
#: by its steps (target_steps / probe.steps at the top); ~31 years, well below that overflow.
MAX_PROBE_TIMEOUT_S = 1e9
