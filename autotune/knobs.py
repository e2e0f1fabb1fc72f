"""The knob catalogue: every knob autotune knows, its type, PyTorch's default and valid range.

Depends on nothing of autotune: the probe, the space and the recipe all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Scalar = float | int | str | bool

# --------------------------------------------------------------------------------------------
# The knobs: every single-process knob with PyTorch's default (the baseline).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnobInfo:
    """What autotune knows about one knob: its type, PyTorch's default and its valid range."""

    name: str
    kind: Literal["float", "int", "choice", "bool"]
    default: Scalar | None  # PyTorch's default; the baseline trial uses it. None: from workload.
    group: str
    help: str
    low: float | None = None  # valid range (inclusive unless *_open)
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Scalar, ...] = ()


def _k(name: str, kind: Any, default: Any, group: str, help: str, **kw: Any) -> KnobInfo:
    return KnobInfo(name=name, kind=kind, default=default, group=group, help=help, **kw)


KNOBS: dict[str, KnobInfo] = {
    k.name: k
    for k in [
        _k(
            "lr",
            "float",
            None,
            "optimizer",
            "AdamW peak learning rate (default: the workload's)",
            low=0.0,
            low_open=True,
            high=10.0,
        ),
        _k("beta1", "float", 0.9, "optimizer", "AdamW beta1", low=0.0, high=1.0, high_open=True),
        _k("beta2", "float", 0.999, "optimizer", "AdamW beta2", low=0.0, high=1.0, high_open=True),
        _k(
            "adam_eps",
            "float",
            1e-8,
            "optimizer",
            "AdamW eps (1e-8 underflows in fp16 state)",
            low=0.0,
            low_open=True,
            high=1.0,
        ),
        _k(
            "weight_decay",
            "float",
            0.01,
            "optimizer",
            "AdamW decoupled weight decay",
            low=0.0,
            high=1.0,
        ),
        _k(
            "clip_norm",
            "float",
            0.0,
            "clipping",
            "gradient-norm clipping threshold on unscaled grads; 0 = off",
            low=0.0,
            high=1e6,
        ),
        _k(
            "clip_mode",
            "choice",
            "global",
            "clipping",
            "global: one norm over all parameters; per_layer: each parameter tensor on its own",
            choices=("global", "per_layer"),
        ),
        _k(
            "clip_policy",
            "choice",
            "norm",
            "clipping",
            "none; norm (clip_norm, clip_mode); agc (unit-wise, agc_lambda); zclip (z-score of the "
            "total norm: zclip_z, zclip_alpha); autoclip (a percentile of the norms so far)",
            choices=("none", "norm", "agc", "zclip", "autoclip"),
        ),
        _k(
            "agc_lambda",
            "float",
            0.01,
            "clipping",
            "agc: each unit's gradient norm at most agc_lambda x max(its weight norm, agc_eps)",
            low=0.0,
            low_open=True,
            high=100.0,
        ),
        _k(
            "agc_eps",
            "float",
            1e-3,
            "clipping",
            "agc: the floor of a unit's weight norm (a zero-initialised unit still moves)",
            low=0.0,
            low_open=True,
            high=1.0,
        ),
        _k(
            "zclip_z",
            "float",
            2.5,
            "clipping",
            "zclip: a total norm above mean + zclip_z x std (EMAs) is clipped to that",
            low=0.0,
            low_open=True,
            high=100.0,
        ),
        _k(
            "zclip_alpha",
            "float",
            0.97,
            "clipping",
            "zclip: the EMA factor of the norm's mean and variance",
            low=0.0,
            low_open=True,
            high=1.0,
            high_open=True,
        ),
        _k(
            "zclip_warmup",
            "int",
            25,
            "clipping",
            "zclip: finite norms collected (nothing clipped) before the EMAs start",
            low=1,
            high=1_000_000,
        ),
        _k(
            "autoclip_percentile",
            "float",
            10.0,
            "clipping",
            "autoclip: the total norm is clipped to this percentile of the norms seen so far",
            low=0.0,
            high=100.0,
        ),
        _k(
            "warmup_steps",
            "int",
            0,
            "schedule",
            "linear LR warm-up from 0, in optimizer steps",
            low=0,
            high=1_000_000,
        ),
        _k(
            "schedule",
            "choice",
            "constant",
            "schedule",
            "LR after warm-up",
            choices=("constant", "linear", "cosine"),
        ),
        _k(
            "min_lr_ratio",
            "float",
            0.0,
            "schedule",
            "final LR / peak LR for linear and cosine decay",
            low=0.0,
            high=1.0,
        ),
        _k(
            "init_scale",
            "float",
            65536.0,
            "grad_scaler",
            "GradScaler initial scale",
            low=0.0,
            low_open=True,
            high=2.0**32,
        ),
        _k(
            "growth_factor",
            "float",
            2.0,
            "grad_scaler",
            "GradScaler growth factor",
            low=1.0,
            low_open=True,
            high=1000.0,
        ),
        _k(
            "backoff_factor",
            "float",
            0.5,
            "grad_scaler",
            "GradScaler backoff factor",
            low=0.0,
            low_open=True,
            high=1.0,
            high_open=True,
        ),
        _k(
            "growth_interval",
            "int",
            2000,
            "grad_scaler",
            "GradScaler: steps without inf/NaN before the scale grows",
            low=1,
            high=1_000_000,
        ),
        _k(
            "accum_steps",
            "int",
            1,
            "batch",
            "micro-batches per optimizer step (loss divided by it)",
            low=1,
            high=4096,
        ),
        _k(
            "batch",
            "int",
            None,
            "batch",
            "samples per optimizer step per process (default: probe.batch); the micro-batch is "
            "batch / accum_steps. Searched on purpose, trials compare at equal samples: a length "
            "L (probe.steps, a rung, the target) counts steps at probe.batch, and a trial with "
            "batch b runs round(L * probe.batch / b) steps (warmup_steps stays in steps)",
            low=1,
            high=1_048_576,
        ),
        _k(
            "bucket_cap_mb",
            "float",
            25.0,
            "ddp",
            "DDP bucket size in MiB",
            low=0.0,
            low_open=True,
            high=4096.0,
        ),
        _k("gradient_as_bucket_view", "bool", False, "ddp", "DDP gradient_as_bucket_view"),
        _k("static_graph", "bool", False, "ddp", "DDP static_graph"),
        _k("broadcast_buffers", "bool", True, "ddp", "DDP broadcast_buffers"),
    ]
}

SCALER_KNOBS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")

#: The clipping policy's children: each acts only under the policy named (`CLIP_CHILDREN[k]`),
#: and a study suggests it only in the trials that pick that policy (a conditional space).
CLIP_CHILDREN: dict[str, str] = {
    "clip_norm": "norm",
    "clip_mode": "norm",
    "agc_lambda": "agc",
    "agc_eps": "agc",
    "zclip_z": "zclip",
    "zclip_alpha": "zclip",
    "zclip_warmup": "zclip",
    "autoclip_percentile": "autoclip",
}
DDP_KNOBS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "broadcast_buffers")

#: Environment knobs come from a file that may be shared: only these prefixes are accepted.
ENV_PREFIXES = ("NCCL_", "RCCL_", "HSA_", "ROCBLAS_", "MIOPEN_", "TORCH_NCCL_")

#: Metrics that measure the hardware more than the configuration: a recipe promises them only on
#: the hardware it was tuned on, and a pick tolerates no loss on the others.
HARDWARE_METRICS = frozenset({"throughput", "tokens_per_s", "peak_mem_mb", "scaling_efficiency"})


def clip_text(knobs: dict[str, Any]) -> str:
    """The clipping of resolved knobs as a person reads it: `off`, `1 (global)`,
    `agc lambda 0.01`, `zclip z 2.5 alpha 0.97 warm-up 25`, `autoclip p10`."""
    policy = knobs.get("clip_policy") or "norm"
    if policy == "agc":
        return f"agc lambda {float(knobs['agc_lambda']):g}"
    if policy == "zclip":
        warmup = knobs.get("zclip_warmup")
        text = f"zclip z {float(knobs['zclip_z']):g} alpha {float(knobs['zclip_alpha']):g}"
        return text if warmup is None else f"{text} warm-up {int(warmup)}"
    if policy == "autoclip":
        return f"autoclip p{float(knobs['autoclip_percentile']):g}"
    clip = float(knobs.get("clip_norm") or 0.0)
    if policy == "none" or clip <= 0:
        return "off"
    return f"{clip:g} ({knobs.get('clip_mode', 'global')})"
