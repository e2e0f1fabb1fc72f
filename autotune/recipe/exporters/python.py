"""The python export: a standalone snippet (torch, math and os only; no autotune) with the
recipe's values as constants and the functions that apply them the way the probe measured them:
AdamW, the GradScaler, the warm-up/decay schedule, autocast, clipping and the end of a step."""

from __future__ import annotations

import inspect
import textwrap

from autotune import __version__
from autotune import space as sp
from autotune.probe import clipping
from autotune.recipe.exporters.common import (
    amp_device,
    hf_trained_note,
    one_line,
    origin,
    own_schedule,
    own_schedule_note,
    py,
    tuned_on,
)
from autotune.recipe.file import Recipe

_INLINE_MARK = "# --- the python export inlines the code from this line on ---\n"

_KNOB_COMMENTS = {
    "lr": "AdamW peak learning rate",
    "clip_norm": "gradient-norm clipping threshold (unscaled); 0: no clipping",
    "clip_mode": "global: one norm over all parameters; per_layer: each tensor on its own",
    "clip_policy": "none, norm, agc, zclip or autoclip (see make_clip_policy)",
    "agc_lambda": "agc: unit grad norm <= AGC_LAMBDA x max(unit weight norm, AGC_EPS)",
    "zclip_z": "zclip: a norm above mean + ZCLIP_Z x std (EMAs) is clipped to that",
    "zclip_alpha": "zclip: the EMA factor",
    "zclip_warmup": "zclip: finite norms collected before the EMAs start",
    "autoclip_percentile": "autoclip: clip to this percentile of the norms seen so far",
    "warmup_steps": "linear warm-up, in optimizer steps",
    "schedule": "after warm-up: constant, linear or cosine",
    "min_lr_ratio": "final lr / peak lr of the linear or cosine decay",
    "init_scale": "GradScaler (fp16 only)",
    "accum_steps": "micro-batches per optimizer step (divide each loss by it)",
    "batch": "samples per optimizer step per process: MICRO_BATCH * ACCUM_STEPS",
    "bucket_cap_mb": "DistributedDataParallel (see wrap_ddp)",
}


#: The knobs of the learning-rate schedule: None in the export of a script that ran its own.
_SCHEDULE_KNOBS = ("warmup_steps", "schedule", "min_lr_ratio")


def schedule_line(r: Recipe) -> str:
    """SCHEDULE_STEPS: the LR schedule's length the study measured (None: not recorded)."""
    n = r.schedule_steps
    if n is None:
        return "SCHEDULE_STEPS = None  # not recorded: pass make_scheduler(opt, total_steps)"
    return (
        f"SCHEDULE_STEPS = {n!r}  # the LR schedule's length (optimizer steps) the study measured"
    )


#: How to train as measured, for a recipe tuned under HF's Trainer.
_HF_INSTEAD = (
    "To train as the study measured, use the hf export's TrainingArguments (or "
    "autotune.integrations.hf.training_args(recipe, ...)) with a transformers Trainer; "
    "make_optimizer and make_scheduler below give the recipe's own."
)


def _applied_lines(r: Recipe) -> list[str]:
    """The header's claim about the functions below: they apply the values as the probe
    measured them, except for a recipe whose trials ran under HF's Trainer (its schedule and
    weight decay are HF's, not these functions'), which is said instead."""
    note = hf_trained_note(r, _HF_INSTEAD)
    if note is None:
        return ["# the functions below apply these values the way autotune's probe measured them."]
    text = "the functions below apply these values the way autotune's own probe does. " + note
    return ["# " + line for line in textwrap.wrap(one_line(text), 94)]


def render_python(r: Recipe) -> str:
    k = r.knobs
    amp = {"fp32": "None", "fp16": "torch.float16", "bf16": "torch.bfloat16"}[r.precision]
    head = [
        f"# autotune recipe {one_line(repr(r.name))}, as a standalone PyTorch snippet.",
        f"# From {origin(r)}.",
        f"# Tuned on {tuned_on(r)}.",
        f"# Written by autotune {one_line(__version__)} from a recipe of autotune "
        f"{one_line(r.autotune_version)}. It needs torch only;",
        *_applied_lines(r),
        "#",
        "# Usage (call apply_env() first, before torch touches a GPU or starts a process group):",
        f'#   opt, scaler = make_optimizer(model.parameters()), make_scaler("{amp_device(r)}")',
        "#   sched = make_scheduler(opt)  # over SCHEDULE_STEPS optimizer steps, as measured",
        "#   for i, (x, y) in enumerate(loader):  # micro-batches of MICRO_BATCH samples",
        f'#       with autocast("{amp_device(r)}"): loss = loss_fn(model(x), y) / ACCUM_STEPS',
        "#       scaler.scale(loss).backward()",
        "#       if (i + 1) % ACCUM_STEPS == 0: clip_and_step(opt, scaler, model.parameters()); "
        "sched.step()",
        "# Under transformers.Trainer add callbacks=[hf_callback()], under lightning.Trainer",
        "# callbacks=[lightning_callback()]: each clips by CLIP_POLICY as clip_and_step does.",
        "",
        "from __future__ import annotations",
        "",
        "import math",
        "import os",
        "",
        "import torch",
        "",
        f"RECIPE = {py(r.name)}",
        f"PRECISION = {py(r.precision)}  # fp32, fp16 (autocast + GradScaler) or bf16 (autocast)",
        f"AMP_DTYPE = {amp}  # None: no autocast",
        f"MICRO_BATCH = {int(r.micro_batch)!r}  # samples per forward/backward",
        f"WORLD_SIZE = {int(r.world_size)!r}  # data-parallel processes it was tuned with",
        f"EFFECTIVE_BATCH = {int(r.effective_batch)!r}  # MICRO_BATCH * ACCUM_STEPS * WORLD_SIZE",
    ]
    head.append(schedule_line(r))
    own = own_schedule(r)
    if own:
        head.append("# " + one_line(own_schedule_note(r)))
    for name in sp.KNOBS:
        line = f"{name.upper()} = {py(None if own and name in _SCHEDULE_KNOBS else k[name])}"
        comment = _KNOB_COMMENTS.get(name)
        head.append(f"{line}  # {comment}" if comment else line)
    if r.env:
        head.append("ENV = {")
        head += [f"    {py(n)}: {py(str(v))}," for n, v in r.env.items()]
        head.append("}")
    else:
        head.append("ENV: dict = {}  # the recipe sets no environment knobs")
    return "\n".join(head) + "\n" + _PY_BODY + _clipping_code() + _PY_CLIP


def _clipping_code() -> str:
    """The clipping policies' code, as the probe runs it (`autotune.probe.clipping`)."""
    source = inspect.getsource(clipping)
    return "\n\n" + source[source.index(_INLINE_MARK) + len(_INLINE_MARK) :].lstrip("\n")


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
    if SCHEDULE is None:
        raise ValueError("the study measured your script's own schedule: keep it")
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


def make_scheduler(optimizer, total_steps=None):
    """LambdaLR following lr_factor over `total_steps` (default SCHEDULE_STEPS); call .step()
    once after each optimizer step."""
    if total_steps is None:
        total_steps = SCHEDULE_STEPS
    if total_steps is None or total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(min(step, total_steps - 1), total_steps)
    )


def autocast(device_type="cuda"):
    """torch.autocast at the recipe's precision; disabled for fp32."""
    return torch.autocast(
        device_type, dtype=AMP_DTYPE or torch.float32, enabled=AMP_DTYPE is not None
    )


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

_PY_CLIP = '''

_CLIP_KNOBS = ("clip_policy", "clip_norm", "clip_mode", "agc_lambda", "agc_eps", "zclip_z",
               "zclip_alpha", "zclip_warmup", "autoclip_percentile")
_CLIPPER = None


def make_clipper():
    """A fresh clipping policy with the recipe's settings: called with the parameters after
    unscaling, it clips their gradients in place and returns (total norm before clipping,
    per-tensor norms, clipped?). zclip and autoclip keep state: one per training run."""
    return make_clip_policy({name: globals()[name.upper()] for name in _CLIP_KNOBS})


def clip_gradients(params, clipper=None):
    """Clip the (unscaled) gradients of `params` in place by CLIP_POLICY (a stateful policy
    lives in `clipper`, by default this module's own); return the total gradient norm before
    clipping, as a tensor."""
    global _CLIPPER
    params = [p for p in params if p.grad is not None]
    if not params:
        return torch.zeros(())
    if clipper is None:
        if _CLIPPER is None:
            _CLIPPER = make_clipper()
        clipper = _CLIPPER
    return clipper(params)[0]


def clip_and_step(optimizer, scaler=None, params=None, clipper=None):
    """The end of a training step: unscale, clip, step, update the scale, zero the gradients.

    The step goes through an enabled scaler, which skips it when a gradient is inf/NaN; without
    one, a step whose gradient norm is not finite is skipped here. Returns the total gradient
    norm before clipping (a float)."""
    if params is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
    params = list(params)
    if scaler is not None:
        scaler.unscale_(optimizer)
    norm = float(clip_gradients(params, clipper))
    if scaler is not None and scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
    elif math.isfinite(norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def hf_callback():
    """A transformers TrainerCallback that clips by CLIP_POLICY in on_pre_optimizer_step (after
    the Trainer's own clipping, which should then be off: TrainingArguments(max_grad_norm=0.0),
    as the hf export sets for a policy other than a global norm). Unscales the gradients first
    when the Trainer's GradScaler has not."""
    from transformers import TrainerCallback

    class ClipPolicyCallback(TrainerCallback):
        def __init__(self):
            self.clipper = make_clipper()

        def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kw):
            scaler = getattr(optimizer, "scaler", None)
            if scaler is not None and scaler.is_enabled():
                try:
                    scaler.unscale_(optimizer.optimizer)
                except RuntimeError as e:  # already unscaled by the Trainer: fine
                    if "unscale_() has already been called" not in str(e):
                        raise
            clip_gradients(model.parameters(), self.clipper)

    return ClipPolicyCallback()


def lightning_callback():
    """A lightning Callback that clips by CLIP_POLICY in on_before_optimizer_step (gradients
    are unscaled there; Lightning's own clipping, gradient_clip_val, should then be None)."""
    import lightning

    class ClipPolicyCallback(lightning.Callback):
        def __init__(self):
            self.clipper = make_clipper()

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            clip_gradients(pl_module.parameters(), self.clipper)

    return ClipPolicyCallback()
'''
