"""Gradient accumulation in a Hugging Face `Trainer`: each optimizer step's loss (reported) and
gradient (clipped) are the mean over its micro-batches, whatever the model's `forward`.

The Trainer (4.46+) passes `num_items_in_batch` to a model whose `forward` takes `**kwargs` (or
whose class sets `accepts_loss_kwargs`) and then leaves the micro-batch's loss undivided,
trusting the model to have divided its summed loss by the step's item count. A model that takes
`**kwargs` but ignores it (BERT's sequence-classification head, most hand-written modules)
returns its own micro-batch mean, and the step's loss and gradient come out `accum_steps` times
too large. `per_step_mean` turns that path off, so the Trainer divides every micro-batch's loss
by the step's micro-batch count; `AccumulationCheck` measures, on the first optimizer step, the
weight each micro-batch's loss actually had in the gradient (an identity autograd node on the
loss records the gradient reaching it) and the loss the Trainer logged, and stops training with
the cause and the fix when either is not that mean.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

__all__ = ["AccumulationCheck", "AccumulationMismatch", "per_step_mean"]


class AccumulationMismatch(RuntimeError):
    """The Trainer's step loss or gradient is not the mean over the step's micro-batches."""


def per_step_mean(trainer: Trainer) -> None:
    """Make the Trainer divide each micro-batch's loss by the step's micro-batch count and keep
    `num_items_in_batch` from the model (which it may ignore). A `compute_loss_func` is left as
    it is: HF passes it the count and it must divide by it (the check cannot judge it)."""
    if getattr(trainer, "compute_loss_func", None) is None:
        trainer.model_accepts_loss_kwargs = False


class _Tap(torch.autograd.Function):
    """Identity on the loss; its backward records the gradient reaching the loss: the weight of
    this micro-batch's loss in the accumulated gradient (times the GradScaler's scale)."""

    @staticmethod
    def forward(ctx: Any, loss: torch.Tensor, sink: list[torch.Tensor]) -> torch.Tensor:
        ctx.sink = sink
        return loss.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.sink.append(grad.detach().sum())
        return grad, None


class AccumulationCheck(TrainerCallback):
    """On the first optimizer step: each micro-batch's loss entered the gradient with weight
    1/(its step's micro-batches), and the logged loss is their mean; else `AccumulationMismatch`
    (raised out of `trainer.train()`, before the optimizer steps)."""

    def __init__(self, trainer: Trainer, rel: float = 1e-4) -> None:
        self.trainer, self.rel = trainer, rel
        self.losses: list[float] = []  # the first step's micro-batch losses, as compute_loss gave
        self.weights: list[torch.Tensor] = []  # and the gradient that reached each one
        # per compute_loss call: the gradient that reached the model's own loss (its forward's
        # `loss`), whatever compute_loss made of it; [] when none reached it
        self.model_weights: list[list[torch.Tensor]] = []
        self._call: list[torch.Tensor] | None = None  # the call now running's
        self.judged = False
        self.mean: float | None = None  # the first step's mean micro-batch loss, once judged
        self.applies = getattr(trainer, "compute_loss_func", None) is None
        self._inner = trainer.compute_loss
        self._hook: Any = None
        if self.applies:
            trainer.compute_loss = self._compute_loss  # type: ignore[method-assign]
            model = getattr(trainer, "model", None)
            if isinstance(model, torch.nn.Module):
                self._hook = model.register_forward_hook(self._tap_model_loss)

    def _compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        call: list[torch.Tensor] = []
        self._call = None if self.judged else call
        try:
            out = self._inner(model, inputs, *args, **kwargs)
        finally:
            self._call = None
        loss = out[0] if isinstance(out, tuple) else out
        if self.judged or not torch.is_tensor(loss) or not loss.requires_grad:
            return out  # judged already, or an evaluation
        self.losses.append(float(loss.detach().float().mean()))
        self.model_weights.append(call)
        tapped = _Tap.apply(loss, self.weights)
        return (tapped, *out[1:]) if isinstance(out, tuple) else tapped

    def _tap_model_loss(self, module: Any, args: Any, output: Any) -> Any:
        """The model's forward, inside a training compute_loss of the first step: its `loss`
        (a mapping's or a ModelOutput's) tapped, to measure its weight in the gradient
        independently of what compute_loss returns."""
        call = self._call
        if call is None or not isinstance(output, MutableMapping):
            return None
        loss = output.get("loss")
        if not torch.is_tensor(loss) or not loss.requires_grad or loss.numel() != 1:
            return None
        try:
            output["loss"] = _Tap.apply(loss, call)
        except Exception:  # an immutable mapping: not measured
            return None
        return output

    def _judge(self) -> None:
        if self.judged or not self.applies:
            return
        self.judged = True
        self.trainer.compute_loss = self._inner  # type: ignore[method-assign]
        if self._hook is not None:
            self._hook.remove()
        if not self.weights:
            return  # compute_loss was not called for training (an overridden training_step)
        k = len(self.weights)
        scaler = getattr(getattr(self.trainer, "accelerator", None), "scaler", None)
        scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
        got = [float(w) / scale for w in self.weights]
        self.mean = sum(self.losses[:k]) / k
        if all(math.isfinite(w) for w in got) and any(abs(w * k - 1.0) > self.rel for w in got):
            raise AccumulationMismatch(self._message(k, sum(got) / k))
        undone = _undone(self.model_weights[:k], k, scale)
        if undone is not None:
            raise AccumulationMismatch(_undone_message(k, undone))

    def _message(self, k: int, weight: float) -> str:
        import transformers

        t = self.trainer
        passes = bool(getattr(t, "model_accepts_loss_kwargs", False))
        why = (
            f"gradient_accumulation_steps={k}: the Trainer (transformers "
            f"{transformers.__version__}) weighted each micro-batch's loss by {weight:.4g}, not "
            f"1/{k}. "
        )
        if passes:
            why += (
                "Cause: model_accepts_loss_kwargs=True: the Trainer passes num_items_in_batch to "
                "the model (its forward takes **kwargs) and leaves the loss undivided; a model "
                "that ignores it (BERT's classifier, most hand-written modules) returns its "
                f"micro-batch's mean, and the loss reported and the gradient clipped are then "
                f"{weight * k:.4g}x the mean over the step's samples. Fix: set "
                "trainer.model_accepts_loss_kwargs = False after hf.attach (or "
                "accepts_loss_kwargs = False on the model's class), or run with accum_steps=1."
            )
        else:
            why += (
                f"The loss reported and the gradient clipped are {weight * k:.4g}x the mean over "
                "the step's samples. Cause: loss_is_scaled_for_ga="
                f"{getattr(t, 'loss_is_scaled_for_ga', None)}, or an overridden training_step/"
                "compute_loss. Fix: have compute_loss return the micro-batch's mean loss and let "
                "the Trainer divide it by the micro-batches (loss_is_scaled_for_ga unset), or run "
                "with accum_steps=1."
            )
        return "autotune.integrations.hf: " + why

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._judge()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._judge()  # a Trainer without on_pre_optimizer_step

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        if self.mean is None or not logs or "loss" not in logs:
            return
        mean, self.mean = self.mean, None  # the first step's log only
        got = float(logs["loss"])
        if math.isfinite(got) and math.isfinite(mean) and abs(got - mean) > self.rel * abs(mean):
            raise AccumulationMismatch(
                f"autotune.integrations.hf: the Trainer logged step 0's loss as {got:.6g}, the "
                f"mean of its micro-batches' losses is {mean:.6g}: it does not report the loss it "
                "trains on. Fix: log the mean of the step's micro-batch losses "
                "(logging_steps=1, as hf.training_args sets)."
            )


# How close the model's loss's weight must come to 1 (not 1/k) to be called undone.
UNDONE_REL = 1e-3


def _undone(calls: list[list[torch.Tensor]], k: int, scale: float) -> float | None:
    """The weight the model's own loss had in the gradient when compute_loss multiplied it by
    the micro-batch count (`* gradient_accumulation_steps`: the sum, not the mean, of the
    step's losses), which the Trainer's division by k then undoes: 1, not 1/k. None when it
    was not undone, or not measured (no accumulation, a compute_loss that computes its own
    loss from the logits). Another factor is the user's weighting, and is left alone."""
    if k < 2 or not calls or any(not c for c in calls):
        return None
    got = [sum(float(w) for w in c) / scale for c in calls]
    if not all(math.isfinite(w) for w in got):
        return None
    if all(abs(w - 1.0) <= UNDONE_REL for w in got):
        return sum(got) / len(got)
    return None


def _undone_message(k: int, weight: float) -> str:
    return (
        f"autotune.integrations.hf: gradient_accumulation_steps={k}: the model's own loss "
        f"entered the gradient with weight {weight:.4g} per micro-batch, not 1/{k}: "
        f"compute_loss returned it multiplied by {k} (the micro-batch count), which undoes "
        "the Trainer's division by the micro-batches. The loss reported and the gradient "
        f"clipped are {k}x the mean over the step's samples. Cause: an overridden "
        "compute_loss/training_step that scales the loss by gradient_accumulation_steps. Fix: "
        "have compute_loss return the micro-batch's mean loss (the Trainer divides it by the "
        "micro-batches), or run with accum_steps=1."
    )
