"""A recipe in the shapes other tools read: `autotune export --format FMT`.

- yaml: the recipe file itself (`Recipe.dump`), the only format `Recipe.load` reads back.
- env: a POSIX shell file of `export NAME=value` lines for the environment knobs; source it
  before launching training.
- python: a standalone snippet (torch, math and os only; no autotune) with the recipe's values as
  constants and the functions that apply them the way the probe measured them: AdamW, the
  GradScaler, the warm-up/decay schedule, autocast, clipping and the end of a step.
- hf: JSON with Hugging Face `TrainingArguments` fields, and notes on what they cannot express.
- lightning: JSON with `lightning.Trainer` arguments, the optimizer and the learning-rate
  schedule, and notes on what Lightning cannot express.

The JSON formats say in their `notes` where the tool differs from the recipe and how to close the
gap (usually: take the function from the python export).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable
from typing import Any

from autotune import __version__
from autotune import space as sp
from autotune.errors import RecipeError, did_you_mean
from autotune.recipe import Recipe

FORMATS = ("yaml", "env", "python", "hf", "lightning")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def render(recipe: Recipe, fmt: str) -> str:
    """`recipe` as text in format `fmt` (one of FORMATS), ending with a newline."""
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise RecipeError(
            f"unknown export format {fmt!r}{did_you_mean(str(fmt), FORMATS)}; "
            f"formats are: {', '.join(FORMATS)}"
        )
    return renderer(recipe)


# ----- shared pieces ---------------------------------------------------------------------------


def _one_line(value: Any) -> str:
    """Text that is safe inside a one-line comment: no line breaks."""
    return " ".join(str(value).split())


def _origin(r: Recipe) -> str:
    """'study S, trial T (pick P)', or what is known of it."""
    src = r.source or {}
    parts = []
    if src.get("study") is not None:
        parts.append(f"study {src['study']}")
    if src.get("trial") is not None:
        parts.append(f"trial {src['trial']}")
    text = ", ".join(parts) if parts else "no study recorded"
    if src.get("pick"):
        text += f" (pick {src['pick']})"
    return _one_line(text)


def _platform(r: Recipe) -> str | None:
    """cuda, rocm or cpu: where the recipe was tuned, when the record says."""
    fp = r.fingerprint or {}
    plat = fp.get("platform")
    if isinstance(plat, str) and plat:
        return plat
    device = str((r.probe or {}).get("device") or "")
    if device.startswith("cuda"):
        return "cuda"
    if device == "cpu":
        return "cpu"
    return None


def _tuned_on(r: Recipe) -> str:
    """One line: the hardware fingerprint, the workload and how long the probe ran."""
    fp = r.fingerprint or {}
    fp_hash = r.fingerprint_hash or (r.source or {}).get("fp_hash")
    devices = [d for d in (fp.get("devices") or []) if isinstance(d, dict)]
    device = devices[0].get("name") if devices else None
    if device and len(devices) > 1:
        device = f"{len(devices)} x {device}"
    if not device:
        device = fp.get("device") or (fp.get("host") or {}).get("cpu_model")
    hw = []
    if fp_hash:
        hw.append(f"fingerprint {fp_hash}")
    where = ", ".join(str(x) for x in (_platform(r), device) if x)
    if where:
        hw.append(f"({where})" if hw else where)
    wl = r.workload
    text = f"workload {wl.get('name')} ({wl.get('size')}), {r.precision}"
    steps = (r.probe or {}).get("steps")
    if steps:
        text += f", {steps}-step probes"
    text += "; " + (" ".join(hw) if hw else "hardware not recorded")
    return _one_line(text)


def _scaler_values(k: dict[str, Any]) -> dict[str, Any]:
    return {
        "init_scale": float(k["init_scale"]),
        "growth_factor": float(k["growth_factor"]),
        "backoff_factor": float(k["backoff_factor"]),
        "growth_interval": int(k["growth_interval"]),
    }


def _scaler_is_default(k: dict[str, Any]) -> bool:
    return all(v == sp.KNOBS[n].default for n, v in _scaler_values(k).items())


def _scaler_text(k: dict[str, Any]) -> str:
    return ", ".join(f"{n} {v!r}" for n, v in _scaler_values(k).items())


def _amp_device(r: Recipe) -> str:
    """torch.amp's device type where the recipe was tuned: cpu, else cuda (ROCm included)."""
    return "cpu" if _platform(r) == "cpu" else "cuda"


def _scaler_call(k: dict[str, Any], device: str) -> str:
    v = _scaler_values(k)
    return (
        f'torch.amp.GradScaler("{device}", init_scale={v["init_scale"]!r}, '
        f"growth_factor={v['growth_factor']!r}, backoff_factor={v['backoff_factor']!r}, "
        f"growth_interval={v['growth_interval']!r})"
    )


def _ddp_is_default(k: dict[str, Any]) -> bool:
    return all(k[n] == sp.KNOBS[n].default for n in sp.DDP_KNOBS)


def _env_names(r: Recipe) -> str:
    return ", ".join(f"{n}={v}" for n, v in r.env.items())


def _env_note(r: Recipe) -> str:
    return (
        f"Environment knobs ({_one_line(_env_names(r))}) are not training arguments: export them "
        "in the shell that launches training (`autotune export --format env`, then `. FILE`) or "
        "call apply_env() from the python export first thing in the script; NCCL/RCCL read them "
        "when the process group starts, ROCm libraries when they load."
    )


def _schedule_formula(k: dict[str, Any]) -> str:
    peak = float(k["lr"])
    warmup = int(k["warmup_steps"])
    sched = str(k["schedule"])
    ratio = float(k["min_lr_ratio"])
    text = "step counts optimizer steps from 0 of total_steps; "
    if warmup > 0:
        text += f"lr = {peak!r} * (step + 1) / {warmup} for step < {warmup}, then "
    else:
        text += "lr = "
    if sched == "constant":
        return text + f"{peak!r}"
    p = f"p = min(1, (step - {warmup}) / max(1, total_steps - {warmup + 1}))"
    if sched == "linear":
        return text + f"{peak!r} * (1 - {1.0 - ratio:.12g} * p) with {p}"
    if sched == "cosine":
        return (
            text + f"{peak!r} * ({ratio!r} + {1.0 - ratio:.12g} * (1 + cos(pi * p)) / 2) with {p}"
        )
    raise RecipeError(f"unknown schedule {sched!r}")


# ----- yaml and env ----------------------------------------------------------------------------


def _yaml(r: Recipe) -> str:
    return r.dump()


def _env(r: Recipe) -> str:
    lines = [
        f"# autotune recipe {_one_line(repr(r.name))}: environment knobs "
        f"(autotune {_one_line(r.autotune_version)}).",
        f"# From {_origin(r)}; tuned on {_tuned_on(r)}.",
        "# Source it in the shell that launches training, before torch starts:  . ./FILE",
        "# (NCCL/RCCL read these when the process group starts, ROCm libraries when they load.)",
    ]
    if not r.env:
        lines.append("# This recipe sets no environment knobs: there is nothing to export.")
    for name, value in r.env.items():
        if not _ENV_NAME.match(name):
            raise RecipeError(f"recipe {r.name}: env.{name}: not a valid variable name")
        lines.append(f"export {name}={shlex.quote(str(value))}")
    return "\n".join(lines) + "\n"


# ----- python ----------------------------------------------------------------------------------


def _py(value: Any) -> str:
    """A Python literal for a knob value (floats round-trip exactly through repr); strings in
    double quotes where that needs no escaping, as code formatters write them."""
    if isinstance(value, str):
        text = repr(value)
        return f'"{text[1:-1]}"' if text[0] == "'" and '"' not in value else text
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    raise RecipeError(f"cannot write {value!r} as a Python constant")


_KNOB_COMMENTS = {
    "lr": "AdamW peak learning rate",
    "clip_norm": "gradient-norm clipping threshold (unscaled); 0: no clipping",
    "clip_mode": "global: one norm over all parameters; per_layer: each tensor on its own",
    "warmup_steps": "linear warm-up, in optimizer steps",
    "schedule": "after warm-up: constant, linear or cosine",
    "min_lr_ratio": "final lr / peak lr of the linear or cosine decay",
    "init_scale": "GradScaler (fp16 only)",
    "accum_steps": "micro-batches per optimizer step (divide each loss by it)",
    "bucket_cap_mb": "DistributedDataParallel (see wrap_ddp)",
}


def _python(r: Recipe) -> str:
    k = r.knobs
    amp = {"fp32": "None", "fp16": "torch.float16", "bf16": "torch.bfloat16"}[r.precision]
    head = [
        f"# autotune recipe {_one_line(repr(r.name))}, as a standalone PyTorch snippet.",
        f"# From {_origin(r)}.",
        f"# Tuned on {_tuned_on(r)}.",
        f"# Written by autotune {_one_line(__version__)} from a recipe of autotune "
        f"{_one_line(r.autotune_version)}. It needs torch only;",
        "# the functions below apply these values the way autotune's probe measured them.",
        "#",
        "# Usage (call apply_env() first, before torch touches a GPU or starts a process group):",
        f'#   opt, scaler = make_optimizer(model.parameters()), make_scaler("{_amp_device(r)}")',
        "#   sched = make_scheduler(opt, total_steps)  # total_steps counts optimizer steps",
        "#   for i, (x, y) in enumerate(loader):  # micro-batches of MICRO_BATCH samples",
        f'#       with autocast("{_amp_device(r)}"): loss = loss_fn(model(x), y) / ACCUM_STEPS',
        "#       scaler.scale(loss).backward()",
        "#       if (i + 1) % ACCUM_STEPS == 0: clip_and_step(opt, scaler, model.parameters()); "
        "sched.step()",
        "",
        "import math",
        "import os",
        "",
        "import torch",
        "",
        f"RECIPE = {_py(r.name)}",
        f"PRECISION = {_py(r.precision)}  # fp32, fp16 (autocast + GradScaler) or bf16 (autocast)",
        f"AMP_DTYPE = {amp}  # None: no autocast",
        f"MICRO_BATCH = {int(r.micro_batch)!r}  # samples per forward/backward",
        f"WORLD_SIZE = {int(r.world_size)!r}  # data-parallel processes it was tuned with",
        f"EFFECTIVE_BATCH = {int(r.effective_batch)!r}  # MICRO_BATCH * ACCUM_STEPS * WORLD_SIZE",
    ]
    for name in sp.KNOBS:
        line = f"{name.upper()} = {_py(k[name])}"
        comment = _KNOB_COMMENTS.get(name)
        head.append(f"{line}  # {comment}" if comment else line)
    if r.env:
        head.append("ENV = {")
        head += [f"    {_py(n)}: {_py(str(v))}," for n, v in r.env.items()]
        head.append("}")
    else:
        head.append("ENV: dict = {}  # the recipe sets no environment knobs")
    return "\n".join(head) + "\n" + _PY_BODY


_PY_BODY = '''

def apply_env(environ=None):
    """Put ENV into os.environ (or into `environ`); returns what was set. Call it before torch
    initialises a GPU or a process group: NCCL/RCCL read these when the group starts."""
    target = os.environ if environ is None else environ
    for name, value in ENV.items():
        target[name] = value
    return dict(ENV)


def make_optimizer(params):
    """AdamW with the recipe's lr, betas, eps and weight decay (on every parameter), using the
    fused kernel when the parameters are on a GPU, as the probe did."""
    params = list(params)
    first = params[0] if params else None
    if isinstance(first, dict):  # parameter groups: look at the first group's first tensor
        group = first.get("params")
        first = group[0] if isinstance(group, (list, tuple)) and group else group
    fused = isinstance(first, torch.Tensor) and first.device.type == "cuda"
    return torch.optim.AdamW(
        params,
        lr=LR,
        betas=(BETA1, BETA2),
        eps=ADAM_EPS,
        weight_decay=WEIGHT_DECAY,
        fused=fused,
    )


def make_scaler(device_type="cuda"):
    """torch.amp.GradScaler with the recipe's four settings; disabled (a no-op) unless fp16."""
    return torch.amp.GradScaler(
        device_type,
        init_scale=INIT_SCALE,
        growth_factor=GROWTH_FACTOR,
        backoff_factor=BACKOFF_FACTOR,
        growth_interval=GROWTH_INTERVAL,
        enabled=PRECISION == "fp16",
    )


def lr_factor(step, total_steps):
    """Learning rate of optimizer step `step` (from 0) of `total_steps`, as a fraction of LR."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    if SCHEDULE == "constant":
        return 1.0
    p = min(1.0, (step - WARMUP_STEPS) / max(1, total_steps - WARMUP_STEPS - 1))
    if SCHEDULE == "linear":
        return 1.0 - (1.0 - MIN_LR_RATIO) * p
    if SCHEDULE == "cosine":
        return MIN_LR_RATIO + (1.0 - MIN_LR_RATIO) * 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"unknown schedule {SCHEDULE!r}")


def make_scheduler(optimizer, total_steps):
    """LambdaLR following lr_factor; call .step() once after each optimizer step."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(min(step, total_steps - 1), total_steps)
    )


def autocast(device_type="cuda"):
    """torch.autocast at the recipe's precision; disabled for fp32."""
    return torch.autocast(
        device_type, dtype=AMP_DTYPE or torch.float32, enabled=AMP_DTYPE is not None
    )


def clip_gradients(params):
    """Clip the (unscaled) gradients of `params` in place by CLIP_NORM and CLIP_MODE; return
    the total gradient norm before clipping, as a tensor. CLIP_NORM 0: measure only."""
    params = [p for p in params if p.grad is not None]
    if not params:
        return torch.zeros(())
    if CLIP_MODE == "per_layer":
        norms = [torch.linalg.vector_norm(p.grad).float() for p in params]
        if CLIP_NORM > 0:
            for p, n in zip(params, norms):
                p.grad.mul_(torch.clamp(CLIP_NORM / (n + 1e-6), max=1.0).to(p.grad.dtype))
        return torch.linalg.vector_norm(torch.stack(norms))
    if CLIP_NORM > 0:
        return torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
    norms = [torch.linalg.vector_norm(p.grad).float() for p in params]
    return torch.linalg.vector_norm(torch.stack(norms))


def clip_and_step(optimizer, scaler=None, params=None):
    """The end of a training step: unscale, clip, step, update the scale, zero the gradients.

    The step goes through an enabled scaler, which skips it when a gradient is inf/NaN; without
    one, a step whose gradient norm is not finite is skipped here. Returns the total gradient
    norm before clipping (a float)."""
    if params is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
    params = list(params)
    if scaler is not None:
        scaler.unscale_(optimizer)
    norm = float(clip_gradients(params))
    if scaler is not None and scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
    elif math.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def wrap_ddp(model, **kwargs):
    """DistributedDataParallel with the recipe's DDP settings (a process group must be up);
    `kwargs` (device_ids, ...) are passed on."""
    from torch.nn.parallel import DistributedDataParallel

    kwargs = {
        "bucket_cap_mb": BUCKET_CAP_MB,
        "gradient_as_bucket_view": GRADIENT_AS_BUCKET_VIEW,
        "static_graph": STATIC_GRAPH,
        **kwargs,
    }
    try:  # newer PyTorch calls broadcast_buffers forward_sync_buffers
        return DistributedDataParallel(model, forward_sync_buffers=BROADCAST_BUFFERS, **kwargs)
    except TypeError as e:
        if "forward_sync_buffers" not in str(e):
            raise
    return DistributedDataParallel(model, broadcast_buffers=BROADCAST_BUFFERS, **kwargs)
'''


# ----- Hugging Face ------------------------------------------------------------------------------


def _hf(r: Recipe) -> str:
    k = r.knobs
    sched = str(k["schedule"])
    warmup = int(k["warmup_steps"])
    ratio = float(k["min_lr_ratio"])
    clip = float(k["clip_norm"])
    notes: list[str] = []
    args: dict[str, Any] = {
        "learning_rate": float(k["lr"]),
        "adam_beta1": float(k["beta1"]),
        "adam_beta2": float(k["beta2"]),
        "adam_epsilon": float(k["adam_eps"]),
        "weight_decay": float(k["weight_decay"]),
        "max_grad_norm": clip,
        "warmup_steps": warmup,
    }
    if sched == "constant":
        args["lr_scheduler_type"] = "constant_with_warmup" if warmup > 0 else "constant"
    elif sched == "linear":
        args["lr_scheduler_type"] = "linear"
        if ratio > 0:
            notes.append(
                f"Schedule: HF's linear decay ends at 0; the recipe's ends at {ratio!r} x the peak "
                "rate, which no HF scheduler type expresses. For the exact schedule, pass the "
                "python export's optimizer and scheduler: Trainer(..., optimizers=(opt, "
                "make_scheduler(opt, total_steps))) with opt = make_optimizer(model.parameters())."
            )
    elif sched == "cosine":
        if ratio > 0:
            args["lr_scheduler_type"] = "cosine_with_min_lr"
            args["lr_scheduler_kwargs"] = {"min_lr_rate": ratio}
        else:
            args["lr_scheduler_type"] = "cosine"
    else:
        raise RecipeError(f"recipe {r.name}: unknown schedule {sched!r}")
    args["gradient_accumulation_steps"] = r.accum_steps
    args["per_device_train_batch_size"] = int(r.micro_batch)
    args["fp16"] = r.precision == "fp16"
    args["bf16"] = r.precision == "bf16"
    plat = _platform(r)
    args["optim"] = "adamw_torch" if plat == "cpu" else "adamw_torch_fused"
    notes.append(
        f"optim {args['optim']}: the probe built torch.optim.AdamW with fused=True on a GPU and "
        "the default (foreach) kernel on a CPU, the same update up to rounding. This recipe was "
        + (
            "tuned on a CPU, so adamw_torch; on a GPU adamw_torch_fused is the faster equivalent."
            if plat == "cpu"
            else f"tuned on {plat or 'unrecorded hardware (assumed a GPU)'}, so adamw_torch_fused "
            "(HF's own default with torch >= 2.8); adamw_torch is the portable equivalent."
        )
    )

    if warmup > 0 or sched != "constant":
        notes.append(
            "Schedule timing: HF's warm-up gives optimizer step s (from 0) the rate "
            "peak * s / warmup_steps, the recipe's peak * (s + 1) / warmup_steps (one step "
            "ahead), and HF's decay ends one step after the last step. For the exact schedule "
            "pass the python export's optimizer and scheduler to Trainer(optimizers=(...))."
        )
    if float(k["weight_decay"]) > 0:
        notes.append(
            "Weight decay: HF's Trainer exempts biases and normalisation weights from weight "
            "decay; the recipe (and its probe) decays every parameter. Trainer(optimizers=("
            "make_optimizer(model.parameters()), scheduler)) with the python export matches it."
        )
    if k["clip_mode"] == "per_layer" and clip > 0:
        notes.append(
            f"Clipping: the recipe clips each parameter tensor's gradient to norm {clip!r} on its "
            "own; HF clips one global norm (max_grad_norm), set here to the same value, which "
            "clips at least as hard. For the recipe's clipping set max_grad_norm to 0.0 and add a "
            "TrainerCallback whose on_pre_optimizer_step(self, args, state, control, model=None, "
            "**kw) calls clip_gradients(model.parameters()) from the python export (the "
            "gradients are unscaled by then: the Trainer measures their norm through accelerate "
            "before that hook)."
        )
    if r.precision == "fp16":
        if _scaler_is_default(k):
            notes.append(
                "GradScaler: the recipe's settings are PyTorch's defaults, which HF uses: nothing "
                "to do."
            )
        else:
            notes.append(
                "GradScaler: HF builds its scaler with PyTorch's defaults (init_scale 65536, "
                "growth_factor 2, backoff_factor 0.5, growth_interval 2000) and TrainingArguments "
                f"cannot change them; the recipe's are {_scaler_text(k)}. After creating the "
                "Trainer and before trainer.train(), set trainer.accelerator.scaler = "
                f"{_scaler_call(k, _amp_device(r))} (or make_scaler('{_amp_device(r)}') from the "
                "python export): accelerate "
                "hands that attribute to the optimizer when train() prepares it. It is an "
                "attribute, not a documented option: check it after upgrading."
            )
    if r.world_size > 1 or not _ddp_is_default(k):
        bucket = float(k["bucket_cap_mb"])
        args["ddp_bucket_cap_mb"] = int(bucket) if bucket.is_integer() else bucket
        args["ddp_broadcast_buffers"] = bool(k["broadcast_buffers"])
        args["ddp_static_graph"] = bool(k["static_graph"])
        args["ddp_find_unused_parameters"] = False
        notes.append(
            "DDP: ddp_bucket_cap_mb, ddp_broadcast_buffers and ddp_static_graph carry the "
            "recipe's values; ddp_find_unused_parameters is False because the probe ran DDP with "
            "PyTorch's default (HF would otherwise turn it on for most models)."
            + (
                ""
                if bucket.is_integer()
                else " TrainingArguments declares ddp_bucket_cap_mb an int; the fractional value "
                "is passed on to DDP as it is."
            )
        )
        if bool(k["gradient_as_bucket_view"]):
            notes.append(
                "DDP: gradient_as_bucket_view=True has no TrainingArguments field (HF builds "
                "accelerate's DistributedDataParallelKwargs itself); without it DDP keeps a "
                "separate gradient copy: the same training, more memory."
            )
    if r.world_size > 1:
        notes.append(
            f"Launch {r.world_size} processes (torchrun --nproc-per-node {r.world_size}, or "
            "across nodes) for the recipe's effective batch of "
            f"{r.effective_batch} = {r.micro_batch} x {r.accum_steps} x {r.world_size}."
        )
    if r.env:
        notes.append(_env_note(r))
    return json.dumps({"training_arguments": args, "notes": notes}, indent=2) + "\n"


# ----- Lightning ---------------------------------------------------------------------------------


def _lightning(r: Recipe) -> str:
    k = r.knobs
    clip = float(k["clip_norm"])
    precision = {"fp32": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}[r.precision]
    trainer: dict[str, Any] = {
        "gradient_clip_val": clip if clip > 0 else None,
        "gradient_clip_algorithm": "norm",
        "accumulate_grad_batches": r.accum_steps,
        "precision": precision,
    }
    optimizer: dict[str, Any] = {
        "class": "torch.optim.AdamW",
        "lr": float(k["lr"]),
        "betas": [float(k["beta1"]), float(k["beta2"])],
        "eps": float(k["adam_eps"]),
        "weight_decay": float(k["weight_decay"]),
    }
    notes: list[str] = [
        "Learning-rate schedule: return it from configure_optimizers as {'optimizer': opt, "
        "'lr_scheduler': {'scheduler': make_scheduler(opt, total_steps), 'interval': 'step'}} "
        "with make_scheduler from the python export (Lightning's default interval is 'epoch'; "
        "with 'step' it steps once per optimizer step, after accumulation)."
    ]
    if r.precision == "fp16":
        optimizer["fused"] = False
        notes.append(
            "Optimizer: fused is False because under 16-mixed Lightning refuses to clip "
            "gradients with an optimizer that unscales inside step() (fused AdamW), and skips "
            "unscaling before a custom clip. The update is the same; the probe used fused=True "
            "on a GPU."
        )
        if _scaler_is_default(k):
            notes.append(
                "GradScaler: the recipe's settings are PyTorch's defaults, which '16-mixed' uses: "
                "nothing to do."
            )
        else:
            notes.append(
                "GradScaler: '16-mixed' builds torch.amp.GradScaler with PyTorch's defaults; the "
                f"recipe's are {_scaler_text(k)}. Drop 'precision' from the Trainer arguments "
                "(Lightning refuses it together with a precision plugin) and pass plugins=["
                f"lightning.pytorch.plugins.precision.MixedPrecision('16-mixed', "
                f"'{_amp_device(r)}', scaler={_scaler_call(k, _amp_device(r))})] "
                f"(make_scaler('{_amp_device(r)}') from the python export builds the same scaler)."
            )
        notes.append(
            "On a CPU Lightning turns '16-mixed' into 'bf16-mixed' (with a warning): fp16 "
            "autocast there needs the python export's own loop."
        )
    else:
        notes.append(
            "Optimizer: the probe used fused=True on a GPU; add it there "
            "(make_optimizer from the python export does)."
        )
    if k["clip_mode"] == "per_layer" and clip > 0:
        notes.append(
            f"Clipping: the recipe clips each parameter tensor's gradient to norm {clip!r} on "
            "its own; Lightning's algorithms ('norm', 'value') act over all parameters at once. "
            "gradient_clip_val is set to the same threshold as a global norm, which clips at "
            "least as hard. For the recipe's clipping, override "
            "configure_gradient_clipping(self, optimizer, gradient_clip_val=None, "
            "gradient_clip_algorithm=None) to call clip_gradients(self.parameters()) from the "
            "python export (gradients are already unscaled there) and drop gradient_clip_val."
        )
    if r.world_size > 1 or not _ddp_is_default(k):
        notes.append(
            "DDP: pass strategy=lightning.pytorch.strategies.DDPStrategy("
            f"bucket_cap_mb={float(k['bucket_cap_mb'])!r}, "
            f"gradient_as_bucket_view={bool(k['gradient_as_bucket_view'])!r}, "
            f"static_graph={bool(k['static_graph'])!r}, "
            f"broadcast_buffers={bool(k['broadcast_buffers'])!r})"
            + (f" and devices={r.world_size}" if r.world_size > 1 else "")
            + f" (effective batch {r.effective_batch} = {r.micro_batch} x {r.accum_steps} x "
            f"{r.world_size}); the DataLoader's batch_size is {r.micro_batch}."
        )
    if r.env:
        notes.append(_env_note(r))
    out = {
        "trainer": trainer,
        "optimizer": optimizer,
        "lr_schedule": {
            "warmup_steps": int(k["warmup_steps"]),
            "schedule": str(k["schedule"]),
            "min_lr_ratio": float(k["min_lr_ratio"]),
            "formula": _schedule_formula(k),
        },
        "micro_batch": int(r.micro_batch),
        "notes": notes,
    }
    return json.dumps(out, indent=2) + "\n"


_RENDERERS: dict[str, Callable[[Recipe], str]] = {
    "yaml": _yaml,
    "env": _env,
    "python": _python,
    "hf": _hf,
    "lightning": _lightning,
}
