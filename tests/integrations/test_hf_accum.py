"""Gradient accumulation through `hf.attach` and a real `transformers.Trainer`: at accum 1, 2
and 4 over the same samples per step, a step's reported loss and the gradient norm the Trainer
clips are the same, for a model whose `forward` takes `**kwargs` but ignores
`num_items_in_batch` (the Trainer then neither divides the loss nor has it divided), one whose
`forward` does not take `**kwargs`, BERT's sequence classifier and GPT-2 (which honours
`num_items_in_batch`), each equal to the model's own mean loss over the step's samples;
undoing the fix is caught on the first step."""

from __future__ import annotations

import json
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
import json, sys
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel
from transformers import Trainer
import autotune
from autotune.integrations import hf

kind, change = sys.argv[1], sys.argv[2]
trial = autotune.trial(steps=99, micro_batch=4)

class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    def forward(self, x, labels):
        return {"loss": F.cross_entropy(self.net(x), labels)}

class Kwargs(Plain):
    def forward(self, x, labels, **kwargs):  # num_items_in_batch ignored
        return {"loss": F.cross_entropy(self.net(x), labels)}

g = torch.Generator().manual_seed(1)
ROWS = 8  # = the samples of one step: step 0 sees them all, whatever the accumulation
if kind == "gpt2":
    config = GPT2Config(
        vocab_size=32, n_positions=8, n_embd=8, n_layer=1, n_head=2, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    rows = [{"input_ids": i, "labels": i} for i in torch.randint(0, 32, (ROWS, 8), generator=g)]
elif kind == "bert":
    config = BertConfig(
        vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=8, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    model = BertForSequenceClassification(config)
    ids = torch.randint(0, 32, (ROWS, 8), generator=g)
    rows = [{"input_ids": i, "labels": int(i.sum() % 3)} for i in ids]
else:
    model = {"plain": Plain, "kwargs": Kwargs}[kind]()
    rows = [{"x": v, "labels": int(v.argmax() % 3)} for v in torch.randn(ROWS, 6, generator=g)]

class Misreporting(Trainer):
    def training_step(self, *a, **kw):
        return super().training_step(*a, **kw) * 2  # logs twice the loss it trains on

with torch.no_grad():  # the model's own mean loss over the step's samples
    batch = {k: torch.stack([torch.as_tensor(r[k]) for r in rows]) for k in rows[0]}
    own = float(model(**batch)["loss"])
json.dump(own, open(f"own-{kind}.json", "w"))

cls = Misreporting if change == "misreport" else Trainer
trainer = cls(model=model, args=hf.training_args(trial), train_dataset=rows)
hf.attach(trainer, trial)
if change == "undo":  # a Trainer that passes num_items_in_batch and trusts the model again
    trainer.model_accepts_loss_kwargs = True
trainer.train()
"""

BATCH = 8  # samples per optimizer step, whatever the accumulation


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    script = tmp_path_factory.mktemp("hf_accum") / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))

    def go(kind: str, accum: int, change: str = "none", steps: int = 2) -> dict[str, Any]:
        cfg = ProbeConfig(
            workload="script:train.py",
            steps=steps,
            micro_batch=BATCH // accum,
            script=str(script),
            args=[kind, change],
            knobs={"lr": 0.01, "accum_steps": accum, "clip_norm": 0.01},
        )
        summary = run_script(cfg, lambda _m: None)
        summary["own_loss"] = json.loads((script.parent / f"own-{kind}.json").read_text())
        return summary

    return go


@pytest.mark.parametrize("kind", ["kwargs", "plain", "bert", "gpt2"])
def test_a_steps_loss_and_clipped_norm_do_not_depend_on_the_accumulation(
    train: Callable[..., dict[str, Any]], kind: str
) -> None:
    runs = {accum: train(kind, accum) for accum in (1, 2, 4)}
    assert all(r["status"] == "ok" and r["steps_run"] == 2 for r in runs.values())
    one = runs[1]["series"]
    # step 0's loss is the model's own mean over the step's samples (GPT-2 was 56/64 of it:
    # transformers 5.24 counted num_items_in_batch over its unshifted labels)
    assert one["loss"][0] == pytest.approx(runs[1]["own_loss"], rel=1e-6)
    assert one["grad_norm"][0] > 0.01  # every step is clipped (clip_norm 0.01)
    for accum in (2, 4):
        s = runs[accum]["series"]
        # step 0: the same samples and weights, so the same mean to float precision (the bug
        # gave accum x the loss and the norm); step 1 after the same clipped update
        assert s["loss"][0] == pytest.approx(one["loss"][0], rel=1e-6), accum
        assert s["grad_norm"][0] == pytest.approx(one["grad_norm"][0], rel=1e-5), accum
        assert s["loss"] == pytest.approx(one["loss"], rel=1e-5), accum
        assert s["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4), accum


def test_a_trainer_that_leaves_the_loss_undivided_is_stopped_on_the_first_step(
    train: Callable[..., dict[str, Any]],
) -> None:
    with pytest.raises(AccumulationMismatch) as e:
        train("kwargs", 4, "undo")
    message = str(e.value)
    assert "gradient_accumulation_steps=4" in message and "by 1, not 1/4" in message
    assert "4x the mean" in message and "Cause: model_accepts_loss_kwargs=True" in message
    assert "Fix: set trainer.model_accepts_loss_kwargs = False" in message
    # at accum 1 an undivided loss is the mean: nothing to stop
    assert train("kwargs", 1, "undo")["status"] == "ok"


def test_a_trainer_that_logs_another_loss_than_it_trains_on_is_stopped(
    train: Callable[..., dict[str, Any]],
) -> None:
    with pytest.raises(AccumulationMismatch, match="logged step 0's loss as"):
        train("plain", 2, "misreport")
