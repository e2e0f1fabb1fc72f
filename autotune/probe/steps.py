"""The pieces of one optimizer step, and the setup around them: knobs with their defaults, the
learning-rate schedule, seeds and determinism, the device, AdamW, the GradScaler, gradient
accumulation, clipping, step timers.
"""

from __future__ import annotations

import math
import os
import random
import resource
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.errors import WorkloadError
from autotune.knobs import KNOBS
from autotune.probe.clipping import NoClip, NormClip, make_clip_policy
from autotune.probe.script_values import MAX_COUNT

if TYPE_CHECKING:
    import torch


def resolve_knobs(
    knobs: Mapping[str, Any], default_lr: float, micro_batch: int | None = None
) -> dict[str, Any]:
    """Every knob with a value: given ones, else PyTorch's default; lr else the workload's;
    batch, given the `micro_batch` that runs, as micro_batch x accum_steps."""
    out = {name: info.default for name, info in KNOBS.items()}
    out.update({k: v for k, v in knobs.items() if v is not None})
    if out.get("lr") is None:
        out["lr"] = default_lr
    if micro_batch is not None:
        out["batch"] = micro_batch * int(out["accum_steps"] or 1)
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
    """Turn on every real determinism lever (seeds, deterministic algorithms, cuBLAS/rocBLAS
    workspace and atomics, cuDNN/MIOpen) and say which applied.

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


def device_problem(name: str) -> str | None:
    """Why a probe on `probe.device` `name` cannot run on this machine: a GPU (cuda, cuda:N)
    where torch sees none; None where it can (cpu, auto, a GPU torch sees). Asked before any
    probe runs (a study on a local Ray, `check`, `probe`, and a recipe's verify, repro and
    migrate): each probe would raise at its first step."""
    if not name.startswith("cuda"):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    build = str(torch.__version__)
    if torch.version.cuda is None and torch.version.hip is None:
        build += ", a CPU-only build"
    return (
        f"{name!r} asks for a GPU, but torch sees none on this machine (torch {build}: "
        "torch.cuda.is_available() is False); set probe.device to cpu or auto"
    )


def peak_memory_mb(device: torch.device) -> float:
    """Peak allocated device memory on a GPU; peak RSS of this process on the CPU."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device)) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return float(rss) / (2**20 if sys.platform == "darwin" else 2**10)


def to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    if device.type == "cpu":
        return batch
    # Pinned memory lets the copy run asynchronously: no host sync per step.
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)


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
                loss = loss_of(workload, model, batch) / accum
            if not loss.requires_grad:
                check_detached(workload, loss)  # raises NonFiniteLoss or WorkloadError
            scaler.scale(loss).backward()
        loss_sum += loss.detach().float()
        samples += count_of(workload, "samples", batch)
        tokens += count_of(workload, "tokens", batch)
    return loss_sum, samples, tokens


def _named(workload: Any) -> str:
    return f"workload '{getattr(workload, 'name', workload)}'"


def loss_of(workload: Any, model: Any, batch: Any) -> torch.Tensor:
    """The workload's `loss(model, batch)`, checked to be one number (a 0-d tensor; a
    one-element one is reshaped): anything else a WorkloadError naming loss() and what it
    returned, not a torch error further on. No host sync."""
    import torch

    loss = workload.loss(model, batch)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss if loss.dim() == 0 else loss.reshape(())
    what = (
        f"a tensor of shape {tuple(loss.shape)}"
        if isinstance(loss, torch.Tensor)
        else f"{type(loss).__name__} {str(repr(loss))[:60]}"
    )
    raise WorkloadError(
        f"{_named(workload)}: loss() returned {what}, not a one-element tensor: it must return "
        "the scalar mean loss of the batch (e.g. torch.nn.functional.cross_entropy(...))"
    )


def count_of(workload: Any, method: str, batch: Any) -> Any:
    """The workload's `samples(batch)` or `tokens(batch)` (`method`), checked to be a finite
    count from 0 to `MAX_COUNT` (10^12, the bound a script's reports have): a negative,
    non-finite or impossible one (a throughput below zero or of 10^18 a second, a compute
    count that runs backwards) is a WorkloadError naming the method."""
    n = getattr(workload, method)(batch)
    if type(n) is int and 0 <= n <= MAX_COUNT:  # the usual case, at no cost
        return n
    try:
        value = None if isinstance(n, bool) else float(n)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        value = None
    if value is None or not math.isfinite(value) or not 0 <= value <= MAX_COUNT:
        raise WorkloadError(
            f"{_named(workload)}: {method}() returned {str(repr(n))[:60]}: it must return how "
            f"many {method} the batch holds, a finite number from 0 to {MAX_COUNT:.0e}"
        )
    return n


class NonFiniteLoss(Exception):
    """The workload's loss was NaN or inf and detached from the graph (nothing to backward)."""

    def __init__(self, loss: torch.Tensor) -> None:
        super().__init__("non-finite loss without a gradient")
        self.loss = loss


class NoGradient(WorkloadError):
    """No parameter got a gradient from the workload's loss."""


def check_detached(workload: Any, loss: torch.Tensor) -> None:
    """A loss that does not require grad: a divergence if it is not finite, else a workload
    bug (checked here, before backward, so that neither ends as a torch error)."""
    import torch

    if not bool(torch.isfinite(loss).all()):  # a host sync, on this rare path only
        raise NonFiniteLoss(loss.detach().float().sum())
    raise WorkloadError(
        f"{_named(workload)}: loss() returned a tensor that does not require grad (detached "
        "from the model's parameters, e.g. by .item(), .detach() or torch.no_grad()): the "
        "probe cannot train on it"
    )


def clip_gradients(
    params: list[Any], clip: float, per_layer: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip in place by a fixed norm; return (total norm before clipping, per-tensor norms,
    clipped?).

    global: every gradient times min(1, clip / (total_norm + 1e-6)), as
    torch.nn.utils.clip_grad_norm_ does. per_layer: each parameter tensor's gradient times
    min(1, clip / (its norm + 1e-6)). clip = 0: no clipping. Everything stays on the device.
    """
    return apply_clipping(NormClip(clip, per_layer), params)


def apply_clipping(
    policy: NoClip, params: list[Any]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip in place by `policy` (`autotune.probe.clipping`); return (total norm before
    clipping, per-tensor norms before clipping, clipped?), on the device."""
    if not any(p.grad is not None for p in params):
        raise NoGradient(
            "no parameter of the model got a gradient: the workload's loss() does not depend "
            "on the model's trainable parameters"
        )
    return policy(params)


def clip_policy(knobs: Mapping[str, Any]) -> NoClip:
    """The clipping policy of resolved knobs, with a fresh state."""
    return make_clip_policy(dict(knobs))


def clips(knobs: Mapping[str, Any]) -> bool:
    """Whether the knobs' policy clips at all (a fixed norm of 0, or none, does not)."""
    policy = knobs.get("clip_policy") or "norm"
    if policy == "norm":
        return float(knobs.get("clip_norm") or 0.0) > 0
    return policy != "none"


def start_timer(device: torch.device) -> Any:
    import torch

    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return start
    return time.perf_counter()


def stop_timer(device: torch.device, start: Any) -> Any:
    import torch

    if device.type == "cuda":
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        return (start, end)  # read after the chunk's sync, never here
    return time.perf_counter() - start
