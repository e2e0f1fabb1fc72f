"""Hugging Face `transformers.Trainer` in an autotune trial.

    trial = autotune.trial(steps=200, micro_batch=16)
    args = hf.training_args(trial, output_dir="out")   # the trial's knobs + your other arguments
    trainer = Trainer(model=model, args=args, train_dataset=ds)
    hf.attach(trainer, trial)                           # reports; stop at trial.steps/divergence
    trainer.train()

What the Trainer cannot express of a recipe (the trials of one study all share it, so the ranking
holds, and a recipe applied back the same way reproduces the trial): HF's warm-up starts from 0
at step 0 (the probe's from 1/warmup), its linear decay ends at 0 (not at `min_lr_ratio`), it
exempts biases and norms from weight decay, and it does not step the scheduler on a step the
GradScaler skipped; per-layer clipping and the agc, zclip and autoclip policies are done by the
callback (HF clips one global norm only, max_grad_norm is then 0); fp16 on
a CPU is refused (accelerate would silently train in fp32).

In a study with rungs a promoted probe continues its shorter probe through the Trainer's own
checkpointing: after the trial's last step the callback has the Trainer save a checkpoint
(model, optimizer, scheduler, scaler, RNGs, trainer state) into the trial's state folder, and
`attach` makes `trainer.train()` resume from the shorter probe's (the Trainer skips the batches
already trained on); see `autotune.probe.script_state`.

Under gradient accumulation `attach` makes the step's reported loss and clipped gradient the mean
of its micro-batches' losses whatever the model's `forward` (`hf_accum`), and checks it on the
first step.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from transformers import Trainer, TrainerCallback, TrainingArguments

from autotune.integrations.hf_accum import AccumulationCheck, per_step_mean
from autotune.probe import apply_clipping
from autotune.probe.script import mark_applied
from autotune.probe.script_run import scratch_folder
from autotune.recipe import Recipe
from autotune.recipe.trial import Diverged, Trial

__all__ = ["Callback", "RecipeClipping", "attach", "recipe_fields", "training_args"]


def recipe_fields(recipe: Recipe, *, cpu: bool) -> dict[str, Any]:
    """The TrainingArguments a recipe owns."""
    k = recipe.knobs
    warmup, ratio, sched = int(k["warmup_steps"]), float(k["min_lr_ratio"]), str(k["schedule"])
    by_callback = recipe.callback_clipping
    out: dict[str, Any] = {
        "learning_rate": float(k["lr"]),
        "adam_beta1": float(k["beta1"]),
        "adam_beta2": float(k["beta2"]),
        "adam_epsilon": float(k["adam_eps"]),
        "weight_decay": float(k["weight_decay"]),
        "max_grad_norm": 0.0 if by_callback else recipe.global_clip_norm,
        "warmup_steps": warmup,
        "gradient_accumulation_steps": recipe.accum_steps,
        "per_device_train_batch_size": int(recipe.micro_batch),
        "fp16": recipe.precision == "fp16",
        "bf16": recipe.precision == "bf16",
        "optim": "adamw_torch" if cpu else "adamw_torch_fused",
    }
    if sched == "constant":
        out["lr_scheduler_type"] = "constant_with_warmup" if warmup else "constant"
    elif sched == "cosine" and ratio > 0:
        out["lr_scheduler_type"] = "cosine_with_min_lr"
        out["lr_scheduler_kwargs"] = {"min_lr_rate": ratio}
    else:
        out["lr_scheduler_type"] = sched
    return out


def _unscale(optimizer: Any) -> None:
    """Unscale the gradients through the Trainer's GradScaler (fp16) unless it has already:
    transformers measures the gradient norm through accelerate, which unscales, before the
    callback's hook in recent versions, not in older ones."""
    scaler = getattr(optimizer, "scaler", None)
    if scaler is None or not scaler.is_enabled():
        return
    try:
        scaler.unscale_(optimizer.optimizer)
    except RuntimeError as e:
        if "unscale_() has already been called" not in str(e):
            raise


def _refuse_clipping(recipe: Recipe) -> None:
    """A recipe's clipping that TrainingArguments cannot express, refused naming its knob."""
    key = "clip_mode: per_layer"
    if recipe.adaptive_clipping:
        key = f"clip_policy: {recipe.knobs.get('clip_policy')}"
    raise ValueError(
        f"training_args: the recipe clips by {key}, which TrainingArguments cannot express "
        "(max_grad_norm is one global norm): add `callbacks=[hf.RecipeClipping(recipe)]` to the "
        "Trainer and pass clipped_by_callback=True here, or run the script under autotune.trial()"
    )


# What the callback needs to see every step: a NaN loss must not be replaced by a running mean.
_OBSERVE = {"logging_strategy": "steps", "logging_steps": 1, "logging_nan_inf_filter": False}


def training_args(trial_or_recipe: Trial | Recipe, **user: Any) -> TrainingArguments:
    """`TrainingArguments` with the trial's (or the recipe's) knobs, steps and seed, and the
    user's other arguments; a user argument the trial owns is refused, naming it. Given a
    recipe, `max_steps` is its schedule's length and `seed` its probe's, as the study measured
    them, unless the user passes their own (`max_steps=-1` trains by `num_train_epochs`)."""
    trial = trial_or_recipe if isinstance(trial_or_recipe, Trial) else None
    recipe = trial.recipe if trial is not None else trial_or_recipe
    assert isinstance(recipe, Recipe)
    cpu = trial is None or trial.device.type == "cpu"
    if recipe.precision == "fp16" and (cpu if trial is not None else _on_cpu(user)):
        raise ValueError(
            "training_args: fp16 on a CPU: the Trainer would train without a GradScaler (the "
            "recipe's scaler knobs lost); train on a GPU, or export a bf16 or fp32 recipe"
        )
    by_callback = bool(user.pop("clipped_by_callback", False))
    if trial is None and recipe.callback_clipping and not by_callback:
        _refuse_clipping(recipe)
    owned = recipe_fields(recipe, cpu=cpu)
    if trial is not None:
        mark_applied("hf")  # the Trainer applies the knobs: its schedule, its weight decay
        trial.uses("hf")  # a script that then never reports is told to call `attach`
        # The Trainer schedules over max_steps: the trial's schedule_steps (in a study the
        # target's length); the callback of `attach` stops it at the trial's steps.
        owned.update(max_steps=trial.schedule_steps, seed=trial.seed, data_seed=trial.seed)
        owned.update(use_cpu=cpu)
        owned.update(_OBSERVE)
    else:
        _recipe_run(recipe, user)
    for name in owned:
        if name in user:
            raise ValueError(f"training_args: {name} is the trial's: remove it")
    if trial is not None and trial.in_study:
        _check_reporters(user.get("report_to", "none"))
        user.setdefault("report_to", "none")  # one MLflow writer: autotune's
        user.setdefault("save_strategy", "no")
        user.setdefault("disable_tqdm", True)
        # a folder of the trial's own (trials beside each other must not share one), removed
        # when the script ends: a study leaves no folder per trial in the temporary directory
        if "output_dir" not in user:
            user["output_dir"] = scratch_folder("autotune-hf-")
    return TrainingArguments(**user, **owned)


def _recipe_run(recipe: Recipe, user: dict[str, Any]) -> None:
    """A recipe's own run defaults to the run its study measured: HF schedules the learning
    rate over `max_steps`, so without it the warm-up and decay would stretch over the epochs'
    length (and HF's default seed is 42, not the probe's). The user's own values win: a
    longer run is theirs to choose."""
    if recipe.schedule_steps is not None:
        user.setdefault("max_steps", recipe.schedule_steps)
    seed = (recipe.probe or {}).get("seed")
    if seed is not None:
        user.setdefault("seed", int(seed))


def _check_reporters(report_to: Any) -> None:
    """A study's trial refuses `report_to` naming mlflow (or "all", which includes it): the
    study records every trial itself, one MLflow writer, and the Trainer's MLflowCallback would
    log into MLflow's default store, the study's own `mlflow.db` beside the script, its logging
    timed as the trial's steps (about 10x slower). Other reporters are allowed with a warning:
    their logging is timed too."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [str(n).strip().lower() for n in names if str(n).strip().lower() != "none"]
    if "mlflow" in names or "all" in names:
        raise ValueError(
            f"training_args: report_to={report_to!r} in a study: the study records every "
            "trial in MLflow itself (one writer); the Trainer's MLflowCallback would log into "
            "the study's own store and be timed as training: leave report_to out, or 'none'"
        )
    if names:
        print(
            f"autotune: warning: training_args: report_to={report_to!r} in a study: the "
            "reporters' logging is timed as part of the trial's steps (leave report_to out, "
            "or 'none', to measure the training alone)",
            file=sys.stderr,
        )


def _on_cpu(user: dict[str, Any]) -> bool:
    """Whether a Trainer given these arguments trains on the CPU: asked to, or no GPU here."""
    import torch

    return bool(user.get("use_cpu")) or not torch.cuda.is_available()


class RecipeClipping(TrainerCallback):
    """A recipe's per-layer or adaptive clipping in a Trainer of your own, as the probe applies
    it (on unscaled gradients before each optimizer step, the policy's state kept across
    steps): `Trainer(..., callbacks=[hf.RecipeClipping(recipe)])`. With a trial, `attach`'s
    callback clips through one of these."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.clipper: Any = None

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.clip(kw.get("model"), kw.get("optimizer"))

    def clip(self, model: Any, optimizer: Any) -> Any:
        """Clip `model`'s gradients by the recipe's policy where the Trainer cannot; whether it
        fired (None: nothing clipped here)."""
        if not self.recipe.callback_clipping or model is None:
            return None
        _unscale(optimizer)
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return None
        if self.clipper is None:
            self.clipper = self.recipe.clip_policy()
        return apply_clipping(self.clipper, params)[2]


class Callback(TrainerCallback):
    """Reports each optimizer step's loss and gradient norm; stops the Trainer on divergence
    and after the trial's steps."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.clipping = RecipeClipping(trial.recipe)  # where the Trainer cannot clip
        self._clipped: Any = None  # whether the callback's clipping fired this step
        # while the Trainer saves the state: (the user's output_dir, a private one, the
        # trial's state folder it is moved to)
        self._staging: tuple[str, str, str] | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        for name, want in _OBSERVE.items():
            got = getattr(args, name)
            if str(got).split(".")[-1].lower() != str(want).lower():
                raise ValueError(f"autotune needs TrainingArguments({name}={want!r}), got {got!r}")
        inherited = self.trial.inherited_grad_norms()
        if inherited and self.trial.recipe.callback_clipping:  # a continued run: the policy's
            self.clipping.clipper = self.trial.recipe.clip_policy()  # state, as the run had it
            self.clipping.clipper.replay(inherited)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        """Clip by the recipe's policy where the Trainer cannot (per-layer, agc, zclip,
        autoclip), on unscaled gradients, the policy's state kept across steps."""
        self._clipped = self.clipping.clip(kw.get("model"), kw.get("optimizer"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step >= self.trial.steps:  # max_steps is the schedule's length
            control.should_training_stop = True
            into = self.trial.framework_save_dir
            if into is not None and self._staging is None:
                # The Trainer's checkpoint, written in a folder of this process's own (trials
                # running beside each other share the user's output_dir), moved in `on_save`.
                staging = tempfile.mkdtemp(prefix="autotune-hf-state-")
                self._staging = (args.output_dir, staging, into)
                args.output_dir = staging
                control.should_save = True

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._staging is None:
            return
        (args.output_dir, staging, into), self._staging = self._staging, None
        written = os.path.join(staging, f"checkpoint-{state.global_step}")
        try:
            if os.path.isdir(written):
                shutil.rmtree(into, ignore_errors=True)
                os.makedirs(os.path.dirname(into) or ".", exist_ok=True)
                shutil.move(written, into)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if not logs or "loss" not in logs:
            return  # the final train_runtime log
        clipped, self._clipped = self._clipped, None  # None: the Trainer's global norm clipped
        try:
            self.trial.report(
                state.global_step - 1,
                loss=float(logs["loss"]),
                grad_norm=logs.get("grad_norm"),
                lr=logs.get("learning_rate"),
                clipped=clipped,
            )
        except Diverged:
            control.should_training_stop = True


def attach(trainer: Trainer, trial: Trial) -> Trainer:
    """Add the reporting callback, make each step's loss and gradient the mean of its
    micro-batches' losses (the Trainer divides them; the model gets no `num_items_in_batch`),
    checked on the first step, and give the Trainer's GradScaler (fp16 on a GPU) the trial's
    scaler knobs. Call after `Trainer(...)`, before `train()`."""
    mark_applied("hf")
    trial.uses("hf", attached=True)
    per_step_mean(trainer)
    trainer.add_callback(AccumulationCheck(trainer))
    trainer.add_callback(Callback(trial))
    trainer.train = _continuing(trainer.train, trainer, trial)  # type: ignore[method-assign]
    acc = getattr(trainer, "accelerator", None)
    if acc is not None and getattr(acc, "scaler", None) is not None:
        acc.scaler = trial.recipe.scaler(trial.device.type)
    return trainer


def _continuing(train: Callable[..., Any], trainer: Trainer, trial: Trial) -> Callable[..., Any]:
    """`trainer.train` that continues a shorter probe's checkpoint when the trial has one
    (`Trial.continue_framework`; the callback saves the trial's own after its last step); a
    `resume_from_checkpoint` the user gives is theirs."""

    def train_continuing(*args: Any, **kwargs: Any) -> Any:
        _done, resume = trial.continue_framework("hf", trainer.model)
        if resume is not None and not args and kwargs.get("resume_from_checkpoint") is None:
            kwargs["resume_from_checkpoint"] = resume
        return train(*args, **kwargs)

    return train_continuing
