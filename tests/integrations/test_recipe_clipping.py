"""A recipe applied to a Trainer of your own keeps its clipping: per-layer norms and adaptive
policies, which `max_grad_norm` / `gradient_clip_val` cannot express, are applied by a callback
(`hf.RecipeClipping`, added by `lt.trainer_kwargs`), and `hf.training_args(recipe)` refuses
such a recipe naming the knob instead of turning its clipping off (a review measured gradient
norms of ~6e4 reaching the optimizer where the recipe clips per layer at 0.5)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autotune.integrations import hf
from autotune.integrations import lightning as lt
from autotune.probe.steps import resolve_knobs
from autotune.recipe import Recipe

PER_LAYER = {"lr": 0.01, "clip_norm": 0.5, "clip_mode": "per_layer"}
AGC = {"lr": 0.01, "clip_policy": "agc", "agc_lambda": 1e-3, "clip_norm": 1.0}


def recipe(**knobs: Any) -> Recipe:
    return Recipe("r", {}, "fp32", 8, knobs=resolve_knobs(knobs, 1e-3), probe={"steps": 50})


def big_gradients() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    (model(torch.randn(4, 8)).sum() * 1e4).backward()
    return model


def norms(model: torch.nn.Module) -> list[float]:
    return [float(p.grad.norm()) for p in model.parameters() if p.grad is not None]


def test_training_args_refuse_a_clipping_they_cannot_express() -> None:
    said = r"clips by clip_mode: per_layer.*hf\.RecipeClipping.*clipped_by_callback=True"
    with pytest.raises(ValueError, match=said):
        hf.training_args(recipe(**PER_LAYER), output_dir="out")
    with pytest.raises(ValueError, match=r"clips by clip_policy: agc"):
        hf.training_args(recipe(**AGC), output_dir="out")
    args = hf.training_args(recipe(lr=0.01, clip_norm=0.5), output_dir="out")
    assert args.max_grad_norm == 0.5  # a global norm: the Trainer's own
    told = hf.training_args(recipe(**PER_LAYER), output_dir="out", clipped_by_callback=True)
    assert told.max_grad_norm == 0.0  # the callback clips, the Trainer does not


def test_training_args_refuse_an_fp16_recipe_on_a_cpu() -> None:
    """The Trainer on a CPU trains an fp16 recipe without a GradScaler: its scaler knobs were
    lost without a word (a black-box review); a trial was refused, a recipe was not."""
    fp16 = Recipe("r", {}, "fp16", 8, knobs=resolve_knobs({"lr": 0.01}, 1e-3), probe={})
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"fp16 on a CPU: .*without a GradScaler"):
            hf.training_args(fp16, output_dir="out")
    with pytest.raises(ValueError, match=r"fp16 on a CPU"):
        hf.training_args(fp16, output_dir="out", use_cpu=True)
    assert hf.training_args(recipe(lr=0.01), output_dir="out", use_cpu=True).fp16 is False


@pytest.mark.parametrize("make", ["hf", "lightning"])
def test_the_callback_clips_each_layer_as_the_recipe_says(make: str) -> None:
    model = big_gradients()
    assert max(norms(model)) > 100
    if make == "hf":
        hf.RecipeClipping(recipe(**PER_LAYER)).on_pre_optimizer_step(
            None, None, None, model=model, optimizer=None
        )
    else:
        (cb,) = lt.trainer_kwargs(recipe(**PER_LAYER))["callbacks"]
        assert isinstance(cb, lt.RecipeClipping)
        cb.on_before_optimizer_step(None, model, None)  # type: ignore[arg-type]
    assert max(norms(model)) <= 0.5 + 1e-5


def test_trainer_kwargs_add_the_callback_only_where_lightning_cannot_clip() -> None:
    callbacks = lt.trainer_kwargs(recipe(**AGC))["callbacks"]
    assert any(isinstance(c, lt.RecipeClipping) for c in callbacks)
    plain = lt.trainer_kwargs(recipe(lr=0.01, clip_norm=0.5))
    assert plain["gradient_clip_val"] == 0.5 and plain["callbacks"] == []
