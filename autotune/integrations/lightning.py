"""Lightning (`lightning.pytorch.Trainer`) in an autotune trial.

    trial = autotune.trial(steps=200, micro_batch=16)

    class Module(lightning.LightningModule):
        def configure_optimizers(self):
            return lt.configure_optimizers(trial, self.parameters())

    model = Module()
    trainer = lightning.Trainer(**lt.trainer_kwargs(trial))
    trainer.fit(model, loader, ckpt_path=lt.ckpt_path(trial, model))

`trainer_kwargs` gives the Trainer the trial's steps, accumulation, clipping and precision (fp16
through a `MixedPrecision` plugin whose GradScaler has the scaler knobs) and the `Callback` that
reports each optimizer step's loss (the sum of its micro-batches' `outputs["loss"]`, which
Lightning divides by the accumulation) and gradient norm (unscaled, before clipping), and stops the
Trainer on divergence. A batch skipped by `training_step` returning None is not reported (it has
no loss, no gradient, no update); Lightning counts it in `global_step`, so the Trainer's
`max_steps` grows by one for each, and the trial still gets its `trial.steps` reports.

`ckpt_path(trial, model)` is the state hook through Lightning's own checkpointing: in a study with
rungs the callback saves a checkpoint (`Trainer.save_checkpoint`: model, optimizers, schedulers,
precision plugin, loop progress) after the trial's last step, and a promoted probe's `fit`
resumes from its shorter probe's; without it a promoted probe restarts from step 0 (its summary
says so). Lightning restores no RNG state, and the data's position only of a DataLoader with
`state_dict`/`load_state_dict` (e.g. torchdata's `StatefulDataLoader`): with a plain one a
resumed fit draws its data (and dropout) afresh from where the script seeded them.

What Lightning cannot express of a recipe, and what is done instead: per-layer clipping and the
agc, zclip and autoclip policies (the callback clips by the recipe's policy in
`on_before_optimizer_step`; Lightning's own clipping is off); a
fused AdamW under fp16 (Lightning refuses to clip with an optimizer that unscales itself:
`configure_optimizers` builds the unfused one there); `min_steps`/`min_epochs` (they would
override the stop on divergence: refused); more than one device (a script trial runs on one).

What a trial refuses because it would not run as recorded: manual optimization
(`automatic_optimization = False`: Lightning steps no scheduler and refuses the trial's clipping
and accumulation itself), an accumulation a callback changes (`GradientAccumulationScheduler`,
checked before every step), and a fit that ends before the trial's steps (named by what ended
it: the probe's own failure could only advise a plain loop).
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import (
    Checkpoint,
    GradientAccumulationScheduler,
    ModelSummary,
    ProgressBar,
)
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from autotune.probe import apply_clipping, clip_gradients
from autotune.probe.script import current, mark_applied
from autotune.probe.script_errors import BadReport
from autotune.probe.script_run import scratch_folder
from autotune.probe.steps import build_optimizer
from autotune.recipe import Recipe
from autotune.recipe.trial import Diverged, Trial

__all__ = ["Callback", "ckpt_path", "configure_optimizers", "trainer_kwargs"]
CKPT = "lightning.ckpt"  # the checkpoint's file in the trial's state folder

_PRECISION = {"fp32": "32-true", "bf16": "bf16-mixed"}  # fp16: a MixedPrecision plugin
_REFUSED = {
    "min_steps": "it would override the stop on divergence",
    "min_epochs": "it would override the stop on divergence",
}
_IN_STUDY = {  # a trial writes nothing of its own and prints no bars
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


def _split(trial_or_recipe: Trial | Recipe) -> tuple[Trial | None, Recipe]:
    if isinstance(trial_or_recipe, Trial):
        return trial_or_recipe, trial_or_recipe.recipe
    if isinstance(trial_or_recipe, Recipe):
        return None, trial_or_recipe
    raise TypeError(f"expected an autotune Trial or Recipe, got {type(trial_or_recipe).__name__}")


def _device_type(trial: Trial | None, user: dict[str, Any]) -> str:
    if trial is not None:
        return trial.device.type
    acc = user.get("accelerator", "auto")
    if acc in ("auto", "gpu"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(acc)


def recipe_kwargs(recipe: Recipe, device_type: str) -> dict[str, Any]:
    """The Trainer arguments a recipe owns."""
    k = recipe.knobs
    clip = recipe.global_clip_norm
    global_clip = k["clip_mode"] != "per_layer" and clip > 0
    out: dict[str, Any] = {
        "accumulate_grad_batches": recipe.accum_steps,
        "gradient_clip_val": clip if global_clip else None,
        "gradient_clip_algorithm": "norm" if global_clip else None,
    }
    if recipe.precision == "fp16":
        scaler = recipe.scaler(device_type)  # the four scaler knobs; enabled under fp16
        out["plugins"] = [MixedPrecision("16-mixed", device_type, scaler=scaler)]
    else:
        out["precision"] = _PRECISION[recipe.precision]
    return out


def trainer_kwargs(trial_or_recipe: Trial | Recipe, **user: Any) -> dict[str, Any]:
    """Keyword arguments for `lightning.Trainer`: the trial's (or the recipe's) knobs, steps
    and device, the reporting `Callback` (with a trial), and the user's other arguments. A user
    argument the trial owns is refused, naming it. Given a recipe, `max_steps` is its
    schedule's length, the run its study measured (without it Lightning trains 1000 epochs),
    unless the user passes their own; the Trainer takes no seed: call
    `lightning.seed_everything(recipe.probe["seed"])` for the probe's."""
    trial, recipe = _split(trial_or_recipe)
    whose = "the trial's" if trial is not None else "the recipe's"
    for name, why in _REFUSED.items():
        if name in user:
            raise ValueError(f"trainer_kwargs: {name}: {why}; remove it")
    callbacks = list(user.pop("callbacks", None) or [])
    for cb in callbacks:
        if isinstance(cb, GradientAccumulationScheduler):
            raise ValueError(
                f"trainer_kwargs: callbacks: {type(cb).__name__} changes "
                f"accumulate_grad_batches, which is {whose} (accum_steps="
                f"{recipe.accum_steps}): remove it (search accum_steps instead)"
            )
    dev = _device_type(trial, user)
    owned = recipe_kwargs(recipe, dev)
    if trial is not None:
        mark_applied("lightning")
        trial.uses("lightning", attached=True)  # its Callback reports
        owned.update(max_steps=trial.steps, accelerator=dev, devices=1)
    elif recipe.schedule_steps is not None:
        user.setdefault("max_steps", recipe.schedule_steps)  # the length its study measured
    plugins = list(user.pop("plugins", None) or [])
    if "plugins" in owned and any(isinstance(p, Precision) for p in plugins):
        raise ValueError(f"trainer_kwargs: plugins: the precision plugin is {whose} (fp16)")
    for name in {*owned, "precision"}:
        if name in user:
            raise ValueError(f"trainer_kwargs: {name} is {whose}: remove it")
    owned["plugins"] = [*plugins, *owned.get("plugins", [])] or None
    if trial is None and recipe.callback_clipping:
        callbacks.append(RecipeClipping(recipe))  # what gradient_clip_val cannot say
    if trial is not None:
        callbacks.append(Callback(trial))
        if trial.in_study:
            for name, value in _IN_STUDY.items():
                user.setdefault(name, value)
            if "default_root_dir" not in user:  # the trial's own, removed when the script ends
                user["default_root_dir"] = scratch_folder("autotune-lightning-")
    return {**user, **owned, "callbacks": callbacks}


class RecipeClipping(pl.Callback):
    """A recipe's per-layer or adaptive clipping, applied as the probe applies it: on the
    unscaled gradients before each optimizer step, the policy's state kept across steps
    (`trainer_kwargs` adds it for a recipe that clips so; with a trial, `Callback` does it)."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self._clipper: Any = None

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        params = [p for p in pl_module.parameters() if p.grad is not None]
        if params:
            if self._clipper is None:
                self._clipper = self.recipe.clip_policy()
            apply_clipping(self._clipper, params)


def configure_optimizers(
    trial_or_recipe: Trial | Recipe, params: Any, total_steps: int | None = None
) -> dict[str, Any]:
    """What `LightningModule.configure_optimizers` returns: the recipe's AdamW and its warm-up
    and decay stepped after every optimizer step (as the probe ran them). `total_steps`:
    the schedule's length, by default the trial's `schedule_steps` (in a study the target's
    length, while the Trainer stops at the trial's steps) or the recipe's (the length its
    study scheduled over)."""
    trial, recipe = _split(trial_or_recipe)
    own = trial.schedule_steps if trial is not None else recipe.schedule_steps
    steps = total_steps or own
    if not steps:
        raise ValueError("configure_optimizers: give total_steps (the schedule's length)")
    plist = list(params)
    if recipe.precision == "fp16":  # Lightning clips only with an optimizer it unscales
        opt = build_optimizer(plist, recipe.knobs, torch.device("cpu"))
        mark_applied("optimizer", opt)
    else:
        opt = recipe.optimizer(plist)
    sched = recipe.scheduler(opt, int(steps))
    if trial is not None:
        _watch_reporting(trial, opt)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


FORGOT = (
    "the script called autotune.trial() but never trial.report(step, loss=...): with "
    "Lightning, build the Trainer as lightning.Trainer(**autotune.integrations.lightning."
    "trainer_kwargs(trial, ...)): its callback reports each step (and applies the trial's "
    "steps, accumulation, clipping and precision)"
)


def _watch_reporting(trial: Trial, optimizer: torch.optim.Optimizer) -> None:
    """In a study, stop a fit whose Trainer was built without `trainer_kwargs` (nothing
    reports) at its second optimizer step with the Lightning advice (`no_reports`), instead of
    the generic one at the end of the fit; a script that reports itself goes on."""
    if not trial.reporting_forgotten():
        return
    from autotune.probe.script_errors import ScriptFailure

    steps = [0]

    def check(_opt: Any, _args: Any, _kwargs: Any) -> None:
        steps[0] += 1
        if steps[0] < 2:
            return
        handle.remove()
        if trial.reporting_forgotten():
            raise ScriptFailure("no_reports", FORGOT)

    handle = optimizer.register_step_pre_hook(check)


def ckpt_path(trial: Trial, model: pl.LightningModule) -> str | None:
    """`Trainer.fit(..., ckpt_path=...)`: the shorter probe's checkpoint a promoted probe
    continues (None: from step 0, e.g. at the screen or outside a study). Call it once, with
    the module being fit, just before `fit`."""
    _done, folder = trial.continue_framework("lightning", model)
    return None if folder is None else os.path.join(folder, CKPT)


class Callback(pl.Callback):
    """Reports each optimizer step's loss and gradient norm; stops the Trainer on divergence."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self._loss: torch.Tensor | float = 0.0
        self._norm: torch.Tensor | None = None
        self._lr: float | None = None
        self._clipped: torch.Tensor | None = None
        self._scale: torch.Tensor | None = None
        self._step_before = 0
        self._had_loss = False  # a micro-batch of this optimizer step returned a loss
        self._next = 0  # the step the next report is of (after a continued fit's inherited)
        self._clipper: Any = None  # the recipe's clipping policy, when it clips here
        self._started = False  # on_fit_start ran: Lightning's own checks passed

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        """Under manual optimization Lightning refuses the trial's clipping or accumulation
        (a MisconfigurationException) before any other hook of this callback runs, with advice
        ("remove gradient_clip_val") the user cannot follow: those arguments are the trial's.
        The trial's refusal instead; nothing of the fit is set up yet, so nothing is left
        undone by raising here."""
        lightning_refused = isinstance(exception, MisconfigurationException)
        if lightning_refused and not self._started and _manual(pl_module):
            raise BadReport(MANUAL) from exception

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = True
        if _manual(pl_module):
            raise BadReport(MANUAL)
        check_accumulation(trainer, self.trial.recipe.accum_steps)
        for name, why in _REFUSED.items():
            if getattr(trainer.fit_loop, name, None) not in (None, -1, 0):
                raise ValueError(f"autotune: Trainer({name}=...): {why}")
        inherited = self.trial.inherited_grad_norms()
        if inherited:  # a continued fit: the clipping policy's state, as the run had it
            self._clipper = self.trial.recipe.clip_policy()
            self._clipper.replay(inherited)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        inherited = self.trial.inherited_grad_norms()
        self._next = len(inherited)
        # a continued fit's restored global_step counts the batches its shorter probe skipped
        # (not reported): the Trainer runs as many more, as that probe did
        _run_longer(trainer, trainer.global_step - self._next)
        if inherited and warn_if_data_restarts(trainer):  # continued
            self.trial.note_continuation(
                "the training DataLoader has no state_dict: its batches were drawn afresh, not "
                "those the run from step 0 would see next"
            )

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._step_before = trainer.global_step
        check_accumulation(trainer, self.trial.recipe.accum_steps)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A fit that ended before the trial's steps, unasked, fails here naming what ended
        it (the probe's own failure would advise a plain loop)."""
        session = current()  # the study's (or `autotune probe`'s) session; None standalone
        if session is not None and session.ended_early():  # its last steps judged first
            raise BadReport(ended_short(trainer, self._next, self.trial.steps))

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        """The gradients here are unscaled and not yet clipped (Lightning clips after)."""
        params = [p for p in pl_module.parameters() if p.grad is not None]
        recipe = self.trial.recipe
        limit = recipe.global_clip_norm
        by_lightning = recipe.knobs["clip_mode"] != "per_layer" and limit > 0
        if not params:
            self._norm = self._clipped = None
        elif by_lightning:  # Lightning clips next, by the same rule as the probe
            self._norm, _, _ = clip_gradients(params, 0.0, False)
            self._clipped = self._norm > limit
        else:  # per-layer, agc, zclip, autoclip (or none): clipped here, by the policy
            if self._clipper is None:
                self._clipper = recipe.clip_policy()
            self._norm, _, self._clipped = apply_clipping(self._clipper, params)
        self._lr = float(optimizer.param_groups[0]["lr"])
        self._scale = _scale_of(trainer)  # before the step and the update, as the probe

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._loss = self._loss + loss.detach()
            self._had_loss = True
        if trainer.global_step == self._step_before:
            return  # a micro-batch of an accumulating step
        loss, self._loss = self._loss, 0.0
        if not self._had_loss:
            # every micro-batch returned None (Lightning's skip): no loss, no gradient, no
            # update, yet Lightning counts a step. Not reported (a loss of 0 and a NaN norm
            # would read as a divergence), and the Trainer runs one more batch, so the trial
            # still reports its trial.steps optimizer steps.
            _run_longer(trainer, 1)
            return
        self._had_loss = False
        step, self._next = self._next, self._next + 1
        try:
            self.trial.report(
                step,
                loss=loss,
                grad_norm=self._norm,
                lr=self._lr,
                scale=self._scale,
                clipped=self._clipped,
            )
        except Diverged:
            trainer.should_stop = True
            return
        folder = self.trial.framework_save_dir
        if folder is not None and self._next >= self.trial.steps:
            os.makedirs(folder, exist_ok=True)
            trainer.save_checkpoint(os.path.join(folder, CKPT))


MANUAL = (  # short enough for a study's one-line failure (about 300 characters)
    "autotune.integrations.lightning: manual optimization (automatic_optimization = False) "
    "cannot run a trial: Lightning then steps no learning-rate schedule and applies no "
    "clipping or accumulation, so the trial's knobs would not apply. Use automatic "
    "optimization, or a plain loop with trial.recipe"
)


def _manual(pl_module: Any) -> bool:
    return pl_module is not None and not getattr(pl_module, "automatic_optimization", True)


def check_accumulation(trainer: pl.Trainer, accum: int) -> None:
    """Accumulation is the trial's (`accum_steps`, recorded with its samples and throughput):
    a `GradientAccumulationScheduler` among the Trainer's callbacks (one from the module's
    `configure_callbacks`: `trainer_kwargs` refuses the user's) or an `accumulate_grad_batches`
    changed since is refused, before the step it would change."""
    schedulers = [
        type(c).__name__
        for c in _callbacks(trainer)
        if isinstance(c, GradientAccumulationScheduler)
    ]
    got = trainer.accumulate_grad_batches
    if not schedulers and got == accum:
        return
    what = (
        f"{', '.join(schedulers)} changes accumulate_grad_batches during the fit"
        if schedulers
        else f"accumulate_grad_batches became {got} at step {trainer.global_step} (a callback "
        "or the LightningModule changed it)"
    )
    raise BadReport(
        f"autotune.integrations.lightning: {what}, but accumulation is the trial's "
        f"(accum_steps={accum}): remove what changes it (search accum_steps instead). Else "
        "the trial's steps take other micro-batches than it records: its samples, throughput "
        "and loss credited to a configuration that did not run"
    )


def _callbacks(trainer: pl.Trainer) -> list[Any]:
    return list(getattr(trainer, "callbacks", []))  # set by Lightning's connector, untyped


def ended_short(trainer: pl.Trainer, reports: int, planned: int) -> str:
    """Why a fit ended after `reports` of its `planned` steps, unasked, and what to do."""
    loop = trainer.fit_loop
    epochs = loop.max_epochs
    if trainer.should_stop:
        own = (Callback, Checkpoint, ModelSummary, ProgressBar)
        names = [type(c).__name__ for c in _callbacks(trainer) if not isinstance(c, own)]
        by = (
            f"a callback ({', '.join(names)}) or the LightningModule"
            if names
            else "the LightningModule"
        )
        why = f"trainer.should_stop was set by {by}; remove what stops the fit early"
    elif epochs is not None and 0 <= epochs <= trainer.current_epoch:
        why = (
            f"max_epochs={epochs} ended it, at {trainer.num_training_batches} batches an "
            "epoch (the data's length); leave max_epochs out (max_steps=trial.steps ends the "
            "fit, the data gone over again) or give it more data"
        )
    else:
        why = "Lightning ended the fit before max_steps; let max_steps=trial.steps end it"
    return (
        f"autotune.integrations.lightning: the Trainer ended after {reports} of {planned} "
        f"steps without being asked (no divergence): {why}. A probe is judged at its planned "
        "length"
    )


def _run_longer(trainer: pl.Trainer, batches: int) -> None:
    """Let the Trainer run `batches` more steps than `max_steps` said: steps it counts that
    are not reported (skipped batches)."""
    if batches > 0 and trainer.fit_loop.epoch_loop.max_steps >= 0:
        trainer.fit_loop.epoch_loop.max_steps += batches


def warn_if_data_restarts(trainer: pl.Trainer) -> bool:
    """A continued fit whose training DataLoader cannot be put at its position (no
    `state_dict`/`load_state_dict`, e.g. a plain `torch.utils.data.DataLoader`): say on stderr
    (the trial's log) that its batches are drawn afresh. Whether it said so."""
    import sys

    loaders = trainer.train_dataloader
    found = loaders if isinstance(loaders, (list, tuple)) else [loaders]
    if isinstance(loaders, dict):
        found = list(loaders.values())
    plain = [
        type(d).__name__
        for d in found
        if d is not None and not (hasattr(d, "state_dict") and hasattr(d, "load_state_dict"))
    ]
    if not plain:
        return False
    print(
        f"autotune: warning: this fit continues a shorter probe's checkpoint, but its "
        f"{plain[0]} has no state_dict/load_state_dict: Lightning cannot put it at its "
        "position, so the batches are drawn afresh from where the script seeded them, not "
        "those the run from step 0 would see next (use a stateful loader such as torchdata's "
        "StatefulDataLoader, or rungs.continuation: false)",
        file=sys.stderr,
    )
    return True


def _scale_of(trainer: pl.Trainer) -> torch.Tensor | None:
    """The fp16 GradScaler's scale as a tensor (no host sync); None without one."""
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    scale = getattr(scaler, "_scale", None)
    if scaler is None or scale is None or not scaler.is_enabled():
        return None
    return scale.detach().clone()
