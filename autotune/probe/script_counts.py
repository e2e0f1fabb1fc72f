"""The samples and tokens of a training script's steps, each step's own (`trial.report(...,
samples=N, tokens=M)`), for the summary's counts and throughput (`autotune.probe.script`).

A script's steps need not be alike: a last batch that is short (39 steps of 16 samples, then 1)
is common. The summary once took the last report's count for every step, so that one short batch
made the throughput 1/16 of the real one and `samples_seen` 40 instead of 625. Here each step
counts its own: `samples_seen` is their sum, the throughput's numerator their mean (the rate a
run of those steps processed), and `samples_per_step` the count most steps had.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class StepCounts:
    """The samples and tokens of each step this process ran, and of the steps it inherited."""

    def __init__(self) -> None:
        self.samples: list[Any] = []
        self.tokens: list[Any] = []
        # a continued probe's inherited steps: how many, and the samples and tokens they saw
        self.inherited_steps = 0
        self.inherited: tuple[Any, Any] = (0, 0)
        self.nominal: tuple[Any, Any] = (0, 0)  # the inherited probe's per-step counts

    def inherit(self, steps: int, per_step: tuple[int, int], seen: tuple[Any, Any] | None) -> None:
        """The `steps` a shorter probe ran: their sums as it saved them (`seen`), else its
        per-step counts times the steps (a state saved before the sums were)."""
        self.inherited_steps = steps
        self.inherited = seen if seen is not None else (per_step[0] * steps, per_step[1] * steps)
        self.nominal = per_step

    def add(self, samples: Any, tokens: Any, default_samples: int) -> None:
        """One step's counts: `samples` (None: the configured micro-batch x accumulation,
        `default_samples`) and `tokens` (None: the previous step's, 0 before any)."""
        self.samples.append(default_samples if samples is None else samples)
        last = self.tokens[-1] if self.tokens else self.nominal[1]
        self.tokens.append(last if tokens is None else tokens)

    @property
    def seen(self) -> tuple[Any, Any]:
        """The samples and tokens of every step run, inherited ones included."""
        return self.inherited[0] + sum(self.samples), self.inherited[1] + sum(self.tokens)

    @property
    def own_seen(self) -> Any:
        """The samples of the steps this process ran."""
        return sum(self.samples)

    @property
    def per_step(self) -> tuple[Any, Any]:
        """The samples and tokens most of this process's steps had (the inherited probe's when
        it ran none): a run's batch, which a short last batch does not change."""
        if not self.samples:
            return self.nominal
        return _most_common(self.samples), _most_common(self.tokens)

    @property
    def rate_per_step(self) -> tuple[float, float]:
        """The mean samples and tokens of this process's steps: the throughput's numerators
        (the steps' times are this process's own, `metrics.own_timing`)."""
        if not self.samples:
            return float(self.nominal[0]), float(self.nominal[1])
        n = len(self.samples)
        return sum(self.samples) / n, sum(self.tokens) / n


def _most_common(values: list[Any]) -> Any:
    return Counter(values).most_common(1)[0][0]
