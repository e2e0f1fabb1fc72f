"""The probe's telemetry: per-step values kept on the device in chunks, fetched once per chunk,
fed to the divergence monitor and reported; the anomaly report of a gradient explosion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from autotune.numbers import finite
from autotune.probe import divergence
from autotune.probe.config import Rank, Report

#: The series a probe records at every step, as its telemetry events and its summary's `series`
#: name them (a script's own reported metrics come beside them as `metric.NAME`).
SERIES_NAMES: Final[tuple[str, ...]] = (
    "loss",
    "grad_norm",
    "lr",
    "scale",
    "clipped",
    "skipped",
    "step_time",
)

if TYPE_CHECKING:
    pass


ANOMALY_TOP = 10  # layers listed in the anomaly report of a gradient explosion


@dataclass
class Chunk:
    """Per-step telemetry kept on the device until the next fetch (one host sync per chunk)."""

    loss: list[Any] = field(default_factory=list)
    grad_norm: list[Any] = field(default_factory=list)
    layer_norms: list[Any] = field(default_factory=list)
    clipped: list[Any] = field(default_factory=list)
    scale: list[Any] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    step_time: list[Any] = field(default_factory=list)  # seconds, or (start, end) CUDA events

    def __len__(self) -> int:
        return len(self.lr)

    def add(
        self, loss: Any, grad_norm: Any, layer_norms: Any, clipped: Any, scale: Any, lr: float
    ) -> None:
        """One step's values (all but its time), left on the device."""
        self.loss.append(loss)
        self.grad_norm.append(grad_norm)
        self.layer_norms.append(layer_norms)
        self.clipped.append(clipped)
        self.scale.append(scale)
        self.lr.append(lr)

    def fetch(self) -> dict[str, np.ndarray]:
        """Move the chunk to the host: the only synchronisation of the loop."""
        import torch

        stacked = torch.stack(
            [
                torch.stack(self.loss),
                torch.stack(self.grad_norm),
                torch.stack(self.clipped).float(),
                torch.stack(self.scale),
            ]
        )
        host = stacked.double().cpu().numpy()
        times = [
            (s.elapsed_time(e) / 1e3) if isinstance(s, torch.cuda.Event) else s
            for s, e in ((t if isinstance(t, tuple) else (t, None)) for t in self.step_time)
        ]
        return {
            "loss": host[0],
            "grad_norm": host[1],
            "clipped": host[2] > 0.5,
            "scale": host[3],
            "lr": np.asarray(self.lr, dtype=float),
            "step_time": np.asarray(times, dtype=float),
        }


def fetch_after(step: int, steps: int, every: int, early: int) -> bool:
    """Whether the step loop fetches its telemetry after `step` (0-based) of `steps`: after each
    of the first `early` steps (`metrics.throughput_warmup_steps(steps)`), then every `every`
    steps, and after the last. Chunks end at the same steps whether the probe started at 0 or
    continued."""
    return step < early or (step + 1 - early) % every == 0 or step == steps - 1


def flush(
    chunk: Chunk,
    first: int,
    rank: Rank | None,
    monitor: divergence.DivergenceMonitor,
    fp16: bool,
    series: dict[str, list[np.ndarray]],
    emit: Report,
) -> tuple[str, int] | None:
    """Fetch the chunk of steps from `first` on (the one host sync), feed the divergence
    monitor, keep and report it; the monitor's (cause, index in the chunk) of a divergence."""
    host = chunk.fetch()
    if rank is not None:
        host["loss"] = rank.mean(host["loss"])  # over the ranks
    hit = monitor.update(
        host["loss"], host["grad_norm"], host["scale"], host.get("skipped", _skipped(host, fp16))
    )
    append_chunk(series, host, fp16)
    emit(
        {
            "event": "telemetry",
            "first_step": first,
            **{name: arr.tolist() for name, arr in with_skipped(host, fp16).items()},
        }
    )
    return hit


def thresholds(d: Mapping[str, Any]) -> divergence.DivergenceThresholds:
    names = {f for f in divergence.DivergenceThresholds.__dataclass_fields__}
    return divergence.DivergenceThresholds(**{k: v for k, v in d.items() if k in names})


def _skipped(host: Mapping[str, np.ndarray], fp16: bool) -> np.ndarray:
    """Under fp16 the GradScaler skips exactly the steps whose gradients hold inf/NaN."""
    if not fp16:
        return np.zeros(len(host["loss"]), dtype=bool)
    return ~np.isfinite(host["grad_norm"])


def with_skipped(host: Mapping[str, np.ndarray], fp16: bool) -> dict[str, np.ndarray]:
    return {**host, "skipped": _skipped(host, fp16)}


def append_chunk(
    series: dict[str, list[np.ndarray]], host: Mapping[str, np.ndarray], fp16: bool
) -> None:
    for name, arr in with_skipped(host, fp16).items():
        series.setdefault(name, []).append(arr)


def anomaly(named: list[tuple[str, Any]], layer_norms: Any, step: int) -> dict[str, Any]:
    """Per-layer gradient norms at the first gradient explosion, largest first."""
    norms = layer_norms.double().cpu().numpy()
    order = sorted(range(len(norms)), key=lambda i: -norms[i] if np.isfinite(norms[i]) else -1e308)
    return {
        "step": step,
        "layers": [
            {"name": named[i][0], "grad_norm": finite(norms[i])} for i in order[:ANOMALY_TOP]
        ],
    }


def finite_or_none(d: Mapping[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: non-finite metrics become null (the cause is recorded elsewhere)."""
    return {k: (finite(v) if isinstance(v, float) else v) for k, v in d.items()}
