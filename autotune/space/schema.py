"""The search-space file's model: knob domains, the file's sections (pydantic: unknown keys are
errors) and the frozen `Space`; `dump(space)` writes it back so that `loads(dump(s)) == s`.

A space file describes one study: its name, the workload, the probe settings, the objectives and
constraints, the trial budget, the sampler, and the knobs. Each knob is either fixed (a scalar)
or a domain (`{low, high, log}`, `{low, high, step}` or `{choices: [...]}`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from autotune.errors import did_you_mean
from autotune.knobs import KNOBS, Scalar
from autotune.space.divergence import DivergenceSettings
from autotune.space.limits import (
    MAX_BATCH,
    MAX_GPUS,
    MAX_STEPS,
    MAX_THREADS,
    MAX_TIMEOUT_S,
    MIN_STEPS,
)
from autotune.space.metric_names import METRICS, POSITIVE_METRICS
from autotune.space.rung_settings import RungSettings
from autotune.space.section import Section
from autotune.space.seeds import Seed
from autotune.space.verify_settings import VerifySettings

#: Site settings (fabric, interface, PCIe) belong to the cluster and are never searched.
ENV_SITE_SETTINGS = ("HSA_FORCE_FINE_GRAIN_PCIE", "NCCL_IB_", "NCCL_SOCKET_IFNAME")
ENV_COMM_PREFIXES = ("NCCL_", "RCCL_", "TORCH_NCCL_")
ENV_FP16_ALT_IMPL = (
    "ROCBLAS_INTERNAL_FP16_ALT_IMPL",
    "MIOPEN_DEBUG_CONVOLUTION_ATTRIB_FP16_ALT_IMPL",
)
LL128_ARCHS = ("gfx90a", "gfx942", "gfx950")

# --------------------------------------------------------------------------------------------
# Domains
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """A searched range for one knob. Exactly one of (low/high) or choices is set."""

    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Scalar, ...] = ()
    default: Scalar | None = None
    # `clip_norm: auto`: the range is seeded from the baseline's gradient norms when the study
    # has measured them (`autotune.study.clip_seed`); until then low/high are a placeholder.
    auto: bool = False

    @property
    def is_choice(self) -> bool:
        return bool(self.choices)

    def contains(self, value: Any) -> bool:
        if self.is_choice:
            return value in self.choices
        assert self.low is not None and self.high is not None
        return isinstance(value, int | float) and self.low <= value <= self.high

    def midpoint(self, kind: str) -> Scalar:
        if self.is_choice:
            return self.choices[0]
        assert self.low is not None and self.high is not None
        mid = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2.0
        if kind == "int":
            step = int(self.step or 1)
            return int(self.low + round((mid - self.low) / step) * step)
        return float(mid)

    def grid(self, kind: str, points: int) -> list[Scalar]:
        """Values of this domain for the grid sampler (`points` per continuous domain)."""
        if self.is_choice:
            return list(self.choices)
        assert self.low is not None and self.high is not None
        if kind == "int":
            step = int(self.step or 1)
            values = list(range(int(self.low), int(self.high) + 1, step))
            if len(values) <= points:
                return [int(v) for v in values]
            idx = [round(i * (len(values) - 1) / (points - 1)) for i in range(points)]
            return sorted({int(values[i]) for i in idx})
        if points == 1:
            return [float(self.midpoint(kind))]
        if self.log:
            a, b = math.log(self.low), math.log(self.high)
            return [float(math.exp(a + i * (b - a) / (points - 1))) for i in range(points)]
        return [float(self.low + i * (self.high - self.low) / (points - 1)) for i in range(points)]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.is_choice:
            out["choices"] = list(self.choices)
        else:
            out["low"], out["high"] = self.low, self.high
            if self.log:
                out["log"] = True
            if self.step is not None:
                out["step"] = self.step
        if self.default is not None:
            out["default"] = self.default
        return out


KnobValue = Scalar | Domain

# --------------------------------------------------------------------------------------------
# The file's sections (pydantic: unknown keys are errors)
# --------------------------------------------------------------------------------------------


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class WorkloadRef(Section):
    name: str = Field("", description="built-in name, path/file.py:attr or pkg.mod:attr")
    size: str = "tiny"
    script: str | None = Field(None, description="a training script calling autotune.trial()")
    args: tuple[str, ...] = Field((), description="the script's command-line arguments")
    preload: tuple[str, ...] = Field(
        (), description="modules a script imports (e.g. transformers), imported once per worker"
    )

    @field_validator("preload")
    @classmethod
    def _module_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not _MODULE_NAME.fullmatch(name):
                raise ValueError(f"preload: {name!r} is not a dotted module name (e.g. lightning)")
        return v

    @model_validator(mode="after")
    def _name_or_script(self) -> WorkloadRef:
        if self.script is not None and self.name:
            raise ValueError(
                "give `name` (a workload factory) or `script` (a training script), not both"
            )
        if self.script is None and not self.name:
            hint = "e.g. `workload: {name: tiny_gpt}` or `workload: {script: train.py}`"
            raise ValueError(f"give `name` (a workload factory) or `script`: {hint}")
        if self.script is not None and not self.script.endswith(".py"):
            raise ValueError(f"script must be a .py file, got {self.script!r}")
        if self.args and self.script is None:
            raise ValueError("args are the arguments of a `script`; a named workload has none")
        if self.preload and self.script is None:
            raise ValueError("preload is for a `script`; a named workload's imports are autotune's")
        if self.script is not None and self.size != "tiny":
            raise ValueError("size is for a named workload; a script reads its own `args`")
        if self.name.endswith(".py") and ":" not in self.name:
            raise ValueError(f"did you mean `workload: {{script: {self.name}}}`?")
        return self

    @model_serializer(mode="wrap")
    def _plain(self, handler: Any) -> dict[str, Any]:
        # A built-in workload dumps as before ({name, size}); a script as {script, args}.
        out: dict[str, Any] = handler(self)
        if self.script is None:
            return {"name": out["name"], "size": out["size"]}
        plain = {"script": out["script"], "args": list(out["args"])}
        if self.preload:  # only when given: the dumps of spaces without it stay as they were
            plain["preload"] = list(out["preload"])
        return plain

    @property
    def display(self) -> str:
        """The workload as a person reads it: its name, or `script:train.py`."""
        return f"script:{Path(self.script).name}" if self.script else self.name


class ProbeSettings(Section):
    steps: int = Field(200, ge=MIN_STEPS, le=MAX_STEPS)
    micro_batch: int = Field(16, ge=1, le=MAX_BATCH)
    batch: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="samples per step; micro-batch = batch / accum"
    )
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    seed: Seed = 0
    device: str = "auto"
    deterministic: bool = False
    telemetry_every: int = Field(10, ge=1, le=MAX_STEPS, description="steps between fetches")
    threads: int | None = Field(None, ge=1, le=MAX_THREADS, description="CPU threads; null: auto")
    divergence: DivergenceSettings = DivergenceSettings()
    world_size: int = Field(
        1, ge=1, le=MAX_GPUS, description="processes of one DDP probe on this node (1: no DDP)"
    )
    oom_retry: bool = Field(
        False, description="on out-of-memory: retry once at half micro-batch, double accumulation"
    )
    measure_scaling: bool = Field(
        False, description="also time one process: metric scaling_efficiency (world_size > 1)"
    )
    # The initial loss's held-out samples and chunk (null: 16 x batch, the smallest micro-batch)
    reference_batch: int | None = Field(None, ge=1, le=MAX_BATCH, description="per chunk")
    reference_samples: int | None = Field(None, ge=1, le=16 * MAX_BATCH, description="read")

    @property
    def samples_per_step(self) -> int:
        """Samples per optimizer step per process: probe.batch, else the micro-batch."""
        return self.batch if self.batch is not None else self.micro_batch

    def micro_for(self, accum_steps: int) -> int:
        """The micro-batch of a trial with `accum_steps`: equal samples per step for all."""
        return max(1, self.samples_per_step // max(1, accum_steps))

    @model_serializer(mode="wrap")
    def _plain(self, handler: Any) -> dict[str, Any]:
        # The reference keys only when given: dumps (and study fingerprints) stay as they were.
        out: dict[str, Any] = handler(self)
        return {k: v for k, v in out.items() if v is not None or not k.startswith("reference_")}

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError("must be auto, cpu, cuda or cuda:N (ROCm GPUs are cuda in torch)")
        return v


class Objective(Section):
    metric: str
    direction: Literal["minimize", "maximize"]

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check_metric(v)


class Constraint(Section):
    """`metric op value`; with `relative_to: baseline`, `metric op value x the baseline's metric`
    measured at the same number of steps (`value` is then a factor)."""

    metric: str
    op: Literal[">=", "<="]
    value: float
    relative_to: Literal["baseline"] | None = None

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check_metric(v)

    @field_validator("relative_to")
    @classmethod
    def _relative(cls, v: str | None, info: ValidationInfo) -> str | None:
        metric, value = info.data.get("metric"), info.data.get("value")
        if v is None or metric is None or value is None:
            return v
        if metric not in POSITIVE_METRICS:
            allowed = ", ".join(m for m in METRICS if m in POSITIVE_METRICS)
            raise ValueError(
                f"{metric} cannot be relative to the baseline (a ratio needs a quantity that is "
                f"always > 0); one of {allowed}"
            )
        if value <= 0:
            raise ValueError(f"with relative_to, value is a factor > 0 (got {value:g})")
        return v

    @property
    def label(self) -> str:
        """As a person reads it: `loss_drop >= 0.05`, `final_loss <= 1.05 x baseline`."""
        text = f"{self.metric} {self.op} {self.value:g}"
        return f"{text} x {self.relative_to}" if self.relative_to else text

    @model_serializer(mode="wrap")
    def _plain(self, handler: Any) -> dict[str, Any]:
        # relative_to only when given: the dumps (and study fingerprints) of spaces without it
        # stay as they were.
        out: dict[str, Any] = handler(self)
        if out.get("relative_to") is None:
            out.pop("relative_to", None)
        return out


class Budget(Section):
    trials: int = Field(20, ge=1, le=100_000)
    concurrency: int | None = Field(None, ge=1, le=MAX_THREADS, description="null: auto")
    trial_timeout_s: float = Field(600.0, gt=0, le=MAX_TIMEOUT_S, description="per screen probe")
    first_report_s: float | None = Field(
        300.0,
        gt=0,
        le=1e6,
        description="a script must report within this of its start (later trials: 5x the "
        "baseline's time, at least 60 s); null: no limit",
    )
    target_steps: int | None = Field(
        None, ge=MIN_STEPS, le=MAX_STEPS, description="the length you train; null: probe.steps"
    )
    cpus_per_trial: float | None = Field(None, gt=0, le=MAX_THREADS, description="null: auto")
    gpus_per_trial: float = Field(1.0, ge=0, le=MAX_GPUS)


class SamplerSettings(Section):
    name: Literal["tpe", "nsga2", "random", "grid"] = "tpe"
    seed: Seed = 0
    # benchmarks/sample_efficiency.py compares 6 (the baseline counts as one) with 3 side by
    # side: no reliable difference on this noisy objective (benchmarks/RESULTS.md), so 6 stays.
    n_startup_trials: int = Field(6, ge=0, description="tpe: trials before modelling")
    grid_points: int = Field(3, ge=1, description="grid: points per continuous domain")


def _check_metric(v: str) -> str:
    if v not in METRICS:
        raise ValueError(
            f"unknown metric '{v}'{did_you_mean(v, METRICS)}; one of {', '.join(METRICS)}"
        )
    return v


DEFAULT_OBJECTIVES = (
    Objective(metric="noise_per_drop", direction="minimize"),
    Objective(metric="throughput", direction="maximize"),
)
DEFAULT_CONSTRAINTS = (Constraint(metric="loss_drop", op=">=", value=0.05),)


@dataclass(frozen=True)
class Space:
    """A validated study description. Build it with `load`/`loads`; pass it whole."""

    name: str
    workload: WorkloadRef
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    objectives: tuple[Objective, ...] = DEFAULT_OBJECTIVES
    constraints: tuple[Constraint, ...] = DEFAULT_CONSTRAINTS
    budget: Budget = field(default_factory=Budget)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    verify: VerifySettings = field(default_factory=VerifySettings)
    rungs: RungSettings = field(default_factory=RungSettings)
    knobs: Mapping[str, KnobValue] = field(default_factory=dict)
    env: Mapping[str, KnobValue] = field(default_factory=dict)
    description: str = ""
    source: str = "<memory>"  # the file it came from, for messages (not part of equality)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Space):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(dump(self))

    # ----- views -----
    def to_dict(self) -> dict[str, Any]:
        """Plain data in file order; feeds `dump`, MLflow params and the recipe."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["workload"] = self.workload.model_dump()
        out["probe"] = self.probe.model_dump()
        out["objectives"] = [o.model_dump() for o in self.objectives]
        out["constraints"] = [c.model_dump() for c in self.constraints]
        out["budget"] = self.budget.model_dump()
        out["sampler"] = self.sampler.model_dump()
        out["verify"] = self.verify.model_dump()
        out["rungs"] = self.rungs.model_dump()
        out["knobs"] = {k: _value_to_data(v) for k, v in self.knobs.items()}
        out["env"] = {k: _value_to_data(v) for k, v in self.env.items()}
        return out

    def searched(self) -> dict[str, Domain]:
        """Every knob and env knob given as a domain (before conditioning)."""
        out = {k: v for k, v in self.knobs.items() if isinstance(v, Domain)}
        out.update({k: v for k, v in self.env.items() if isinstance(v, Domain)})
        return out

    def knob_kind(self, name: str) -> str:
        if name in KNOBS:
            return KNOBS[name].kind
        domain = self.env.get(name)
        if isinstance(domain, Domain) and not domain.is_choice:
            return "int"
        return "choice"

    def default_value(self, name: str) -> Scalar | None:
        """A knob's value when it is not searched: fixed value, domain default, or PyTorch's."""
        value = self.knobs.get(name, self.env.get(name))
        if isinstance(value, Domain):
            if value.default is not None:
                return value.default
            info = KNOBS.get(name)
            default = info.default if info is not None else None
            if name == "batch":  # the reference batch, where the domain holds it
                default = self.probe.samples_per_step
            if default is not None and value.contains(default):
                return default
            return value.midpoint(self.knob_kind(name))
        if value is not None:
            return value
        info = KNOBS.get(name)
        return info.default if info else None

    def fixed_knobs(self) -> dict[str, Scalar | None]:
        """All KNOBS at their non-searched values (fixed, domain default or PyTorch default)."""
        return {name: self.default_value(name) for name in KNOBS}

    def smallest_micro_batch(self, trials: bool = False) -> int:
        """The smallest batch (probe.batch included) over the largest accum_steps: no trial's
        micro-batch is smaller. The held-out reference is read in chunks of it. `trials`: the
        smallest a trial runs, so probe.batch counts only where `knobs.batch` is not fixed (a
        searched batch's baseline runs probe.batch; a fixed one is every trial's)."""

        def ends(name: str) -> list[int]:
            v = self.knobs.get(name)
            values = (v.choices or (v.low, v.high)) if isinstance(v, Domain) else (v,)
            return [int(x) for x in values if isinstance(x, int | float)]

        value = self.knobs.get("batch")
        fixed = trials and value is not None and not isinstance(value, Domain)
        batch = min([*ends("batch"), *([] if fixed else [self.probe.samples_per_step])])
        return max(1, batch // max([*ends("accum_steps"), 1]))

    def fixed_env(self) -> dict[str, str]:
        return {k: str(self.default_value(k)) for k in self.env}

    def baseline_knobs(self) -> dict[str, Scalar | None]:
        """Trial 0: every searched knob at PyTorch's default, the rest as the space fixes them.

        The learning rate is the study's (fixed, or its domain's default), so the baseline says
        what doing nothing about the searched knobs gives at the learning rate being tuned for.
        `accum_steps` searched over values without 1 (a micro-batch of the whole batch does not
        fit, as in a migration's re-tune): the smallest it allows, the same arithmetic at a
        layout that fits, not one that cannot run.
        """
        out = self.fixed_knobs()
        for name, value in self.knobs.items():
            if isinstance(value, Domain) and name != "lr":
                out[name] = baseline_accum(value) if name == "accum_steps" else KNOBS[name].default
        return out

    def baseline_env(self) -> dict[str, str]:
        """Fixed environment knobs only: searched ones are left unset (the library's default)."""
        return {k: str(v) for k, v in self.env.items() if not isinstance(v, Domain)}


def baseline_accum(domain: Domain) -> int:
    """The baseline's `accum_steps` when the space searches it over `domain`: PyTorch's 1 (no
    accumulation) where the domain has it, else its smallest value."""
    if domain.contains(1):
        return 1
    ends = domain.choices if domain.is_choice else (domain.low,)
    return min(int(v) for v in ends if isinstance(v, int | float))


#: `clip_norm: auto` before the baseline is measured: the range the shipped spaces guess.
AUTO_CLIP_NORM = Domain(low=0.05, high=5.0, log=True, auto=True)


def _value_to_data(v: KnobValue) -> Any:
    if isinstance(v, Domain) and v.auto:
        return "auto"
    return v.to_dict() if isinstance(v, Domain) else v


#: The top-level keys of a space file, in file order.
TOP_KEYS = (
    "name",
    "description",
    "workload",
    "probe",
    "objectives",
    "constraints",
    "budget",
    "sampler",
    "verify",
    "rungs",
    "knobs",
    "env",
)


def dump(space: Space) -> str:
    """YAML text that `loads` turns back into an equal Space."""
    return yaml.safe_dump(space.to_dict(), sort_keys=False, default_flow_style=None, width=100)
