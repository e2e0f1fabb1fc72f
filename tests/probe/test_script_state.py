"""A training script's state hook (`trial.resume`, autotune.probe.script_state): a probe that
continues a shorter one's state ends where a probe of the whole length from step 0 ends."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from assets.scripts import LIGHTNING_DATA, LIGHTNING_MODULE

from autotune.probe.config import ProbeConfig
from autotune.probe.script import BadReport
from autotune.probe.script_run import run_script
from autotune.probe.script_state import NO_HOOK, StateMismatch

# A small regression trained by a plain loop with an LR schedule, a GradScaler, dropout (it
# draws from torch's global RNG every step) and a data iterator of its own; `HOOK` is where
# the script hands its state to the trial.
SCRIPT = """
import torch
import autotune

trial = autotune.trial(steps=99, micro_batch=8)
r = trial.recipe
torch.manual_seed(trial.seed)
model = torch.nn.Sequential(
    torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)
)
opt, scaler = r.optimizer(model.parameters()), r.scaler("cpu")
sched = r.scheduler(opt, trial.schedule_steps)
w = torch.randn(6, 1, generator=torch.Generator().manual_seed(99))

def batches(seed):
    g = torch.Generator().manual_seed(seed)
    while True:
        x = torch.randn(trial.micro_batch, 6, generator=g)
        yield x, x @ w + 0.1 * torch.randn(trial.micro_batch, 1, generator=g)

data = batches(trial.seed)
start = HOOK
for step in range(start, trial.steps):
    total = 0.0
    for x, y in (next(data) for _ in range(r.accum_steps)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss / r.accum_steps).backward()
        total += float(loss.detach()) / r.accum_steps
    norm = r.clip_and_step(opt, scaler)
    sched.step()
    trial.report(step, loss=total, grad_norm=norm, lr=sched.get_last_lr()[0], mine=2.0 * step)
"""
WITH_HOOK = "trial.resume(model, opt, sched, scaler, data=data)"
KNOBS = {
    "lr": 0.02,
    "warmup_steps": 5,
    "schedule": "cosine",
    "accum_steps": 2,
    "clip_policy": "zclip",
    "zclip_z": 2.5,
    "zclip_alpha": 0.9,
}


@pytest.fixture
def probe(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    def go(steps: int, hook: str = WITH_HOOK, **cfg: Any) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(SCRIPT).replace("HOOK", hook))
        c = ProbeConfig(
            workload="script:train.py",
            steps=steps,
            schedule_steps=60,
            micro_batch=8,
            script=str(script),
            knobs={**KNOBS, **cfg.pop("knobs", {})},
            **cfg,
        )
        return run_script(c, None)

    return go


def test_a_continued_probe_ends_where_the_whole_run_ends(
    probe: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    state = str(tmp_path / "s.pt")
    whole = probe(60)
    short = probe(20, save_state=state)
    assert short["state_saved"] == {"path": state, "saved": True, "why": None}
    longer = probe(60, resume_from=state)
    assert longer["resumed_from_step"] == 20
    assert longer["continuation"] == {"from": state, "step": 20, "why": None}
    assert longer["samples_run"] == 40 * 16 and whole["samples_run"] == 60 * 16
    # Same seed, same data order, the scheduler, the scaler, the dropout RNG and zclip's EMAs
    # carried over: step for step the run from 0 (in this process, on this CPU: exactly).
    for name in ("loss", "grad_norm", "lr", "clipped", "metric.mine"):
        np.testing.assert_array_equal(longer["series"][name], whole["series"][name], err_msg=name)
    assert longer["metrics"]["final_loss"] == whole["metrics"]["final_loss"]
    assert longer["steps_run"] == 60


def test_without_the_hook_a_promoted_probe_restarts_and_says_why(
    probe: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    state = str(tmp_path / "s.pt")
    short = probe(20, hook="0", save_state=state)
    assert short["state_saved"] == {"path": state, "saved": False, "why": NO_HOOK}
    assert not Path(state).exists()
    longer = probe(60, hook="0", resume_from=state)
    assert longer["resumed_from_step"] == 0
    assert longer["continuation"] == {"from": state, "step": 0, "why": NO_HOOK}
    assert longer["samples_run"] == 60 * 16


def test_a_state_of_another_configuration_is_a_restart_with_its_reason(
    probe: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    state = str(tmp_path / "s.pt")
    probe(20, save_state=state)
    other = probe(60, resume_from=state, knobs={"lr": 0.01})
    assert other["resumed_from_step"] == 0
    assert "another configuration" in other["continuation"]["why"]
    missing = probe(60, resume_from=str(tmp_path / "none.pt"))
    assert missing["resumed_from_step"] == 0 and "no state at" in missing["continuation"]["why"]


def test_an_edited_script_does_not_continue(
    probe: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    state = str(tmp_path / "s.pt")
    probe(20, save_state=state)
    edited = probe(60, hook=WITH_HOOK + "  # edited", resume_from=state)
    assert edited["resumed_from_step"] == 0
    assert "another configuration" in edited["continuation"]["why"]


def test_a_state_that_does_not_load_fails_the_trial_naming_the_part(
    probe: Callable[..., dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = str(tmp_path / "s.pt")
    # The same script (same hash, same configuration) handing, when ODD is set, an optimizer
    # of two parameter groups: the saved optimizer state (one group) does not load into it.
    odd = (
        "trial.resume(model, torch.optim.AdamW([{'params': model[0].parameters()}, "
        "{'params': model[3].parameters()}]) if __import__('os').environ.get('ODD') else opt, "
        "sched, scaler, data=data)"
    )
    probe(20, hook=odd, save_state=state)
    assert probe(60, hook=odd, resume_from=state)["resumed_from_step"] == 20
    monkeypatch.setenv("ODD", "1")
    with pytest.raises(StateMismatch, match=r"does not load into the script's optimizer"):
        probe(60, hook=odd, resume_from=state)


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        ("trial.resume(model, opt, data=[1, 2])", "iterator"),
        ("trial.resume(model, opt, batches_per_step=-1)", "batches_per_step"),
        ("[trial.resume(model, opt), trial.resume(model, opt)][0]", "twice"),
    ],
)
def test_bad_hooks_fail_with_the_reason(
    probe: Callable[..., dict[str, Any]], hook: str, message: str
) -> None:
    with pytest.raises((BadReport, TypeError, ValueError), match=message):
        probe(10, hook=hook)


HF_SCRIPT = """
import torch
from transformers import Trainer
import autotune
from autotune.integrations import hf

trial = autotune.trial(steps=99, micro_batch=4)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
        )
    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.body(x), labels)}

g = torch.Generator().manual_seed(0)
rows = [{"x": v, "labels": v.sum(0, keepdim=True)} for v in torch.randn(512, 4, generator=g)]
trainer = Trainer(model=Net(), args=hf.training_args(trial), train_dataset=rows)
hf.attach(trainer, trial)
trainer.train()
assert trainer.state.global_step == trial.steps, trainer.state.global_step
"""


def framework_probe(
    tmp_path: Path, text: str, knobs: dict[str, Any]
) -> Callable[..., dict[str, Any]]:
    """Probes of the script `text` (micro-batch 4, scheduled over 30 steps) with `knobs`."""
    script = tmp_path / "train.py"
    script.write_text(text)

    def go(steps: int, **cfg: Any) -> dict[str, Any]:
        c = ProbeConfig(
            workload="script:train.py",
            steps=steps,
            schedule_steps=30,
            micro_batch=4,
            script=str(script),
            knobs=knobs,
            **cfg,
        )
        return run_script(c, None)

    return go


def test_an_hf_trainer_continues_through_its_own_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    # zclip is clipped by the callback, whose EMAs a continued run replays
    knobs = {"lr": 0.01, "warmup_steps": 2, "schedule": "cosine", "accum_steps": 2}
    zclip = {"clip_policy": "zclip", "zclip_z": 0.5, "zclip_warmup": 2}  # clips often
    go = framework_probe(tmp_path, HF_SCRIPT, {**knobs, **zclip})
    state = str(tmp_path / "state" / "0001-s10.pt")
    whole = go(30)
    short = go(10, save_state=state)
    assert short["state_saved"] == {"path": state, "saved": True, "why": None}
    assert Path(state + ".d", "trainer_state.json").is_file()  # the Trainer's own checkpoint
    longer = go(30, resume_from=state)
    assert longer["resumed_from_step"] == 10 and longer["steps_run"] == 30
    assert longer["samples_run"] == 20 * 8
    # The Trainer restored its model, optimizer, scheduler, RNGs and skipped the batches
    # already seen: the steps after the checkpoint are the whole run's.
    np.testing.assert_allclose(longer["series"]["loss"], whole["series"]["loss"], rtol=1e-6)
    np.testing.assert_allclose(longer["series"]["lr"], whole["series"]["lr"], rtol=1e-9)


LIGHTNING_SCRIPT = (
    """
import lightning, torch
import torch.nn.functional as F
import autotune
from autotune.integrations import lightning as lt

trial = autotune.trial(steps=99, micro_batch=4)
"""
    + LIGHTNING_MODULE
    + LIGHTNING_DATA
    + """trainer = lightning.Trainer(**lt.trainer_kwargs(trial))
trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=trial.micro_batch),
            ckpt_path=lt.ckpt_path(trial, model))
assert trainer.global_step == trial.steps, trainer.global_step
"""
)


def test_a_lightning_fit_continues_through_its_own_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    knobs = {"lr": 0.01, "warmup_steps": 2, "schedule": "cosine", "clip_norm": 1.0}
    go = framework_probe(tmp_path, LIGHTNING_SCRIPT, knobs)
    state = str(tmp_path / "state" / "0001-s10.pt")
    whole = go(30)
    short = go(10, save_state=state)
    assert short["state_saved"] == {"path": state, "saved": True, "why": None}
    assert Path(state + ".d", "lightning.ckpt").is_file()  # Lightning's own checkpoint
    longer = go(30, resume_from=state)
    assert longer["resumed_from_step"] == 10 and longer["steps_run"] == 30
    assert longer["samples_run"] == 20 * 4
    # Lightning restored the model, the optimizer and the schedule (the learning rates of the
    # steps after the checkpoint are the whole run's, and so are its first step's loss only if
    # the weights came back); it does not put a plain DataLoader at its position, so later
    # losses are of other batches.
    np.testing.assert_allclose(longer["series"]["lr"], whole["series"]["lr"], rtol=1e-9)
    restarted = go(30)
    assert longer["series"]["loss"][10] != restarted["series"]["loss"][10]
    assert longer["series"]["loss"][10] < 0.9 * whole["series"]["loss"][0]


@pytest.mark.parametrize("before", [True, False], ids=["reference_first", "resume_first"])
def test_a_continued_probe_keeps_the_untrained_models_reference(
    probe: Callable[..., dict[str, Any]], tmp_path: Path, before: bool
) -> None:
    """The initial-loss reference is the untrained model's. Given before `resume` it is measured
    on the fresh model, as in the shorter probe; given after, the model already holds trained
    weights, so the shorter probe's reference is used. Either way the continued probe reports
    the whole run's reference, loss_drop and final loss."""
    held_out = "exec('xv = torch.randn(64, 6, generator=torch.Generator().manual_seed(7))')"
    mse = "lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])"
    ref = f"trial.reference(model, (xv, xv @ w), {mse})"
    order = f"[{ref}, {WITH_HOOK}][1]" if before else f"[{WITH_HOOK}, {ref}][0]"
    code = f"{held_out} or {order}"
    state = str(tmp_path / "s.pt")
    whole = probe(60, hook=code)
    assert probe(20, hook=code, save_state=state)["state_saved"]["saved"]
    longer = probe(60, hook=code, resume_from=state)
    assert longer["resumed_from_step"] == 20
    assert whole["initial_reference"]["source"] == "held_out"
    assert longer["initial_reference"] == whole["initial_reference"]
    for m in ("initial_loss", "loss_drop", "final_loss", "noise_per_drop"):
        assert longer["metrics"][m] == pytest.approx(whole["metrics"][m], rel=1e-12), m
