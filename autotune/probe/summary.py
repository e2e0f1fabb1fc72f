"""A probe's summary, typed: what `run_probe` (`autotune.probe.loop`) and a script session
(`autotune.probe.script`) report at the end of a run, one definition for both.

`ProbeSummary.to_dict()` is the `{"event": "summary", ...}` message the probe reports and
returns (the same keys, values and order as before the type existed); `ProbeSummary.from_dict`
reads one back, also one written by an older version where today's readers accept it: the
spike record, the initial-loss reference, `schedule_steps` and the samples and tokens seen may
be missing (None here, and left out again by `to_dict`); the keys a later layer adds (a DDP
rank's `world_size`, the supervisor's `oom_retried`, ...) are kept as they were in `extra`.

`ProbeStatus` is the probe's verdict on a run (`ok`, `diverged`, `oom`); the trial's outcome
(`complete`, `diverged`, `oom`, `failed`) is made from it by `autotune.process.launcher`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.probe import metrics
from autotune.probe.steps import peak_memory_mb
from autotune.probe.telemetry import finite_or_none

if TYPE_CHECKING:
    import numpy as np
    import torch

    from autotune.probe.config import ProbeConfig


class ProbeStatus(str, Enum):
    """How a probe's run ended: trained its steps (`ok`, spikes and all), found a divergence
    (a result, not an error), or ran out of memory."""

    OK = "ok"
    DIVERGED = "diverged"
    OOM = "oom"

    @classmethod
    def of(cls, oom: bool, cause: str | None) -> ProbeStatus:
        """The status of a run that ran out of memory or not, with its divergence cause (None:
        none found): out of memory whatever was found before, else diverged if found."""
        if oom:
            return cls.OOM
        return cls.DIVERGED if cause is not None else cls.OK


def _need(d: Mapping[str, Any], key: str) -> Any:
    if key not in d:
        raise ValueError(f"probe summary: no '{key}' (keys: {', '.join(sorted(d)) or 'none'})")
    return d[key]


@dataclass(frozen=True)
class DivergenceRecord:
    """The divergence monitor's record (`DivergenceMonitor.record()`): the loss spikes counted,
    the worst loss ratio, each spike, and the step where a divergence's trend began."""

    spike_count: int
    max_loss_ratio: float | None
    spikes: list[dict[str, Any]]
    onset_step: int | None
    # a trend verdict undone at the run's end, its loss back (`DivergenceMonitor.recovered_at_end`)
    withdrawn: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DivergenceRecord:
        return cls(
            spike_count=_need(d, "divergence_spike_count"),
            max_loss_ratio=_need(d, "divergence_max_loss_ratio"),
            spikes=_need(d, "divergence_spikes"),
            onset_step=_need(d, "divergence_onset_step"),
            withdrawn=d.get("divergence_withdrawn"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "divergence_spike_count": self.spike_count,
            "divergence_max_loss_ratio": self.max_loss_ratio,
            "divergence_spikes": self.spikes,
            "divergence_onset_step": self.onset_step,
            "divergence_withdrawn": self.withdrawn,
        }


@dataclass(frozen=True)
class Continued:
    """The training loop's continuation facts: the steps inherited from a shorter probe's
    state, the samples this process ran, why it did (not) continue, and the state it saved."""

    resumed_from_step: int
    samples_run: int
    continuation: dict[str, Any] | None  # None: not asked to continue
    state_saved: dict[str, Any] | None  # None: not asked to save (or the run did not finish)

    KEYS: ClassVar[tuple[str, ...]] = (
        "resumed_from_step",
        "samples_run",
        "continuation",
        "state_saved",
    )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Continued:
        return cls(*(_need(d, key) for key in cls.KEYS))

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KEYS}


@dataclass(frozen=True)
class ScriptRun:
    """A user's training script run as the probe: its path (None: a script run on its own
    whose path Python did not give), its arguments, the SHA-256 of its file as it started
    (None: not read), what applied the knobs, and the seconds from its start to its first
    report (None: it made none; left out of the dict then)."""

    path: str | None
    args: list[str]
    sha256: str | None = None
    applied: list[str] | None = None  # what applied the knobs (`probe.script.mark_applied`)
    first_report_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"script": self.path, "args": self.args}
        _put(out, "script_sha256", self.sha256)
        _put(out, "script_applied", self.applied)
        _put(out, "first_report_s", self.first_report_s)
        return out


@dataclass(frozen=True)
class ProbeSummary:
    """The summary of one probe's run. `to_dict()` is the reported message; the containers
    (metrics, series, ...) are shared with it, not copied."""

    status: ProbeStatus
    divergence_cause: str | None  # None unless diverged
    diverged_at_step: int | None
    divergence: DivergenceRecord | None  # None: a record from before the spike record
    metrics: dict[str, Any]  # `summary_metrics`: JSON numbers, non-finite ones None
    initial_reference: dict[str, Any] | None  # `Reference.record()`; None: an older record
    anomaly: dict[str, Any] | None  # per-layer norms at the first gradient spike (the loop's)
    series: dict[str, list[float]]  # per step; a script's own metrics as `metric.NAME`
    knobs: dict[str, Any]  # as resolved for the run
    env: dict[str, str]
    workload: str
    size: str
    device: str
    precision: str
    seed: int
    steps_planned: int
    schedule_steps: int | None  # the LR schedule's length; None: an older record
    steps_run: int
    micro_batch: int
    accum_steps: int
    effective_batch: int
    samples_per_step: int
    tokens_per_step: int
    samples_seen: int | None  # None: an older record
    tokens_seen: int | None  # None: an older record
    determinism: dict[str, Any]
    wall_s: float
    script: ScriptRun | None = None  # only a script session's summary
    continued: Continued | None = None  # only the training loop's
    extra: dict[str, Any] = field(default_factory=dict)  # keys a later layer added, as read
    # The trained model on the initial loss's held-out set (`Reference.record()`, source
    # "train" when there is none); None: a script's or an older record.
    final_reference: dict[str, Any] | None = None

    @property
    def diverged(self) -> bool:
        return self.status is ProbeStatus.DIVERGED

    def to_dict(self) -> dict[str, Any]:
        """The `summary` event: the keys in the order the probe has always reported them."""
        out: dict[str, Any] = {
            "event": "summary",
            "status": self.status.value,
            "diverged": self.diverged,
            "divergence_cause": self.divergence_cause,
            "diverged_at_step": self.diverged_at_step,
        }
        if self.divergence is not None:
            out.update(self.divergence.to_dict())
        out["metrics"] = self.metrics
        if self.initial_reference is not None:
            out["initial_reference"] = self.initial_reference
        _put(out, "final_reference", self.final_reference)
        out.update(
            anomaly=self.anomaly,
            series=self.series,
            knobs=self.knobs,
            env=self.env,
            workload=self.workload,
            size=self.size,
        )
        if self.script is not None:
            out.update(self.script.to_dict())
        out.update(device=self.device, precision=self.precision, seed=self.seed)
        out["steps_planned"] = self.steps_planned
        _put(out, "schedule_steps", self.schedule_steps)
        out.update(
            steps_run=self.steps_run,
            micro_batch=self.micro_batch,
            accum_steps=self.accum_steps,
            effective_batch=self.effective_batch,
            samples_per_step=self.samples_per_step,
            tokens_per_step=self.tokens_per_step,
        )
        _put(out, "samples_seen", self.samples_seen)
        _put(out, "tokens_seen", self.tokens_seen)
        if self.continued is not None:
            out.update(self.continued.to_dict())
        out.update(determinism=self.determinism, wall_s=self.wall_s)
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProbeSummary:
        """A summary read back (a trial record's `summary`, a probe's message). ValueError
        naming the key when one every version wrote is missing or the status is unknown."""
        if d.get("event", "summary") != "summary":
            raise ValueError(f"probe summary: event is {d.get('event')!r}, not 'summary'")
        status = _need(d, "status")
        try:
            status = ProbeStatus(status)
        except ValueError:
            known = ", ".join(s.value for s in ProbeStatus)
            raise ValueError(f"probe summary: status {status!r} is none of {known}") from None
        has = set(d)
        kw = {name: _need(d, name) for name in _ALWAYS}
        kw.update({name: d.get(name) for name in _LATER})
        return cls(
            status=status,
            divergence=DivergenceRecord.from_dict(d) if has & _DIVERGENCE_KEYS else None,
            script=(
                ScriptRun(
                    _need(d, "script"),
                    _need(d, "args"),
                    d.get("script_sha256"),
                    d.get("script_applied"),
                    d.get("first_report_s"),
                )
                if "script" in d
                else None
            ),
            continued=Continued.from_dict(d) if has & set(Continued.KEYS) else None,
            extra={k: v for k, v in d.items() if k not in _KNOWN},
            **kw,
        )


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


# The keys every version of the summary wrote, those added since (may be missing), and those
# of the optional parts.
_ALWAYS = (
    "divergence_cause",
    "diverged_at_step",
    "metrics",
    "anomaly",
    "series",
    "knobs",
    "env",
    "workload",
    "size",
    "device",
    "precision",
    "seed",
    "steps_planned",
    "steps_run",
    "micro_batch",
    "accum_steps",
    "effective_batch",
    "samples_per_step",
    "tokens_per_step",
    "determinism",
    "wall_s",
)
_LATER = (
    "initial_reference",
    "final_reference",
    "schedule_steps",
    "samples_seen",
    "tokens_seen",
)
_DIVERGENCE_KEYS = set(DivergenceRecord(0, None, [], None).to_dict())
_KNOWN = {
    "event",
    "status",
    "diverged",
    *_ALWAYS,
    *_LATER,
    *_DIVERGENCE_KEYS,
    *Continued.KEYS,
    "script",
    "args",
    "script_sha256",
    "script_applied",
    "first_report_s",
}


def loss_of(summary: Mapping[str, Any] | None) -> list[Any]:
    """The loss at each step a probe ran, out of its summary as reported or stored
    (`ProbeSummary.to_dict()`, its `series`); empty when there is none (a failed probe's record
    has no summary, an older or slimmed one no series). What `autotune verify` and a study's
    verification keep of a seed's run."""
    return list(((summary or {}).get("series") or {}).get("loss") or [])


def summary_metrics(
    cfg: ProbeConfig,
    data_series: dict[str, np.ndarray],
    samples_per_step: float,
    tokens_per_step: float,
    device: torch.device,
    initial: float | None = None,
    final: float | None = None,
) -> dict[str, Any]:
    """The summary metrics of the recorded series (`initial`: the reference loss; `final`: the
    trained model's on the same held-out set), and the peak memory (JSON: no NaN)."""
    summary = (
        metrics.summarize(
            data_series,
            samples_per_step=samples_per_step,
            tokens_per_step=tokens_per_step,
            precision=cfg.precision,
            reference=initial,
            final_reference=final,
        )
        if data_series
        else {}
    )
    summary["peak_mem_mb"] = peak_memory_mb(device)
    return finite_or_none(summary)
