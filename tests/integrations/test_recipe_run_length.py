"""A recipe given to `hf.training_args` or `lt.trainer_kwargs` (a user's own run) trains the run
its study measured: `max_steps` is the recipe's schedule length and HF's `seed` the probe's, as
the hf and lightning exports set them. A black-box review got `max_steps: -1` and `seed: 42`
from HF (the schedule stretched over the epochs) and no `max_steps` from Lightning (1000
epochs). The caller's own values win."""

from __future__ import annotations

import pytest

from autotune.integrations import hf
from autotune.probe.steps import resolve_knobs
from autotune.recipe import Recipe

PROBE = {"steps": 30, "seed": 7, "schedule_steps": 60}


def recipe(probe: dict[str, int] = PROBE) -> Recipe:
    knobs = resolve_knobs({"lr": 0.003, "warmup_steps": 20, "schedule": "cosine"}, 1e-3)
    return Recipe("r", {}, "fp32", 8, knobs=knobs, probe=dict(probe))


def test_training_args_of_a_recipe_set_its_steps_and_seed() -> None:
    args = hf.training_args(recipe(), output_dir="out", use_cpu=True)
    assert args.max_steps == 60 and args.seed == 7
    assert args.max_steps == recipe().schedule_steps
    own = hf.training_args(recipe(), output_dir="out", use_cpu=True, max_steps=500, seed=1)
    assert own.max_steps == 500 and own.seed == 1
    bare = hf.training_args(recipe({"steps": 40}), output_dir="out", use_cpu=True)
    assert bare.max_steps == 40 and bare.seed == 42  # no seed recorded: HF's default


def test_trainer_kwargs_of_a_recipe_set_its_steps() -> None:
    pytest.importorskip("lightning")
    import lightning

    from autotune.integrations import lightning as lt

    kwargs = lt.trainer_kwargs(recipe())
    assert kwargs["max_steps"] == 60
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    assert lightning.Trainer(**kwargs, **quiet).max_steps == 60
    assert lt.trainer_kwargs(recipe(), max_steps=-1)["max_steps"] == -1
