"""The search-space file: schema, validation with file/key/line errors, `--set`, knob domains.

A space file describes one study: its name, the workload, the probe settings, the objectives and
constraints, the trial budget, the sampler, and the knobs. Each knob is either fixed (a scalar)
or a domain (`{low, high, log}`, `{low, high, step}` or `{choices: [...]}`). The file is parsed
once into a frozen `Space`; `dump(space)` writes it back so that `loads(dump(s)) == s`.

This module must not import ray or mlflow (and imports no torch).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from autotune import safeyaml
from autotune.errors import AutotuneError, SpaceError, did_you_mean
from autotune.knobs import DDP_KNOBS, ENV_PREFIXES, KNOBS, SCALER_KNOBS, KnobInfo, Scalar

#: Site settings are never searched (DOMAIN.md §1).
ENV_SITE_SETTINGS = ("HSA_FORCE_FINE_GRAIN_PCIE", "NCCL_IB_", "NCCL_SOCKET_IFNAME")
ENV_COMM_PREFIXES = ("NCCL_", "RCCL_", "TORCH_NCCL_")
ENV_FP16_ALT_IMPL = (
    "ROCBLAS_INTERNAL_FP16_ALT_IMPL",
    "MIOPEN_DEBUG_CONVOLUTION_ATTRIB_FP16_ALT_IMPL",
)
LL128_ARCHS = ("gfx90a", "gfx942", "gfx950")

#: Summary metrics a probe reports (autotune.metrics) that can be objectives or constraints.
METRICS: dict[str, str] = {
    "loss_cv": "fluctuation of the loss around its trend over the tail window",
    "loss_range": "max - min of the loss over the tail window",
    "spike_count": "loss spikes over the rolling median (robust sigma)",
    "final_loss": "mean loss over the last 10% of steps",
    "loss_drop": "1 - final_loss / initial_loss",
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


class _Section(BaseModel):
    # No field means anything at infinity or NaN (a trial timeout of .inf overflows).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class WorkloadRef(_Section):
    name: str = Field("", description="built-in name, path/file.py:attr or pkg.mod:attr")
    size: str = "tiny"
    script: str | None = Field(None, description="a training script calling autotune.trial()")
    args: tuple[str, ...] = Field((), description="the script's command-line arguments")

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
        return {"script": out["script"], "args": list(out["args"])}

    @property
    def display(self) -> str:
        """The workload as a person reads it: its name, or `script:train.py`."""
        return f"script:{Path(self.script).name}" if self.script else self.name


class DivergenceSettings(_Section):
    stop_early: bool = True
    loss_explosion_factor: float = Field(10.0, gt=1.0)
    grad_explosion_factor: float = Field(1e3, gt=1.0)
    scale_floor: float = Field(1e-4, gt=0.0)
    skipped_fraction: float = Field(0.5, gt=0.0, le=1.0)


class ProbeSettings(_Section):
    steps: int = Field(200, ge=10, le=10_000_000)
    micro_batch: int = Field(16, ge=1)
    batch: int | None = Field(
        None, ge=1, description="samples per optimizer step; micro-batch = batch / accum_steps"
    )
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    seed: int = Field(0, ge=0)
    device: str = "auto"
    deterministic: bool = False
    telemetry_every: int = Field(10, ge=1, description="steps between host fetches of telemetry")
    threads: int | None = Field(None, ge=1, description="CPU threads per probe; null: auto")
    divergence: DivergenceSettings = DivergenceSettings()
    world_size: int = Field(
        1, ge=1, le=1024, description="processes of one DDP probe on this node (1: no DDP)"
    )
    oom_retry: bool = Field(
        False, description="on out-of-memory: retry once at half micro-batch, double accumulation"
    )
    measure_scaling: bool = Field(
        False, description="also time one process: metric scaling_efficiency (world_size > 1)"
    )

    @property
    def samples_per_step(self) -> int:
        """Samples per optimizer step per process: probe.batch, else the micro-batch."""
        return self.batch if self.batch is not None else self.micro_batch

    def micro_for(self, accum_steps: int) -> int:
        """The micro-batch of a trial with `accum_steps`: equal samples per step for all."""
        return max(1, self.samples_per_step // max(1, accum_steps))

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError("must be auto, cpu, cuda or cuda:N (ROCm GPUs are cuda in torch)")
        return v


class Objective(_Section):
    metric: str
    direction: Literal["minimize", "maximize"]

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check_metric(v)


class Constraint(_Section):
    metric: str
    op: Literal[">=", "<="]
    value: float

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check_metric(v)


class Budget(_Section):
    trials: int = Field(20, ge=1, le=100_000)
    concurrency: int | None = Field(None, ge=1, description="parallel trials; null: auto")
    trial_timeout_s: float = Field(600.0, gt=0)
    target_steps: int | None = Field(
        None, ge=10, le=10_000_000, description="the length you train; null: probe.steps"
    )
    cpus_per_trial: float | None = Field(None, gt=0, description="null: auto")
    gpus_per_trial: float = Field(1.0, ge=0)


class SamplerSettings(_Section):
    name: Literal["tpe", "nsga2", "random", "grid"] = "tpe"
    seed: int = 0
    # benchmarks/sample_efficiency.py compares 6 (the baseline counts as one) with 3 side by
    # side: no reliable difference on this noisy objective (benchmarks/RESULTS.md), so 6 stays.
    n_startup_trials: int = Field(6, ge=0, description="tpe: trials before modelling")
    grid_points: int = Field(3, ge=1, description="grid: points per continuous domain")


class VerifySettings(_Section):
    top_k: int = Field(
        3, ge=0, le=50, description="best candidates re-run at the end of a study (0: none)"
    )
    seeds: int = Field(3, ge=1, le=100, description="other seeds each candidate is re-run with")


class RungSettings(_Section):
    """Promotion of the best screened configurations through longer probes (study/rungs.py)."""

    eta: int = Field(3, ge=2, le=10, description="rung ratio; the best 1/eta are promoted")
    min_promote: int = Field(2, ge=1, description="at least this many configs promoted a rung")
    agreement: float = Field(0.7, ge=-1.0, le=1.0, description="stop at this Kendall tau-b")
    min_agreement_n: int = Field(4, ge=3, description="configs tau-b is measured on, at least")
    max_rungs: int = Field(4, ge=1, le=8, description="rungs above the screen, at most")
    grow: Literal["pasha", "always"] = "pasha"


def _check_metric(v: str) -> str:
    if v not in METRICS:
        raise ValueError(
            f"unknown metric '{v}'{did_you_mean(v, METRICS)}; one of {', '.join(METRICS)}"
        )
    return v


DEFAULT_OBJECTIVES = (
    Objective(metric="loss_cv", direction="minimize"),
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
            if info is not None and info.default is not None and value.contains(info.default):
                return info.default
            return value.midpoint(self.knob_kind(name))
        if value is not None:
            return value
        info = KNOBS.get(name)
        return info.default if info else None

    def fixed_knobs(self) -> dict[str, Scalar | None]:
        """All KNOBS at their non-searched values (fixed, domain default or PyTorch default)."""
        return {name: self.default_value(name) for name in KNOBS}

    def fixed_env(self) -> dict[str, str]:
        return {k: str(self.default_value(k)) for k in self.env}

    def baseline_knobs(self) -> dict[str, Scalar | None]:
        """Trial 0: every searched knob at PyTorch's default, the rest as the space fixes them.

        The learning rate is the study's (fixed, or its domain's default), so the baseline says
        what doing nothing about the searched knobs gives at the learning rate being tuned for.
        """
        out = self.fixed_knobs()
        for name, value in self.knobs.items():
            if isinstance(value, Domain) and name != "lr":
                out[name] = KNOBS[name].default
        return out

    def baseline_env(self) -> dict[str, str]:
        """Fixed environment knobs only: searched ones are left unset (the library's default)."""
        return {k: str(v) for k, v in self.env.items() if not isinstance(v, Domain)}


def _value_to_data(v: KnobValue) -> Any:
    return v.to_dict() if isinstance(v, Domain) else v


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

_TOP_KEYS = (
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


def builtin_dir() -> Path:
    """Folder of the shipped search spaces (installed package, or the source checkout)."""
    try:
        path = Path(str(resources.files("autotune.search_spaces")))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parent.parent / "search_spaces"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def find(ref: str | Path) -> Path:
    """A path that exists, else a built-in space by bare name (`gradclip` or `gradclip.yaml`)."""
    path = Path(ref)
    if path.is_file():
        return path
    if path.parent == Path(".") and not path.exists():
        candidate = builtin_dir() / (path.name if path.suffix else f"{path.name}.yaml")
        if candidate.is_file():
            return candidate
        stem, names = path.stem, builtin_names()
        raise SpaceError(
            f"{ref}: no such file, and no built-in space '{stem}'{did_you_mean(stem, names)}"
            f"; built-in spaces: {', '.join(names)}"
        )
    raise SpaceError(f"{ref}: no such file")


def load(ref: str | Path, overrides: Sequence[str] = ()) -> Space:
    """Read, override (`key.path=value`) and validate a space file."""
    path = find(ref)
    text = safeyaml.read_text(path, SpaceError, "space file")
    space = loads(text, source=str(path), overrides=overrides)
    from_set = any(o.split("=", 1)[0].strip() in ("workload", "workload.name") for o in overrides)
    space = anchor_workload(space, Path.cwd() if from_set else path.parent)
    script_set = any(o.split("=", 1)[0].strip() == "workload.script" for o in overrides)
    return anchor_script(space, Path.cwd() if script_set else path.parent, str(path))


def anchor_script(space: Space, base: Path, source: str) -> Space:
    """The space with its workload script made absolute against `base` (the space file's
    folder; the current one for a --set); a script that is not a file fails here, before any
    trial, naming the path."""
    script = space.workload.script
    if script is None:
        return space
    absolute = (base / Path(script).expanduser()).resolve()
    if not absolute.is_file():
        raise SpaceError(f"{source}: workload.script: {absolute}: no such file")
    return replace(space, workload=space.workload.model_copy(update={"script": str(absolute)}))


def anchor_workload(space: Space, base: Path) -> Space:
    """The space with a relative workload file (`rel/file.py:attr`) made absolute against `base`:
    the space file's folder (the current one for a --set), so that a study resumed elsewhere, a
    verification and a recipe find the same file."""
    from autotune.workload import names_file

    ref = space.workload.name
    where, _, attr = ref.rpartition(":")
    if not names_file(ref) or Path(where).expanduser().is_absolute():
        return space
    absolute = f"{(base / where).resolve()}:{attr}"
    return replace(space, workload=space.workload.model_copy(update={"name": absolute}))


def loads(text: str, *, source: str = "<string>", overrides: Sequence[str] = ()) -> Space:
    data, root = safeyaml.compose(text, source, SpaceError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpaceError(f"{source}: the top level must be a mapping of keys, got {_tname(data)}")
    lines = _line_map(root)
    for item in overrides:
        _apply_override(data, item, source)
    return _build(data, source, lines, overrides)


def _tname(v: Any) -> str:
    return type(v).__name__ if v is not None else "nothing"


def _apply_override(data: dict[str, Any], item: str, source: str) -> None:
    label = f"--set {safeyaml.one_line(item, 200)}"
    if "=" not in item:
        raise SpaceError(f"{label}: expected key.path=value, e.g. --set knobs.lr=0.003")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise SpaceError(f"{label}: empty key")
    if parts[0] not in _TOP_KEYS:
        raise SpaceError(
            f"{label}: unknown key '{parts[0]}'{did_you_mean(parts[0], _TOP_KEYS)}; "
            f"top-level keys are {', '.join(_TOP_KEYS)}"
        )
    value = safeyaml.load(raw, f"{label}", SpaceError) if raw.strip() else ""
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part) if isinstance(node, dict) else None
        if nxt is None:
            nxt = {}
            node[part] = nxt
        if not isinstance(nxt, dict):
            where = ".".join(parts[: i + 1])
            raise SpaceError(f"{label}: '{where}' is a value in {source}, not a section")
        node = nxt
    node[parts[-1]] = value


def _line_map(root: yaml.Node | None) -> dict[tuple[str | int, ...], int]:
    """Key path -> 1-based line, for error messages. A node repeated by an alias is walked once."""
    out: dict[tuple[str | int, ...], int] = {}
    seen: set[int] = set()

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> None:
        out[path] = node.start_mark.line + 1
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    continue
                sub = (*path, k.value)
                walk(v, sub)
                out[sub] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return out


#: Builds the error for a key path and a message (a space's `_Err`, or a recipe's).
ErrorAt = Callable[[Sequence[str | int], str], AutotuneError]


class _Err:
    """Builds `file: key.path (line N): message` errors."""

    def __init__(
        self, source: str, lines: Mapping[tuple[str | int, ...], int], overridden: set[str]
    ):
        self.source, self.lines, self.overridden = source, lines, overridden

    def __call__(self, path: Sequence[str | int], message: str) -> SpaceError:
        dotted = ".".join(safeyaml.key_text(p) for p in path)
        where = ""
        if any(
            dotted == o or dotted.startswith(o + ".") or o.startswith(dotted + ".")
            for o in self.overridden
        ):
            where = " (from --set)"
        else:
            for n in range(len(path), 0, -1):
                line = self.lines.get(tuple(path[:n]))
                if line is not None:
                    where = f" (line {line})"
                    break
        text = f"{self.source}: {dotted or '<top>'}{where}: {message}"
        return SpaceError(safeyaml.one_line(text, None))


def _build(
    data: dict[str, Any],
    source: str,
    lines: Mapping[tuple[str | int, ...], int],
    overrides: Sequence[str],
) -> Space:
    err = _Err(source, lines, {o.split("=", 1)[0].strip() for o in overrides})
    for key in data:
        if key not in _TOP_KEYS:
            raise err(
                [str(key)],
                f"unknown key{did_you_mean(str(key), _TOP_KEYS)}; allowed: {', '.join(_TOP_KEYS)}",
            )
    name = data.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        raise err(
            ["name"], f"required: a study name of letters, digits, '_', '-', '.' (got {name!r})"
        )
    description = data.get("description", "") or ""
    if not isinstance(description, str):
        raise err(["description"], "must be text")
    workload_raw = data.get("workload")
    if isinstance(workload_raw, str):
        workload_raw = {"name": workload_raw}
    if workload_raw is None:
        raise err(["workload"], "required: e.g. `workload: {name: tiny_gpt, size: tiny}`")
    workload = _model(WorkloadRef, workload_raw, ["workload"], err)
    probe = _model(ProbeSettings, data.get("probe") or {}, ["probe"], err)
    budget = _model(Budget, data.get("budget") or {}, ["budget"], err)
    sampler = _model(SamplerSettings, data.get("sampler") or {}, ["sampler"], err)
    verify = _model(VerifySettings, data.get("verify") or {}, ["verify"], err)
    rungs = _model(RungSettings, data.get("rungs") or {}, ["rungs"], err)
    if budget.target_steps is not None and budget.target_steps < probe.steps:
        raise err(
            ["budget", "target_steps"],
            f"{budget.target_steps} is shorter than probe.steps ({probe.steps}): the target is "
            "the length you train, at least the probe's",
        )
    objectives = tuple(_list(Objective, data, "objectives", DEFAULT_OBJECTIVES, err))
    if not objectives:
        raise err(["objectives"], "at least one objective is needed")
    metrics = [o.metric for o in objectives]
    if len(set(metrics)) != len(metrics):
        raise err(["objectives"], f"each metric at most once, got {metrics}")
    constraints = tuple(_list(Constraint, data, "constraints", DEFAULT_CONSTRAINTS, err))

    knobs_raw = data.get("knobs") or {}
    if not isinstance(knobs_raw, dict):
        raise err(["knobs"], f"must be a mapping of knob: value-or-domain, got {_tname(knobs_raw)}")
    knobs: dict[str, KnobValue] = {}
    for key, raw in knobs_raw.items():
        key = str(key)
        if key not in KNOBS:
            hint = did_you_mean(key, KNOBS)
            if key.isupper():
                hint += "; environment variables go under `env:`"
            raise err(["knobs", key], f"unknown knob{hint}; known knobs: {', '.join(KNOBS)}")
        knobs[key] = _knob_value(KNOBS[key], raw, ["knobs", key], err)

    env_raw = data.get("env") or {}
    if not isinstance(env_raw, dict):
        raise err(["env"], f"must be a mapping of VARIABLE: value-or-domain, got {_tname(env_raw)}")
    env: dict[str, KnobValue] = {}
    for key, raw in env_raw.items():
        key = str(key)
        env[key] = _env_value(key, raw, ["env", key], err)

    if sampler.name == "grid":
        for knob, value in {**knobs, **env}.items():
            sec = "env" if knob in env else "knobs"
            if (
                isinstance(value, Domain)
                and value.step is None
                and not value.is_choice
                and KNOBS.get(knob, KNOBS["lr"]).kind == "float"
                and sampler.grid_points < 2
            ):
                raise err([sec, knob], "grid needs sampler.grid_points >= 2 for a float range")

    _check_batch(probe, knobs, err)
    if probe.batch is None:  # written out: a dumped space reloads with the same batch
        probe = probe.model_copy(update={"batch": probe.micro_batch})
    return Space(
        name=name,
        description=description,
        workload=workload,
        probe=probe,
        objectives=objectives,
        constraints=constraints,
        budget=budget,
        sampler=sampler,
        verify=verify,
        rungs=rungs,
        knobs=knobs,
        env=env,
        source=source,
    )


def _accum_values(value: KnobValue | None) -> list[int]:
    """Every value knobs.accum_steps can take (1 when absent)."""
    if value is None:
        return [1]
    if not isinstance(value, Domain):
        return [int(value)] if value is not None else [1]
    if value.is_choice:
        return [int(c) for c in value.choices]
    assert value.low is not None and value.high is not None
    return list(range(int(value.low), int(value.high) + 1, int(value.step or 1)))


def _check_batch(probe: ProbeSettings, knobs: Mapping[str, KnobValue], err: ErrorAt) -> None:
    """probe.batch divides by every accum_steps; a micro_batch only where accumulation is 1."""
    accums = _accum_values(knobs.get("accum_steps"))
    if probe.batch is None and "micro_batch" in probe.model_fields_set and accums != [1]:
        raise err(
            ["probe", "micro_batch"],
            "the micro-batch is derived now (probe.batch / accum_steps): write probe.batch",
        )
    what = "probe.batch" if probe.batch is not None else "probe.batch (default 16)"
    for a in accums:
        if a < 1 or probe.samples_per_step % a:
            raise err(
                ["probe", "batch"],
                f"{what} {probe.samples_per_step} is not divisible by knobs.accum_steps value {a}",
            )


def _model(cls: type[BaseModel], raw: Any, path: list[str | int], err: ErrorAt) -> Any:
    if not isinstance(raw, dict):
        raise err(path, f"must be a mapping, got {_tname(raw)}")
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = [*path, *first["loc"]]
        if first["type"] == "extra_forbidden":
            key = str(first["loc"][-1])
            msg = f"unknown key{did_you_mean(key, cls.model_fields)}; allowed: " + ", ".join(
                _fields(cls, first["loc"][:-1])
            )
        else:
            if first["type"] == "value_error":  # our own validators say what they got
                msg = str(first["msg"]).removeprefix("Value error, ")
            else:
                msg = f"{first['msg']} (got {first.get('input')!r})"
        raise err(loc, msg) from None


def _fields(cls: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    model: Any = cls
    for part in loc:
        ann = model.model_fields[str(part)].annotation
        model = ann
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _list(
    cls: type[BaseModel], data: dict[str, Any], key: str, default: Iterable[Any], err: _Err
) -> list[Any]:
    raw = data.get(key)
    if raw is None:
        return list(default)
    if not isinstance(raw, list):
        raise err([key], f"must be a list, got {_tname(raw)}")
    return [_model(cls, item, [key, i], err) for i, item in enumerate(raw)]


_DOMAIN_KEYS = ("low", "high", "log", "step", "choices", "default")


def _knob_value(info: KnobInfo, raw: Any, path: list[str | int], err: ErrorAt) -> KnobValue:
    if isinstance(raw, dict):
        domain = _domain(raw, info.kind, path, err)
        values: list[Any] = list(domain.choices) if domain.is_choice else [domain.low, domain.high]
        if domain.default is not None:
            values.append(domain.default)
        for v in values:
            _check_value(info, v, path, err)
        if domain.default is not None and not domain.contains(domain.default):
            raise err([*path, "default"], f"default {domain.default!r} lies outside the domain")
        return domain
    if isinstance(raw, list):
        raise err(path, "a list is not a value: write `{choices: [...]}` to search choices")
    return _check_value(info, raw, path, err)


def _check_value(info: KnobInfo, v: Any, path: list[str | int], err: ErrorAt) -> Scalar:
    if info.kind == "bool":
        if not isinstance(v, bool):
            raise err(path, f"must be true or false, got {v!r}")
        return v
    if info.kind == "choice":
        if v not in info.choices:
            raise err(
                path,
                f"must be one of {list(info.choices)}, got {v!r}"
                f"{did_you_mean(str(v), [str(c) for c in info.choices])}",
            )
        return v
    if isinstance(v, bool) or not isinstance(v, int | float):
        if isinstance(v, str):
            try:
                v = float(v)  # YAML reads 1e-8 (no dot) as a string
            except ValueError:
                raise err(path, f"must be a number, got {v!r}") from None
        else:
            raise err(path, f"must be a number, got {v!r}")
    if not math.isfinite(v):
        raise err(path, f"must be finite, got {v!r}")
    if info.kind == "int":
        if float(v) != int(v):
            raise err(path, f"must be a whole number, got {v!r}")
        v = int(v)
    else:
        v = float(v)
    lo_ok = info.low is None or (v > info.low if info.low_open else v >= info.low)
    hi_ok = info.high is None or (v < info.high if info.high_open else v <= info.high)
    if not (lo_ok and hi_ok):
        lo = "(" if info.low_open else "["
        hi = ")" if info.high_open else "]"
        raise err(
            path, f"{v!r} is out of range: {info.name} must lie in {lo}{info.low}, {info.high}{hi}"
        )
    return v


def _domain(raw: dict[str, Any], kind: str, path: list[str | int], err: ErrorAt) -> Domain:
    for key in raw:
        if key not in _DOMAIN_KEYS:
            raise err(
                [*path, str(key)],
                f"unknown domain key{did_you_mean(str(key), _DOMAIN_KEYS)}; "
                "a domain is {low, high[, log][, step][, default]} or {choices: [...]}",
            )
    if "choices" in raw:
        choices = raw["choices"]
        extra = set(raw) - {"choices", "default"}
        if extra:
            raise err(
                [*path, sorted(extra)[0]], "choices cannot be combined with low/high/log/step"
            )
        if not isinstance(choices, list) or not choices:
            raise err([*path, "choices"], "must be a non-empty list")
        if len({repr(c) for c in choices}) != len(choices):
            raise err([*path, "choices"], f"duplicate choices in {choices}")
        default = raw.get("default")
        if kind in ("float", "int"):
            choices = [_num(c, kind, [*path, "choices"], err) for c in choices]
            if default is not None:  # YAML reads 1e-8 (no dot) as a string
                default = _num(default, kind, [*path, "default"], err)
        return Domain(choices=tuple(choices), default=default)
    if kind in ("choice", "bool"):
        raise err(path, "this knob takes `{choices: [...]}`, not low/high")
    if "low" not in raw or "high" not in raw:
        missing = "low" if "low" not in raw else "high"
        raise err([*path, missing], "a range needs both low and high")
    low = _num(raw["low"], kind, [*path, "low"], err)
    high = _num(raw["high"], kind, [*path, "high"], err)
    if low > high:
        raise err(path, f"low <= high must hold, got low={low}, high={high}")
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise err([*path, "log"], f"must be true or false, got {log!r}")
    if log and low <= 0:
        raise err([*path, "low"], f"a log domain needs low > 0, got low={low}")
    step = raw.get("step")
    if step is not None:
        step = _num(step, kind, [*path, "step"], err)
        if step <= 0:
            raise err([*path, "step"], f"must be > 0, got {step}")
        if log:
            raise err([*path, "step"], "step and log cannot be combined")
    default = raw.get("default")
    if default is not None:
        default = _num(default, kind, [*path, "default"], err)
    return Domain(low=low, high=high, log=log, step=step, default=default)


def _num(v: Any, kind: str, path: list[str | int], err: ErrorAt) -> float | int:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise err(path, f"must be a number, got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise err(path, f"must be a number, got {v!r}")
    if not math.isfinite(v):
        raise err(path, f"must be finite, got {v!r}")
    if kind == "int":
        if float(v) != int(v):
            raise err(path, f"must be a whole number, got {v!r}")
        return int(v)
    return float(v)


def _env_value(name: str, raw: Any, path: list[str | int], err: ErrorAt) -> KnobValue:
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
        raise err(path, "environment variable names are upper case letters, digits and '_'")
    if not name.startswith(ENV_PREFIXES):
        raise err(
            path,
            f"refused: only variables starting with {', '.join(ENV_PREFIXES)} may be "
            "set from a space or recipe file (it may come from elsewhere; LD_PRELOAD, PYTHONPATH "
            "and the like are never accepted)",
        )
    if any(name.startswith(s) for s in ENV_SITE_SETTINGS):
        raise err(
            path,
            "a site setting (fabric, interface, PCIe) is never searched: set it in "
            "the cluster's environment instead",
        )
    if isinstance(raw, dict):
        if "choices" in raw:
            domain = _domain(raw, "choice", path, err)
            for c in domain.choices:
                _env_scalar(c, [*path, "choices"], err)
        else:
            domain = _domain(raw, "int", path, err)
        if domain.default is not None and not domain.contains(domain.default):
            raise err([*path, "default"], f"default {domain.default!r} lies outside the domain")
        return domain
    return _env_scalar(raw, path, err)


def _env_scalar(v: Any, path: list[str | int], err: ErrorAt) -> str | int:
    """One value of an environment variable: a string without control characters, or an int."""
    if not isinstance(v, str | int) or isinstance(v, bool):
        raise err(path, f"a value is a string or integer, got {v!r}")
    if isinstance(v, str) and not v.isprintable():
        raise err(path, f"control characters (NUL, line breaks, ...) are refused, got {v!r}")
    return v


# --------------------------------------------------------------------------------------------
# Dumping
# --------------------------------------------------------------------------------------------


def dump(space: Space) -> str:
    """YAML text that `loads` turns back into an equal Space."""
    return yaml.safe_dump(space.to_dict(), sort_keys=False, default_flow_style=None, width=100)


# --------------------------------------------------------------------------------------------
# Knob conditioning: knobs with no effect on this setup are not searched.
# --------------------------------------------------------------------------------------------


def _forces_ll128(choice: Scalar) -> bool:
    """NCCL_PROTO is a case-insensitive comma list; a leading '^' excludes what it lists."""
    value = str(choice).upper().replace(" ", "")
    return not value.startswith("^") and "LL128" in value.split(",")


def _forces_only(choice: Scalar, what: str) -> bool:
    """`choice` (an NCCL_ALGO/NCCL_PROTO value) allows `what` and nothing else."""
    value = str(choice).upper().replace(" ", "")
    return not value.startswith("^") and set(value.split(",")) == {what.upper()}


#: Socket transport settings: NCCL/RCCL use sockets only between nodes (P2P/SHM within one).
ENV_SOCKET_KNOBS = ("NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD")
_TREE_SIMPLE = (
    "RCCL removes Tree+Simple from its candidates on a single gfx942 node; forcing both may "
    "fail or hang"
)


@dataclass(frozen=True)
class Conditioned:
    """The knobs a study searches after conditioning, and the ones dropped with their reason."""

    searched: dict[str, Domain]
    dropped: dict[str, str]


def condition(
    space: Space, *, platform: str, arch: str | None = None, world_size: int | None = None
) -> Conditioned:
    """Drop knobs that cannot act on `platform` (cpu/cuda/rocm), `arch` and `world_size`
    (default: the space's probe.world_size). A DDP probe runs on one node, with gloo on the CPU
    (probe.device cpu, or no GPU) and NCCL/RCCL on GPUs."""
    searched: dict[str, Domain] = {}
    dropped: dict[str, str] = {}
    world = space.probe.world_size if world_size is None else world_size
    gloo = platform == "cpu" or space.probe.device == "cpu"
    precision = space.probe.precision
    schedule = space.knobs.get("schedule", KNOBS["schedule"].default)
    for name, domain in space.searched().items():
        reason = None
        if name in SCALER_KNOBS and precision != "fp16":
            reason = f"GradScaler knobs act only under fp16 (probe.precision is {precision})"
        elif name in DDP_KNOBS and world == 1:
            reason = "DDP knobs act only with more than one process (world size is 1)"
        elif name == "min_lr_ratio" and schedule == "constant":
            reason = "min_lr_ratio acts only with a linear or cosine schedule (schedule: constant)"
        elif name.startswith(ENV_COMM_PREFIXES) and (world == 1 or gloo):
            why = "one process" if world == 1 else "gloo on CPU"
            reason = f"NCCL/RCCL variables act only on GPU collectives ({why} here)"
        elif name in ENV_SOCKET_KNOBS:
            reason = (
                "socket transport carries traffic only between nodes, and a DDP probe runs "
                "its processes on one node"
            )
        elif name in ENV_FP16_ALT_IMPL and not (
            platform == "rocm" and arch == "gfx90a" and precision == "fp16"
        ):
            reason = "the fp16 alt-impl switches act only on gfx90a (MI200) under fp16"
        if reason:
            dropped[name] = reason
            continue
        if name == "NCCL_PROTO" and domain.is_choice and (arch not in LL128_ARCHS):
            kept = tuple(c for c in domain.choices if not _forces_ll128(c))
            if len(kept) != len(domain.choices):
                dropped["NCCL_PROTO=LL128"] = (
                    "LL128 is enabled by RCCL only on gfx90a/gfx942/gfx950; forcing it elsewhere "
                    "has corrupted data"
                )
                if not kept:
                    dropped[name] = "no protocol left after removing LL128"
                    continue
                domain = Domain(
                    choices=kept, default=domain.default if domain.default in kept else None
                )
        searched[name] = domain
    if platform == "rocm" and arch == "gfx942" and world > 1 and not gloo:
        _no_tree_simple(space, searched, dropped)
    return Conditioned(searched=searched, dropped=dropped)


def _no_tree_simple(space: Space, searched: dict[str, Domain], dropped: dict[str, str]) -> None:
    """Keep a study from forcing NCCL_ALGO=Tree together with NCCL_PROTO=Simple. With one of
    them fixed, the other loses that choice; with both searched, Tree goes (Ring runs every
    protocol, and on one node a tree is a chain)."""
    algo, proto = searched.get("NCCL_ALGO"), searched.get("NCCL_PROTO")
    fixed_algo, fixed_proto = space.env.get("NCCL_ALGO"), space.env.get("NCCL_PROTO")
    algo_tree = (isinstance(fixed_algo, str) and _forces_only(fixed_algo, "Tree")) or (
        algo is not None and algo.is_choice and any(_forces_only(c, "Tree") for c in algo.choices)
    )
    proto_simple = (isinstance(fixed_proto, str) and _forces_only(fixed_proto, "Simple")) or (
        proto is not None
        and proto.is_choice
        and any(_forces_only(c, "Simple") for c in proto.choices)
    )
    if not (algo_tree and proto_simple):
        return
    if algo is not None and algo.is_choice:
        name, domain, what = "NCCL_ALGO", algo, "Tree"
    elif proto is not None and proto.is_choice:
        name, domain, what = "NCCL_PROTO", proto, "Simple"
    else:
        return  # both fixed: the file's explicit choice
    kept = tuple(c for c in domain.choices if not _forces_only(c, what))
    dropped[f"{name}={what}"] = _TREE_SIMPLE
    if kept:
        default = domain.default if domain.default in kept else None
        searched[name] = Domain(choices=kept, default=default)
    else:
        del searched[name]
        dropped[name] = f"no choice left after removing {what} ({_TREE_SIMPLE})"
