"""The training probe: a short, instrumented training run that applies every knob honestly.

One readable loop (`run_probe`) in the manner of nanoGPT's train.py, with small helpers around
it. It reports through one callable, `report(dict)`, so the same code runs in a unit test, in
a trial process under Ray, and in `autotune verify`. It imports neither Ray, Optuna nor MLflow.

`python -m autotune.probe CONFIG.json` runs one probe in this process and writes its reports on
the report channel it was started with (`autotune.report`); what the workload prints is its log.
Started without a channel (by hand), it writes them to stdout for a person to read.
"""

from __future__ import annotations

import json
import math
import os
import random
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune import metrics
from autotune import report as report_protocol
from autotune.errors import WorkloadError
from autotune.space import KNOBS, Space

if TYPE_CHECKING:
    import torch

    from autotune.distributed import RankContext

Report = Callable[[dict[str, Any]], None]
ANOMALY_TOP = 10  # layers listed in the anomaly report of a gradient explosion


@dataclass(frozen=True)
class ProbeConfig:
    """Everything one probe needs, as plain data (it travels to the trial process as JSON)."""

    workload: str
    size: str = "tiny"
    steps: int = 200
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
    world_size: int = 1  # > 1: a DDP probe of that many processes (autotune.distributed)
    oom_retry: bool = False
    measure_scaling: bool = False

    @classmethod
    def from_space(
        cls,
        space: Space,
        knobs: Mapping[str, Any] | None = None,
        env: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> ProbeConfig:
        """The probe of `space` with the given knob values (default: the space's defaults)."""
        p = space.probe
        return cls(
            workload=space.workload.name,
            size=space.workload.size,
            steps=p.steps,
            micro_batch=p.micro_batch,
            precision=p.precision,
            seed=p.seed if seed is None else seed,
            device=p.device,
            deterministic=p.deterministic,
            telemetry_every=p.telemetry_every,
            threads=p.threads,
            divergence=p.divergence.model_dump(),
            knobs=dict(space.fixed_knobs() if knobs is None else knobs),
            env={k: str(v) for k, v in (space.fixed_env() if env is None else env).items()},
            world_size=p.world_size,
            oom_retry=p.oom_retry,
            measure_scaling=p.measure_scaling,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeConfig:
        return cls(**dict(data))


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def resolve_knobs(knobs: Mapping[str, Any], default_lr: float) -> dict[str, Any]:
    """Every knob with a value: given ones, else PyTorch's default; lr else the workload's."""
    out = {name: info.default for name, info in KNOBS.items()}
    out.update({k: v for k, v in knobs.items() if v is not None})
    if out.get("lr") is None:
        out["lr"] = default_lr
    return out


def lr_at(
    step: int, *, peak: float, warmup: int, schedule: str, total: int, min_ratio: float
) -> float:
    """Learning rate of optimizer step `step` (0-based) of `total`.

    Warm-up: lr = peak * (step + 1) / warmup for step < warmup (linear, reaching peak on the last
    warm-up step). After it, with p = (step - warmup) / max(1, total - warmup - 1) in [0, 1]:
    constant: peak; linear: peak * (1 - (1 - min_ratio) * p);
    cosine: peak * (min_ratio + (1 - min_ratio) * (1 + cos(pi * p)) / 2).
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "constant":
        return peak
    p = min(1.0, (step - warmup) / max(1, total - warmup - 1))
    if schedule == "linear":
        return peak * (1.0 - (1.0 - min_ratio) * p)
    if schedule == "cosine":
        return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p)))
    raise ValueError(f"unknown schedule {schedule!r}")


def seed_everything(seed: int) -> None:
    """Python, NumPy, torch and every device RNG (torch.cuda covers ROCm)."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def set_deterministic() -> dict[str, Any]:
    """Turn on every real determinism lever (DOMAIN.md §5) and say which applied.

    The seeds (Python, NumPy, torch, every GPU) are set by `seed_everything` in `run_probe`.
    The environment variables are read by cuBLAS/rocBLAS when their handle is created: they
    act only if this process has not used the GPU yet (`gpu_initialized_before` says).
    """
    import torch

    applied: dict[str, Any] = {}
    applied["gpu_initialized_before"] = bool(torch.cuda.is_initialized())
    # cuBLAS/hipBLAS need a fixed workspace for deterministic matmuls; read at first use.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    applied["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
    if torch.version.hip:
        # rocBLAS may use atomics in some GEMMs, which makes sums run-to-run different.
        os.environ.setdefault("ROCBLAS_DEFAULT_ATOMICS_MODE", "0")
        applied["ROCBLAS_DEFAULT_ATOMICS_MODE"] = os.environ["ROCBLAS_DEFAULT_ATOMICS_MODE"]
    torch.use_deterministic_algorithms(True, warn_only=False)
    applied["use_deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    applied["deterministic_warn_only"] = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.backends.cudnn.deterministic = True  # MIOpen on ROCm
    torch.backends.cudnn.benchmark = False
    applied["cudnn.deterministic"] = bool(torch.backends.cudnn.deterministic)
    applied["cudnn.benchmark"] = bool(torch.backends.cudnn.benchmark)
    return applied


def pick_device(name: str) -> torch.device:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"probe.device is {name!r} but torch sees no GPU (torch.cuda)")
    return torch.device(name)


def peak_memory_mb(device: torch.device) -> float:
    """Peak allocated device memory on a GPU; peak RSS of this process on the CPU."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device)) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return float(rss) / (2**20 if sys.platform == "darwin" else 2**10)


def _to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    if device.type == "cpu":
        return batch
    # Pinned memory lets the copy run asynchronously: no host sync per step.
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)


@dataclass
class _Chunk:
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


# ---------------------------------------------------------------------------------------------
# The probe
# ---------------------------------------------------------------------------------------------


def run_probe(
    cfg: ProbeConfig, report: Report | None = None, rank: RankContext | None = None
) -> dict[str, Any]:
    """Train `cfg.workload` for `cfg.steps` optimizer steps with `cfg.knobs`; return the summary.

    Reports `{"event": "start"}`, then `{"event": "telemetry", ...}` at each of the first
    `metrics.throughput_warmup_steps(steps)` steps and every `telemetry_every` steps after,
    then `{"event": "summary", ...}` (also the return value). A diverged run is a result
    (`status: diverged`), not an exception; an out-of-memory is `status: oom`.
    Exceptions from the workload propagate.

    `world_size > 1` (or `oom_retry`, `measure_scaling`): `autotune.distributed.launch` runs
    the probe as that many processes, each back in here as one `rank`.
    """
    import torch

    from autotune.workload import resolve

    emit: Report = report or (lambda _msg: None)
    if rank is None and (cfg.world_size > 1 or cfg.oom_retry or cfg.measure_scaling):
        from autotune import distributed

        return distributed.launch(cfg, emit)
    world = rank.world_size if rank is not None else 1
    t_start = time.perf_counter()
    determinism = set_deterministic() if cfg.deterministic else {}
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    device = pick_device(cfg.device)
    workload = resolve(cfg.workload, cfg.size)
    k = resolve_knobs(cfg.knobs, workload.default_lr)
    accum = int(k["accum_steps"])
    fp16 = cfg.precision == "fp16"
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision)

    # Same seed, same init and same data order in every trial: the knobs are the only difference.
    seed_everything(cfg.seed)
    model = workload.build_model().to(device)
    model.train()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    if rank is not None:
        model = rank.wrap(model, k)  # DistributedDataParallel with the DDP knobs
    optimizer = build_optimizer(params, k, device)
    scaler = build_scaler(k, device, enabled=fp16)
    clip, per_layer = float(k["clip_norm"]), k["clip_mode"] == "per_layer"
    data: Iterator[tuple[torch.Tensor, ...]] = (
        workload.batches(cfg.micro_batch, cfg.seed)
        if rank is None
        else rank.batches(workload, cfg.micro_batch, cfg.seed)  # this rank's shard
    )
    one = torch.ones((), device=device)
    # Loss explosion is judged against the loss of step 0, before any update: a run that blows
    # up within its first few steps must not inflate its own reference.
    monitor = metrics.DivergenceMonitor(cfg.precision, thresholds=_thresholds(cfg.divergence))
    stop_early = bool(cfg.divergence.get("stop_early", True))
    # Most divergent runs blow up within their first steps: the telemetry is fetched (and the
    # monitor fed) at every step while the throughput metric still ignores the step times, then
    # every `telemetry_every` steps. A run that diverges at step 3 stops at step 3, not 10.
    check_each_step_until = metrics.throughput_warmup_steps(cfg.steps)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    emit(
        {
            "event": "start",
            "device": str(device),
            "workload": workload.name,
            "size": workload.size,
            "knobs": k,
            "steps": cfg.steps,
            "precision": cfg.precision,
            "effective_batch": cfg.micro_batch * accum * world,
        }
    )
    series: dict[str, list[np.ndarray]] = {}
    chunk = _Chunk()
    samples_per_step = tokens_per_step = 0
    cause: str | None = None
    diverged_at: int | None = None
    anomaly: dict[str, Any] | None = None
    status = "ok"
    step = 0
    try:
        for step in range(cfg.steps):
            lr = lr_at(
                step,
                peak=float(k["lr"]),
                warmup=int(k["warmup_steps"]),
                schedule=str(k["schedule"]),
                total=cfg.steps,
                min_ratio=float(k["min_lr_ratio"]),
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            timer = _start_timer(device)

            batches = [_to_device(next(data), device) for _ in range(accum)]
            loss_sum, samples, tokens = forward_backward(
                model, workload, batches, scaler, amp_dtype
            )
            # Clip on the unscaled gradients (unscale_ divides them by the current scale).
            scaler.unscale_(optimizer)
            try:
                grad_norm, layer_norms, clipped = clip_gradients(params, clip, per_layer)
            except NoGradient:  # a loss on no parameter: NaN is a divergence, else a bug
                if not bool(torch.isfinite(loss_sum).all()):
                    raise NonFiniteLoss(loss_sum) from None
                raise
            scale = scaler._scale.detach().clone() if fp16 and scaler._scale is not None else one
            scaler.step(optimizer)  # skipped by the scaler when the gradients hold inf/NaN
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

            chunk.step_time.append(_stop_timer(device, timer))
            chunk.add(loss_sum, grad_norm, layer_norms, clipped, scale, lr)
            samples_per_step, tokens_per_step = samples * world, tokens * world

            if (
                step < check_each_step_until
                or len(chunk) >= cfg.telemetry_every
                or step == cfg.steps - 1
            ):
                first = step + 1 - len(chunk)
                hit = _flush(chunk, first, rank, monitor, fp16, series, emit)
                if hit is not None and cause is None:
                    cause, idx = hit
                    diverged_at = first + idx
                    if cause == "grad_explosion":
                        anomaly = _anomaly(named, chunk.layer_norms[idx], diverged_at)
                chunk = _Chunk()
                if cause is not None and stop_early:
                    break
    except torch.OutOfMemoryError as e:
        status, cause = "oom", "oom"
        emit({"event": "oom", "step": step, "message": str(e).splitlines()[0]})
    except NonFiniteLoss as e:
        # A NaN/inf loss detached from the graph: no gradient to clip or step with. The step
        # is recorded as it was (its loss, no gradient norm) and judged like any other; not
        # averaged over DDP ranks, whose peers may be waiting in their backward.
        nan, no = torch.full((), math.nan, device=device), torch.zeros((), dtype=torch.bool)
        chunk.add(e.loss, nan, torch.zeros(0), no.to(device), one, lr)
        chunk.step_time.append(_stop_timer(device, timer))
        first = step + 1 - len(chunk)
        hit = _flush(chunk, first, None, monitor, fp16, series, emit)
        if hit is not None and cause is None:
            cause, diverged_at = hit[0], first + hit[1]
    if cause is not None and status != "oom":
        status = "diverged"

    data_series = {name: np.concatenate(parts) for name, parts in series.items()}
    summary = (
        metrics.summarize(
            data_series,
            samples_per_step=samples_per_step,
            tokens_per_step=tokens_per_step,
            precision=cfg.precision,
        )
        if data_series
        else {}
    )
    summary["peak_mem_mb"] = peak_memory_mb(device)
    result = {
        "event": "summary",
        "status": status,
        "diverged": status == "diverged",
        "divergence_cause": cause if status == "diverged" else None,
        "diverged_at_step": diverged_at,
        "metrics": _finite_or_none(summary),
        "anomaly": anomaly,
        "series": {name: arr.tolist() for name, arr in data_series.items()},
        "knobs": k,
        "env": dict(cfg.env),
        "workload": workload.name,
        "size": workload.size,
        "device": str(device),
        "precision": cfg.precision,
        "seed": cfg.seed,
        "steps_planned": cfg.steps,
        "steps_run": len(data_series.get("loss", ())),
        "micro_batch": cfg.micro_batch,
        "accum_steps": accum,
        "effective_batch": cfg.micro_batch * accum * world,
        "samples_per_step": samples_per_step,
        "tokens_per_step": tokens_per_step,
        "determinism": determinism,
        "wall_s": time.perf_counter() - t_start,
    }
    if rank is not None:
        result = rank.finish(result, model, workload)  # evaluation, world size, env read back
    emit(result)
    return result


def build_optimizer(
    params: list[Any], k: Mapping[str, Any], device: torch.device
) -> torch.optim.AdamW:
    """AdamW with the knobs' lr, betas, eps and weight decay."""
    import torch

    return torch.optim.AdamW(
        params,
        lr=float(k["lr"]),
        betas=(float(k["beta1"]), float(k["beta2"])),
        eps=float(k["adam_eps"]),
        weight_decay=float(k["weight_decay"]),
        # The fused kernel lets GradScaler.step skip its per-step host sync on found_inf.
        fused=device.type == "cuda",
    )


def build_scaler(
    k: Mapping[str, Any], device: torch.device, *, enabled: bool
) -> torch.amp.GradScaler:
    """torch.amp.GradScaler with the four knobs; disabled (a no-op) outside fp16."""
    import torch

    return torch.amp.GradScaler(
        device.type,
        init_scale=float(k["init_scale"]),
        growth_factor=float(k["growth_factor"]),
        backoff_factor=float(k["backoff_factor"]),
        growth_interval=int(k["growth_interval"]),
        enabled=enabled,
    )


def forward_backward(
    model: Any,
    workload: Any,
    batches: list[tuple[torch.Tensor, ...]],
    scaler: torch.amp.GradScaler,
    amp_dtype: torch.dtype | None,
) -> tuple[torch.Tensor, int, int]:
    """Accumulate gradients over the micro-batches of one optimizer step.

    Each micro-batch's loss is divided by their number, so the summed gradient equals the
    gradient of the mean loss over the effective batch. Returns the mean loss (on the device),
    and the samples and tokens seen. Under DDP, gradients are all-reduced on the last
    micro-batch only (`no_sync` on the others).
    """
    import contextlib

    import torch

    accum = len(batches)
    device_type = next(model.parameters()).device.type
    loss_sum = torch.zeros((), device=next(model.parameters()).device)
    samples = tokens = 0
    no_sync = getattr(model, "no_sync", None)
    for i, batch in enumerate(batches):
        local = no_sync() if no_sync is not None and i < accum - 1 else contextlib.nullcontext()
        with local:  # forward and backward both inside no_sync, as DDP requires
            with torch.autocast(
                device_type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
            ):
                loss = workload.loss(model, batch) / accum
            if not loss.requires_grad:
                _check_detached(workload, loss)  # raises NonFiniteLoss or WorkloadError
            scaler.scale(loss).backward()
        loss_sum += loss.detach().float()
        samples += workload.samples(batch)
        tokens += workload.tokens(batch)
    return loss_sum, samples, tokens


class NonFiniteLoss(Exception):
    """The workload's loss was NaN or inf and detached from the graph (nothing to backward)."""

    def __init__(self, loss: torch.Tensor) -> None:
        super().__init__("non-finite loss without a gradient")
        self.loss = loss


class NoGradient(WorkloadError):
    """No parameter got a gradient from the workload's loss."""


def _check_detached(workload: Any, loss: torch.Tensor) -> None:
    """A loss that does not require grad: a divergence if it is not finite, else a workload
    bug (checked here, before backward, so that neither ends as a torch error)."""
    import torch

    if not bool(torch.isfinite(loss).all()):  # a host sync, on this rare path only
        raise NonFiniteLoss(loss.detach().float().sum())
    raise WorkloadError(
        f"workload '{getattr(workload, 'name', workload)}': loss() returned a tensor that does "
        "not require grad (detached from the model's parameters, e.g. by .item(), .detach() "
        "or torch.no_grad()): the probe cannot train on it"
    )


def clip_gradients(
    params: list[Any], clip: float, per_layer: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip in place; return (total norm before clipping, per-tensor norms, clipped?).

    global: every gradient times min(1, clip / (total_norm + 1e-6)), as
    torch.nn.utils.clip_grad_norm_ does. per_layer: each parameter tensor's gradient times
    min(1, clip / (its norm + 1e-6)). clip = 0: no clipping. Everything stays on the device.
    """
    import torch

    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise NoGradient(
            "no parameter of the model got a gradient: the workload's loss() does not depend "
            "on the model's trainable parameters"
        )
    layer_norms = torch.stack(torch._foreach_norm(grads)).float()
    grad_norm = torch.linalg.vector_norm(layer_norms)
    if clip <= 0:
        return grad_norm, layer_norms, torch.zeros((), dtype=torch.bool, device=grad_norm.device)
    if per_layer:
        coefs = torch.clamp(clip / (layer_norms + 1e-6), max=1.0)
        torch._foreach_mul_(grads, list(coefs.to(grads[0].dtype).unbind()))
        return grad_norm, layer_norms, (layer_norms > clip).any()
    torch._foreach_mul_(grads, torch.clamp(clip / (grad_norm + 1e-6), max=1.0).to(grads[0].dtype))
    return grad_norm, layer_norms, grad_norm > clip


def _flush(
    chunk: _Chunk,
    first: int,
    rank: RankContext | None,
    monitor: metrics.DivergenceMonitor,
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
    _append(series, host, fp16)
    emit(
        {
            "event": "telemetry",
            "first_step": first,
            **{name: arr.tolist() for name, arr in _with_skipped(host, fp16).items()},
        }
    )
    return hit


def _thresholds(d: Mapping[str, Any]) -> metrics.DivergenceThresholds:
    names = {f for f in metrics.DivergenceThresholds.__dataclass_fields__}
    return metrics.DivergenceThresholds(**{k: v for k, v in d.items() if k in names})


def _start_timer(device: torch.device) -> Any:
    import torch

    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return start
    return time.perf_counter()


def _stop_timer(device: torch.device, start: Any) -> Any:
    import torch

    if device.type == "cuda":
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return (start, end)  # read after the chunk's sync, never here
    return time.perf_counter() - start


def _skipped(host: Mapping[str, np.ndarray], fp16: bool) -> np.ndarray:
    """Under fp16 the GradScaler skips exactly the steps whose gradients hold inf/NaN."""
    if not fp16:
        return np.zeros(len(host["loss"]), dtype=bool)
    return ~np.isfinite(host["grad_norm"])


def _with_skipped(host: Mapping[str, np.ndarray], fp16: bool) -> dict[str, np.ndarray]:
    return {**host, "skipped": _skipped(host, fp16)}


def _append(
    series: dict[str, list[np.ndarray]], host: Mapping[str, np.ndarray], fp16: bool
) -> None:
    for name, arr in _with_skipped(host, fp16).items():
        series.setdefault(name, []).append(arr)


def _anomaly(named: list[tuple[str, Any]], layer_norms: Any, step: int) -> dict[str, Any]:
    """Per-layer gradient norms at the first gradient explosion, largest first."""
    norms = layer_norms.double().cpu().numpy()
    order = sorted(range(len(norms)), key=lambda i: -norms[i] if np.isfinite(norms[i]) else -1e308)
    return {
        "step": step,
        "layers": [
            {"name": named[i][0], "grad_norm": _finite(norms[i])} for i in order[:ANOMALY_TOP]
        ],
    }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


def _finite_or_none(d: Mapping[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: non-finite metrics become null (the cause is recorded elsewhere)."""
    return {k: (_finite(v) if isinstance(v, float) else v) for k, v in d.items()}


# ---------------------------------------------------------------------------------------------
# Trial-process entry point
# ---------------------------------------------------------------------------------------------


def _print_report(msg: dict[str, Any]) -> None:
    """Reports of a probe started by hand, without a channel: for a person, never parsed."""
    sys.stdout.write(json.dumps(msg, default=report_protocol.json_default) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None, channel: Report | None = None) -> int:
    """`python -m autotune.probe CONFIG.json`: one probe, its reports on `channel` (default:
    the channel of this process's environment, else stdout)."""
    args = sys.argv[1:] if argv is None else argv
    emit: Report = channel or report_protocol.Writer.from_env() or _print_report
    if len(args) != 1:
        print("usage: python -m autotune.probe CONFIG.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        cfg = ProbeConfig.from_dict(json.load(f))
    try:
        from autotune import fingerprint

        emit({"event": "fingerprint", "fingerprint": fingerprint.collect()})
        run_probe(cfg, emit)
    except Exception as e:
        emit(
            {
                "event": "error",
                "cause": getattr(e, "cause", None) or "exception",  # e.g. comm_hang (DDP)
                "error_type": type(e).__name__,
                "message": str(e),
                "traceback": traceback.format_exc(limit=20),
            }
        )
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
