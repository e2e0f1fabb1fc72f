"""An overridden `compute_loss` that multiplies the model's loss by the micro-batch count (the
"sum, not mean" mistake) is stopped on the first step by `hf.attach`'s check, through a real
`transformers.Trainer`: the check measures the weight of the model's own loss in the gradient,
not only that of what compute_loss returned (which the Trainer divides correctly)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("transformers")

from autotune.integrations.hf_accum import AccumulationMismatch
from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script

pytestmark = pytest.mark.filterwarnings("ignore")

SCRIPT = """
import sys
import torch
import torch.nn.functional as F
from transformers import Trainer
import autotune
from autotune.integrations import hf

change = sys.argv[1]
trial = autotune.trial(steps=99, micro_batch=4)

class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    def forward(self, x, labels, **kwargs):
        return {"loss": F.cross_entropy(self.net(x), labels)}

class Scaling(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(**inputs)
        factor = self.args.gradient_accumulation_steps if change == "times_accum" else 3.0
        loss = out["loss"] * factor
        return (loss, out) if return_outputs else loss

g = torch.Generator().manual_seed(1)
rows = [{"x": v, "labels": int(v.argmax() % 3)} for v in torch.randn(16, 6, generator=g)]
cls = Trainer if change == "none" else Scaling
trainer = cls(model=Plain(), args=hf.training_args(trial), train_dataset=rows)
hf.attach(trainer, trial)
trainer.train()
"""


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    script = tmp_path_factory.mktemp("hf_override") / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))

    def go(change: str, accum: int) -> dict[str, Any]:
        cfg = ProbeConfig(
            workload="script:train.py",
            steps=2,
            micro_batch=8 // accum,
            script=str(script),
            args=[change],
            knobs={"lr": 0.01, "accum_steps": accum},
        )
        return run_script(cfg, lambda _m: None)

    return go


def test_compute_loss_times_the_accumulation_is_stopped_on_the_first_step(
    train: Callable[..., dict[str, Any]],
) -> None:
    with pytest.raises(AccumulationMismatch) as e:
        train("times_accum", 2)
    message = str(e.value)
    assert "gradient_accumulation_steps=2" in message and "weight 1 per micro-batch" in message
    assert "2x the mean" in message and "compute_loss" in message
    # the same Trainer without the override, and the override without accumulation, train
    assert train("none", 2)["status"] == "ok"
    assert train("times_accum", 1)["status"] == "ok"


def test_a_constant_weighting_of_the_loss_is_the_users(
    train: Callable[..., dict[str, Any]],
) -> None:
    # x3 at accum 2 does not undo the division: a loss weighting, left alone
    assert train("x3", 2)["status"] == "ok"
