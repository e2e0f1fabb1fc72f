"""What a Lightning job cannot run as a trial is refused with the trial's own reason, not run
as if it had been: manual optimization (Lightning then applies neither the schedule, nor the
clipping, nor the accumulation), a callback that changes the accumulation, and a fit that ends
before the trial's steps (named by what ended it). A script run by `run_script`, in this process.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")

from assets.scripts import LIGHTNING_DATA

from autotune.integrations import lightning as lt
from autotune.probe.config import ProbeConfig
from autotune.probe.script_errors import BadReport
from autotune.probe.script_run import run_script
from autotune.recipe import Recipe

pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = (
    """
import sys
import lightning, torch
import torch.nn.functional as F
import autotune
from autotune.integrations import lightning as lt
from lightning.pytorch.callbacks import GradientAccumulationScheduler

trial = autotune.trial(steps=99, micro_batch=4)
how = sys.argv[1]

class M(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.automatic_optimization = how != "manual"
    def training_step(self, batch, i):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        if how == "manual":
            o = self.optimizers()
            o.zero_grad(); self.manual_backward(loss); o.step()
        return loss
    def configure_optimizers(self):
        return lt.configure_optimizers(trial, self.parameters())
    def configure_callbacks(self):  # not through trainer_kwargs
        return [GradientAccumulationScheduler({0: 4})] if how == "module_gas" else []

class Accum(lightning.Callback):  # changes the accumulation on its own
    def on_train_epoch_start(self, trainer, module):
        trainer.accumulate_grad_batches = 4

class Stop(lightning.Callback):  # stops the fit at its third step
    def on_train_batch_end(self, trainer, *a):
        trainer.should_stop = trainer.global_step >= 3
"""
    + LIGHTNING_DATA
    + """
extra = {"accum": {"callbacks": [Accum()]}, "stop": {"callbacks": [Stop()]},
         "epochs": {"max_epochs": 1}}.get(how, {})
rows = 40 if how == "epochs" else len(data)  # 10 batches
loader = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(rows)), batch_size=4)
trainer = lightning.Trainer(**lt.trainer_kwargs(trial, **extra))
trainer.fit(model, loader)
"""
)


def probe(tmp_path: Path, how: str, steps: int = 6, **knobs: Any) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    c = ProbeConfig(
        workload="script:train.py",
        steps=steps,
        micro_batch=4,
        script=str(script),
        args=[how],
        knobs={"lr": 0.03, **knobs},
    )
    return run_script(c, None)


@pytest.mark.parametrize(
    "knobs",
    [
        {"warmup_steps": 10},  # Lightning runs it, the schedule never stepped
        {"warmup_steps": 10, "clip_norm": 0.3, "accum_steps": 2},  # Lightning refuses first
    ],
)
def test_manual_optimization_is_refused_naming_what_the_trial_cannot_apply(
    tmp_path: Path, knobs: dict[str, Any]
) -> None:
    with pytest.raises(BadReport) as e:
        probe(tmp_path, "manual", **knobs)
    message = str(e.value)
    assert "manual optimization (automatic_optimization = False)" in message
    for what in ("schedule", "clipping", "accumulation", "automatic optimization", "trial.recipe"):
        assert what in message
    assert "Remove `Trainer(" not in message  # Lightning's advice, about the trial's arguments


def test_the_same_module_with_automatic_optimization_runs(tmp_path: Path) -> None:
    assert probe(tmp_path, "auto", warmup_steps=10)["status"] == "ok"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("module_gas", "GradientAccumulationScheduler changes accumulate_grad_batches"),
        ("accum", "accumulate_grad_batches became 4 at step 0"),
    ],
)
def test_a_callback_that_changes_the_accumulation_fails_the_trial(
    tmp_path: Path, how: str, said: str
) -> None:
    with pytest.raises(BadReport) as e:
        probe(tmp_path, how)
    assert said in str(e.value) and "accum_steps=1" in str(e.value)


def test_trainer_kwargs_refuse_a_gradient_accumulation_scheduler() -> None:
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    r = Recipe("r", {}, "fp32", 8, knobs={"accum_steps": 2}, probe={"steps": 5})
    with pytest.raises(ValueError, match=r"accumulate_grad_batches, which is the recipe's"):
        lt.trainer_kwargs(r, callbacks=[GradientAccumulationScheduler({0: 4})])


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("epochs", "after 10 of 30 steps without being asked (no divergence): max_epochs=1"),
        ("stop", "after 3 of 30 steps without being asked (no divergence): trainer.should_stop"),
    ],
)
def test_a_fit_that_ends_short_is_told_what_ended_it(tmp_path: Path, how: str, said: str) -> None:
    with pytest.raises(BadReport) as e:
        probe(tmp_path, how, steps=30)
    message = str(e.value)
    assert said in message and "range(trial.steps)" not in message
    if how == "stop":
        assert "a callback (Stop)" in message
