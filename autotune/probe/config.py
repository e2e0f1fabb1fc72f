"""What a probe needs (`ProbeConfig`, plain data that travels as JSON) and how it reports
(`Report`, one callable taking a dict).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch


Report = Callable[[dict[str, Any]], None]

#: Held-out chunks of the initial-loss reference a probe reads by default: `reference_samples`
#: is this many of probe.batch in a space (`autotune.space.probe_config`), of the chunk in a
#: `ProbeConfig` made by hand.
REFERENCE_CHUNKS = 16


def steps_at_batch(length: int, reference: int, batch: int) -> int:
    """Optimizer steps that see the samples of `length` steps at the `reference` batch, at
    `batch` samples per step: lengths (probe.steps, rungs, the target, verification) count steps
    at probe.batch, so trials that search the batch compare at equal samples seen (within one
    step's batch). The one place this conversion is made."""
    if batch == reference:
        return length
    return max(1, round(length * reference / batch))


@dataclass(frozen=True)
class ProbeConfig:
    """Everything one probe needs, as plain data (it travels to the trial process as JSON)."""

    workload: str
    size: str = "tiny"
    steps: int = 200
    schedule_steps: int | None = None  # the LR schedule's length (its `total`); None: steps
    micro_batch: int = 16
    precision: str = "fp32"
    seed: int = 0
    device: str = "auto"
    deterministic: bool = False
    telemetry_every: int = 10
    threads: int | None = None
    divergence: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)  # unset knobs take PyTorch's defaults
    env: dict[str, str] = field(default_factory=dict)  # for the record; the launcher sets them
    world_size: int = 1  # > 1: a DDP probe of that many processes (autotune.process.supervisor)
    oom_retry: bool = False
    measure_scaling: bool = False
    script: str | None = None  # a training script run in the probe's process (probe.script)
    args: list[str] = field(default_factory=list)  # its sys.argv[1:]
    # The big modules it imports (workload.preload): its process's zygote imports them once.
    preload: list[str] = field(default_factory=list)
    # A script's first trial.report must come within this many seconds of its start, or it
    # fails naming the API it forgot (`autotune.probe.script`); None: no limit.
    first_report_s: float | None = None
    # Where the study's rule after the baseline set `first_report_s` (5x the baseline's time):
    # that rule and what lifts it, for the failure's advice; None: budget.first_report_s.
    first_report_rule: str | None = None
    # Continuation (autotune.probe.checkpoint): write the state after the last step to
    # `save_state`; start from the state at `resume_from` (a shorter probe of this config).
    save_state: str | None = None
    resume_from: str | None = None
    # The initial-loss reference (`autotune.probe.reference`): the untrained model's mean loss
    # over `reference_samples` held-out samples read in chunks of `reference_batch`. Fixed for a
    # whole study (space and recipe), so every trial of a seed is judged against one number
    # whatever its micro-batch. None: the micro-batch, and REFERENCE_CHUNKS chunks of it.
    reference_batch: int | None = None
    reference_samples: int | None = None

    @property
    def reference_chunk(self) -> int:
        """Samples per held-out chunk of the initial-loss reference."""
        return self.reference_batch or self.micro_batch

    @property
    def reference_total(self) -> int:
        """Held-out samples of the initial-loss reference (at most: the set may be smaller)."""
        return self.reference_samples or REFERENCE_CHUNKS * self.reference_chunk

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def for_baseline(self, baseline: bool = True) -> ProbeConfig:
        """This probe as the baseline's (when `baseline`): the yardstick runs the whole length
        it is compared at, stopping early only on a non-finite loss (`divergence.stop_early:
        nonfinite`; a probe told never to stop keeps that). Its summary still says diverged."""
        if not baseline or self.divergence.get("stop_early", True) is False:
            return self
        return replace(self, divergence={**self.divergence, "stop_early": "nonfinite"})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeConfig:
        return cls(**dict(data))


class Rank(Protocol):
    """One rank of a DDP probe, as the loop sees it (`autotune.process.ranks.Rank`)."""

    world_size: int
    rank: int

    def wrap(self, model: torch.nn.Module, knobs: Mapping[str, Any]) -> torch.nn.Module: ...

    def batches(self, workload: Any, micro_batch: int, seed: int) -> Iterator[Any]: ...

    def mean(self, values: np.ndarray) -> np.ndarray: ...

    def finish(
        self, result: dict[str, Any], model: torch.nn.Module, workload: Any
    ) -> dict[str, Any]: ...
