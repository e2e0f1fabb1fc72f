"""autotune.integrations.lightning with a real `lightning.Trainer`, in this process: a script
run by `run_script` fits a LightningModule through `trainer_kwargs`/`configure_optimizers`."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from autotune.integrations import lightning as lt
from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script
from autotune.recipe import Recipe

pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = """
import json, sys
import lightning, torch
import torch.nn.functional as F
import autotune
from autotune.integrations import lightning as lt

trial = autotune.trial(steps=99, micro_batch=4)
seen = []  # every micro-batch's loss, as training_step returned it

class M(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    def training_step(self, batch, i):
        if i == 2 and "--skip" in sys.argv:
            return None  # Lightning's way to skip a batch
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        seen.append(float(loss))
        return loss
    def configure_optimizers(self):
        return lt.configure_optimizers(trial, self.parameters())

g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
trainer = lightning.Trainer(**lt.trainer_kwargs(trial))
model = M()
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=trial.micro_batch),
            ckpt_path=lt.ckpt_path(trial, model))
json.dump({"seen": seen, "global_step": trainer.global_step}, open("out.json", "w"))
"""


@pytest.fixture
def fit(tmp_path: Path) -> Callable[..., tuple[dict[str, Any], dict[str, Any]]]:
    def go(steps: int = 6, **cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        import json

        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(SCRIPT))
        c = ProbeConfig(
            workload="script:train.py", steps=steps, micro_batch=4, script=str(script), **cfg
        )
        summary = run_script(c, lambda _m: None)
        return summary, json.loads((tmp_path / "out.json").read_text())

    return go


def test_each_optimizer_step_reports_the_sum_of_its_micro_batch_losses(fit: Any) -> None:
    summary, out = fit(steps=6, knobs={"lr": 0.01, "accum_steps": 2, "clip_norm": 0.01})
    assert summary["status"] == "ok" and summary["steps_run"] == 6 and out["global_step"] == 6
    seen = out["seen"]
    assert len(seen) == 12
    per_step = [(seen[2 * i] + seen[2 * i + 1]) / 2 for i in range(6)]
    assert summary["series"]["loss"] == pytest.approx(per_step, rel=1e-5)
    # the norm before clipping (every step exceeds clip_norm 0.01 and is clipped)
    assert min(summary["series"]["grad_norm"]) > 0.01
    assert summary["metrics"]["clip_fraction"] == 1.0


def test_a_skipped_batch_is_not_reported_and_the_trainer_runs_one_more(fit: Any) -> None:
    summary, out = fit(steps=6, knobs={"lr": 0.01}, args=["--skip"])
    assert summary["status"] == "ok" and summary["steps_run"] == 6
    assert out["global_step"] == 7 and len(out["seen"]) == 6  # one batch returned None
    assert summary["series"]["loss"] == pytest.approx(out["seen"], rel=1e-5)
    assert all(g > 0 for g in summary["series"]["grad_norm"])  # no NaN, no 0


def test_a_fit_continued_after_a_skipped_batch_reports_the_steps_left(
    fit: Any, tmp_path: Path
) -> None:
    state = str(tmp_path / "state" / "0001-s4.pt")
    cfg = {"knobs": {"lr": 0.01}, "args": ["--skip"], "schedule_steps": 10}
    fit(steps=4, save_state=state, **cfg)  # its checkpoint's global_step is 5
    summary, out = fit(steps=10, resume_from=state, **cfg)
    assert summary["status"] == "ok" and summary["resumed_from_step"] == 4
    assert summary["steps_run"] == 10 and out["global_step"] == 11


def test_the_schedule_is_the_recipes_stepped_each_optimizer_step(fit: Any) -> None:
    summary, _ = fit(steps=8, knobs={"lr": 0.01, "warmup_steps": 4})
    recipe = Recipe("r", {}, "fp32", 4, knobs=summary["knobs"])
    assert summary["series"]["lr"] == pytest.approx([recipe.lr_at(s, 8) for s in range(8)])


def test_the_schedule_runs_over_schedule_steps_and_the_trainer_stops_at_steps(fit: Any) -> None:
    knobs = {"lr": 0.01, "warmup_steps": 2, "schedule": "cosine"}
    summary, out = fit(steps=6, schedule_steps=18, knobs=knobs)
    assert out["global_step"] == 6 and summary["schedule_steps"] == 18
    recipe = Recipe("r", {}, "fp32", 4, knobs=summary["knobs"])
    assert summary["series"]["lr"] == pytest.approx([recipe.lr_at(s, 18) for s in range(6)])


def test_a_divergence_stops_the_trainer_early_with_its_cause(fit: Any) -> None:
    summary, out = fit(steps=40, knobs={"lr": 1e4, "clip_norm": 0.0})
    assert summary["status"] == "diverged"
    assert summary["divergence_cause"] in ("nonfinite_loss", "loss_explosion", "grad_explosion")
    assert out["global_step"] < 40 and summary["steps_run"] == out["global_step"]


def test_fp16_on_a_cpu_runs_with_the_trials_grad_scaler(fit: Any) -> None:
    summary, _ = fit(steps=4, precision="fp16", knobs={"lr": 0.01, "init_scale": 1024.0})
    assert summary["status"] == "ok"
    assert summary["series"]["scale"][0] == 1024.0


def test_per_layer_clipping_is_done_by_the_callback(fit: Any) -> None:
    summary, _ = fit(steps=4, knobs={"lr": 0.01, "clip_norm": 1e-4, "clip_mode": "per_layer"})
    assert summary["status"] == "ok" and summary["metrics"]["clip_fraction"] == 1.0


def test_an_adaptive_policy_is_done_by_the_callback_as_the_probe_does(fit: Any) -> None:
    """agc through the script's Lightning callback: it clips, and what it reports and trains
    is the probe's rule (the fixed clip_norm is not the policy's, and is not applied)."""
    knobs = {"lr": 0.01, "clip_policy": "agc", "agc_lambda": 1e-3, "clip_norm": 1e-6}
    summary, _ = fit(steps=4, knobs=knobs)
    assert summary["status"] == "ok" and summary["metrics"]["clip_fraction"] == 1.0
    kwargs = lt.trainer_kwargs(recipe(**knobs))
    assert kwargs["gradient_clip_val"] is None  # Lightning's own clipping is off
    plain, _ = fit(steps=4, knobs={"lr": 0.01, "clip_norm": 1e-6})
    assert summary["series"]["loss"][1:] != plain["series"]["loss"][1:]


def recipe(**kw: Any) -> Recipe:
    from autotune.probe.steps import resolve_knobs

    precision = kw.pop("precision", "fp32")
    return Recipe("r", {}, precision, 8, knobs=resolve_knobs(kw, 1e-3), probe={"steps": 50})


def test_trainer_kwargs_own_the_recipes_fields_and_keep_the_users() -> None:
    got = lt.trainer_kwargs(recipe(clip_norm=2.0, accum_steps=4), max_epochs=3, logger=False)
    assert got["gradient_clip_val"] == 2.0 and got["gradient_clip_algorithm"] == "norm"
    assert got["accumulate_grad_batches"] == 4 and got["precision"] == "32-true"
    assert got["max_epochs"] == 3 and got["logger"] is False
    per_layer = lt.trainer_kwargs(recipe(clip_norm=2.0, clip_mode="per_layer"))
    assert per_layer["gradient_clip_val"] is None
    fp16 = lt.trainer_kwargs(recipe(precision="fp16", init_scale=512.0), accelerator="cpu")
    (plugin,) = fp16["plugins"]
    assert isinstance(plugin, MixedPrecision) and plugin.scaler is not None
    assert plugin.scaler.get_scale() == 512.0 and "precision" not in fp16


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        # given a recipe, not a trial: the arguments are the recipe's
        ({"gradient_clip_val": 1.0}, "gradient_clip_val is the recipe's"),
        ({"precision": "bf16-mixed"}, "precision is the recipe's"),
        ({"min_steps": 10}, "min_steps: it would override the stop on divergence"),
    ],
)
def test_trainer_kwargs_refuse_what_the_trial_owns(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lt.trainer_kwargs(recipe(), **kw)


def test_configure_optimizers_gives_the_recipes_adamw_and_a_per_step_schedule() -> None:
    params = [torch.nn.Parameter(torch.ones(3))]
    got = lt.configure_optimizers(recipe(lr=0.02, adam_eps=1e-6, warmup_steps=5), params)
    opt, sched = got["optimizer"], got["lr_scheduler"]
    assert opt.defaults["lr"] == 0.02 and opt.defaults["eps"] == 1e-6
    assert sched["interval"] == "step"
    assert opt.param_groups[0]["lr"] == pytest.approx(0.02 / 5)  # warm-up's first step: 1/5
