"""The metrics a space may name: what a probe's summary reports (autotune.probe.metrics).

A list of names and what they mean, kept beside the schema so that the schema, the validator
and the verification's interval scale read one list."""

from __future__ import annotations

#: Summary metrics a probe reports (autotune.probe.metrics) that can be objectives or constraints.
METRICS: dict[str, str] = {
    "loss_cv": "fluctuation of the loss around its trend (tail window) / the loss level",
    "noise_per_drop": "the same fluctuation / the loss shed since step 0 (NaN: did not learn)",
    "loss_range": "max - min of the loss over the tail window",
    "spike_count": "loss spikes over the rolling median (robust sigma)",
    "final_loss": "the trained model's mean loss on the held-out set of the initial loss "
    "(no held-out set: the mean training loss over the last 10% of steps)",
    "final_train_loss": "mean training loss over the last 10% of steps",
    "loss_drop": "(initial_loss - final_loss) / abs(initial_loss) (1 - final / initial if > 0)",
    "grad_norm_p50": "median total gradient norm before clipping",
    "grad_norm_p99": "99th percentile of the gradient norm",
    "grad_norm_max": "largest gradient norm",
    "clip_fraction": "share of steps where clipping fired",
    "skipped_steps": "optimizer steps skipped by the GradScaler",
    "throughput": "samples per second over steady steps",
    "tokens_per_s": "tokens per second over steady steps (token workloads)",
    "peak_mem_mb": "peak device memory (GPU) or peak RSS (CPU), MiB",
    "scaling_efficiency": "throughput(N processes) / (N x throughput(1)), maximize; DDP probes "
    "with probe.measure_scaling",
}

#: Quantities that are never zero or negative: a ratio of two of them means something, so they
#: may be constrained relative to the baseline (and their verified intervals are on a log scale).
#: Counts (spike_count, skipped_steps), shares (clip_fraction) and signed ones (loss_drop) are not.
POSITIVE_METRICS = frozenset(
    {
        "throughput",
        "tokens_per_s",
        "peak_mem_mb",
        "loss_cv",
        "noise_per_drop",
        "final_loss",
        "final_train_loss",
        "initial_loss",
        "loss_range",
        "grad_norm_p50",
        "grad_norm_p99",
        "grad_norm_max",
        "scaling_efficiency",  # a ratio of two throughputs
    }
)
