"""The JSON exports for other trainers: Hugging Face `TrainingArguments` fields (hf) and
`lightning.Trainer` arguments with the optimizer and schedule (lightning), each with `notes` on
what the tool cannot express and how to close the gap (usually: a function of the python export).
"""

from __future__ import annotations

import json
from typing import Any

from autotune.errors import RecipeError
from autotune.recipe.exporters.common import (
    amp_device,
    ddp_is_default,
    env_note,
    hf_trained_note,
    own_schedule,
    own_schedule_note,
    platform,
    scaler_call,
    scaler_is_default,
    scaler_text,
    schedule_formula,
    schedule_note,
    script_applied,
    workload_text,
)
from autotune.recipe.file import Recipe


def render_hf(r: Recipe) -> str:
    k = r.knobs
    notes: list[str] = []
    args: dict[str, Any] = {
        "learning_rate": float(k["lr"]),
        "adam_beta1": float(k["beta1"]),
        "adam_beta2": float(k["beta2"]),
        "adam_epsilon": float(k["adam_eps"]),
        "weight_decay": float(k["weight_decay"]),
        "max_grad_norm": r.global_clip_norm,
    }
    if own_schedule(r):
        notes.append(own_schedule_note(r))
    else:
        args["warmup_steps"] = int(k["warmup_steps"])
        _hf_schedule(r, args, notes)
    note = schedule_note(r, "max_steps (HF schedules the learning rate over it)")
    if note:
        args["max_steps"] = r.schedule_steps
        notes.append(note)
    args["gradient_accumulation_steps"] = r.accum_steps
    args["per_device_train_batch_size"] = int(r.micro_batch)
    args["fp16"] = r.precision == "fp16"
    args["bf16"] = r.precision == "bf16"
    _hf_optim(r, args, notes)
    _hf_differences(r, notes)
    if r.precision == "fp16":
        notes.append(_hf_scaler_note(r))
    if r.world_size > 1 or not ddp_is_default(k):
        _hf_ddp(r, args, notes)
    if r.world_size > 1:
        notes.append(
            f"Launch {r.world_size} processes (torchrun --nproc-per-node {r.world_size}, or "
            "across nodes) for the recipe's effective batch of "
            f"{r.effective_batch} = {r.micro_batch} x {r.accum_steps} x {r.world_size}."
        )
    if r.env:
        notes.append(env_note(r))
    return json.dumps({"training_arguments": args, "notes": notes}, indent=2) + "\n"


def _hf_schedule(r: Recipe, args: dict[str, Any], notes: list[str]) -> None:
    """The HF scheduler type of the recipe's schedule, and a note where it cannot be exact."""
    k = r.knobs
    sched = str(k["schedule"])
    warmup = int(k["warmup_steps"])
    ratio = float(k["min_lr_ratio"])
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


def _hf_optim(r: Recipe, args: dict[str, Any], notes: list[str]) -> None:
    plat = platform(r)
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


def _hf_differences(r: Recipe, notes: list[str]) -> None:
    """Notes on the schedule's timing, weight decay and per-layer clipping under HF: how
    they differ from the probe, which was autotune's functions, the script's own optimizer or
    schedule, or HF's own Trainer (`script_applied`)."""
    k = r.knobs
    sched = str(k["schedule"])
    warmup = int(k["warmup_steps"])
    clip = r.global_clip_norm
    applied = script_applied(r)
    if applied is not None and "hf" in applied:
        notes.append(
            f"The probe was your script's own Hugging Face Trainer ({workload_text(r)}, through "
            "autotune.integrations.hf): these arguments are what it ran with, and HF's own "
            "warm-up and decay timing and its exemption of biases and normalisation weights "
            "from weight decay are what the study measured: nothing to change. With "
            "AUTOTUNE_RECIPE=recipe.yaml the same script applies the recipe through "
            "hf.training_args and hf.attach as in the study."
        )
        return
    if applied is not None and "optimizer" not in applied and "lightning" not in applied:
        notes.append(
            f"Optimizer: the probe was your script ({workload_text(r)}) with its own optimizer "
            "(it did not call recipe.optimizer): its AdamW settings are the recipe's values as "
            "your script applied them; build it the same way under HF."
        )
    elif float(k["weight_decay"]) > 0:
        notes.append(
            "Weight decay: HF's Trainer exempts biases and normalisation weights from weight "
            "decay; the recipe (and its probe) decays every parameter. Trainer(optimizers=("
            "make_optimizer(model.parameters()), scheduler)) with the python export matches it."
        )
    if (warmup > 0 or sched != "constant") and not own_schedule(r):
        notes.append(
            "Schedule timing: HF's warm-up gives optimizer step s (from 0) the rate "
            "peak * s / warmup_steps, the recipe's peak * (s + 1) / warmup_steps (one step "
            "ahead), and HF's decay ends one step after the last step. For the exact schedule "
            "pass the python export's optimizer and scheduler to Trainer(optimizers=(...))."
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
    if r.adaptive_clipping:
        notes.append(
            f"Clipping: the recipe clips by {_policy_text(r)}, which TrainingArguments cannot "
            "express (max_grad_norm is one fixed global norm), so max_grad_norm is 0.0 here. "
            "For the recipe's clipping pass Trainer(..., callbacks=[hf_callback()]) with "
            "hf_callback from the python export: it clips in on_pre_optimizer_step "
            "(transformers >= 4.45, as autotune requires), on unscaled gradients, with the "
            "policy's state kept across steps."
        )


def _policy_text(r: Recipe) -> str:
    """The recipe's adaptive clipping policy and its settings, as a person reads them."""
    k = r.knobs
    policy = k["clip_policy"]
    if policy == "agc":
        return (
            f"agc (adaptive gradient clipping, unit-wise: lambda {k['agc_lambda']!r}, "
            f"eps {k['agc_eps']!r})"
        )
    if policy == "zclip":
        return (
            f"zclip (z {k['zclip_z']!r}, alpha {k['zclip_alpha']!r}, warm-up "
            f"{k['zclip_warmup']!r} steps)"
        )
    return f"autoclip (percentile {k['autoclip_percentile']!r} of the norms seen so far)"


def _hf_scaler_note(r: Recipe) -> str:
    k = r.knobs
    if scaler_is_default(k):
        return (
            "GradScaler: the recipe's settings are PyTorch's defaults, which HF uses: nothing "
            "to do."
        )
    return (
        "GradScaler: HF builds its scaler with PyTorch's defaults (init_scale 65536, "
        "growth_factor 2, backoff_factor 0.5, growth_interval 2000) and TrainingArguments "
        f"cannot change them; the recipe's are {scaler_text(k)}. After creating the "
        "Trainer and before trainer.train(), set trainer.accelerator.scaler = "
        f"{scaler_call(k, amp_device(r))} (or make_scaler('{amp_device(r)}') from the "
        "python export): accelerate "
        "hands that attribute to the optimizer when train() prepares it. It is an "
        "attribute, not a documented option: check it after upgrading."
    )


def _hf_ddp(r: Recipe, args: dict[str, Any], notes: list[str]) -> None:
    """The DDP arguments TrainingArguments has, and notes on the one it lacks."""
    k = r.knobs
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


#: How a Lightning module trains as measured, for a recipe tuned under HF's Trainer.
_LIGHTNING_HF = (
    "lr_schedule's formula and make_scheduler are the recipe's; to train as the study measured, "
    "return from configure_optimizers an AdamW over two parameter groups (weight_decay 0.0 for "
    "biases and normalisation weights) and HF's scheduler, transformers.get_scheduler("
    "lr_scheduler_type, opt, num_warmup_steps=warmup_steps, num_training_steps=max_steps, "
    "scheduler_specific_kwargs=lr_scheduler_kwargs) with the hf export's values ('interval': "
    "'step'), or train under a transformers Trainer with the hf export."
)


def render_lightning(r: Recipe) -> str:
    k = r.knobs
    clip = r.global_clip_norm
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
    total = r.schedule_steps
    if total is not None:
        trainer["max_steps"] = total
    notes: list[str] = [
        own_schedule_note(r)
        if own_schedule(r)
        else "Learning-rate schedule: return it from configure_optimizers as {'optimizer': opt, "
        f"'lr_scheduler': {{'scheduler': make_scheduler(opt, {total or 'total_steps'}), "
        "'interval': 'step'}} "
        "with make_scheduler from the python export (Lightning's default interval is 'epoch'; "
        "with 'step' it steps once per optimizer step, after accumulation)."
    ]
    note = schedule_note(r, "max_steps and the schedule's total_steps")
    if note:
        notes.append(note)
    note = hf_trained_note(r, _LIGHTNING_HF)
    if note:
        notes.append(note)
    notes += _lightning_precision_notes(r, optimizer)
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
    if r.adaptive_clipping:
        notes.append(
            f"Clipping: the recipe clips by {_policy_text(r)}; Lightning's gradient_clip_val "
            "is one fixed norm or value, so it is None here. For the recipe's clipping pass "
            "Trainer(..., callbacks=[lightning_callback()]) with lightning_callback from the "
            "python export: it clips in on_before_optimizer_step (gradients unscaled there), "
            "with the policy's state kept across steps."
        )
    if r.world_size > 1 or not ddp_is_default(k):
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
        notes.append(env_note(r))
    out = {
        "trainer": trainer,
        "optimizer": optimizer,
        "lr_schedule": None
        if own_schedule(r)
        else {
            "warmup_steps": int(k["warmup_steps"]),
            "schedule": str(k["schedule"]),
            "min_lr_ratio": float(k["min_lr_ratio"]),
            "total_steps": total,
            "formula": schedule_formula(k),
        },
        "micro_batch": int(r.micro_batch),
        "notes": notes,
    }
    return json.dumps(out, indent=2) + "\n"


def _lightning_precision_notes(r: Recipe, optimizer: dict[str, Any]) -> list[str]:
    """Notes on the fused optimizer and the GradScaler under Lightning's precision plugins."""
    k = r.knobs
    notes: list[str] = []
    if r.precision == "fp16":
        optimizer["fused"] = False
        notes.append(
            "Optimizer: fused is False because under 16-mixed Lightning refuses to clip "
            "gradients with an optimizer that unscales inside step() (fused AdamW), and skips "
            "unscaling before a custom clip. The update is the same; the probe used fused=True "
            "on a GPU."
        )
        if scaler_is_default(k):
            notes.append(
                "GradScaler: the recipe's settings are PyTorch's defaults, which '16-mixed' uses: "
                "nothing to do."
            )
        else:
            notes.append(
                "GradScaler: '16-mixed' builds torch.amp.GradScaler with PyTorch's defaults; the "
                f"recipe's are {scaler_text(k)}. Drop 'precision' from the Trainer arguments "
                "(Lightning refuses it together with a precision plugin) and pass plugins=["
                f"lightning.pytorch.plugins.precision.MixedPrecision('16-mixed', "
                f"'{amp_device(r)}', scaler={scaler_call(k, amp_device(r))})] "
                f"(make_scaler('{amp_device(r)}') from the python export builds the same scaler)."
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
    return notes
