"""`clip_fraction` and the `clipped` series of a script whose clipping policy cannot be told from
the total gradient norm (agc, zclip, autoclip, per-layer): `Recipe.clip_and_step` tells the
trial's next report whether it clipped, and `hf.attach`'s callback does for the policies it
clips itself."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from assets.scripts import hf_trainer_job

from autotune.probe.config import ProbeConfig
from autotune.probe.script_run import run_script

LOOP = """
import torch
import autotune

trial = autotune.trial(steps=99, micro_batch=8)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt, r = trial.recipe.optimizer(model.parameters()), trial.recipe
g = torch.Generator().manual_seed(0)
for step in range(trial.steps):
    x = torch.randn(8, 6, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    loss.backward()
    grad_norm = r.clip_and_step(opt)
    trial.report(step, loss=loss, grad_norm=grad_norm, **EXTRA)
"""


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    def go(body: str, knobs: dict[str, Any], extra: str = "{}", steps: int = 20) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(body).replace("**EXTRA", f"**{extra}"))
        cfg = ProbeConfig(workload="script:train.py", steps=steps, script=str(script), knobs=knobs)
        return run_script(cfg, lambda _m: None)

    return go


@pytest.mark.parametrize(
    "knobs",
    [
        {"clip_policy": "autoclip", "autoclip_percentile": 10.0},
        {"clip_policy": "agc", "agc_lambda": 1e-4},
        {"clip_policy": "zclip", "zclip_z": 0.1, "zclip_warmup": 3},
        {"clip_policy": "norm", "clip_norm": 0.05, "clip_mode": "per_layer"},
    ],
    ids=lambda k: str(k["clip_policy"]) + str(k.get("clip_mode", "")),
)
def test_an_adaptive_policy_that_clips_through_clip_and_step_is_recorded(
    run: Callable[..., dict[str, Any]], knobs: dict[str, Any]
) -> None:
    summary = run(LOOP, {"lr": 0.01, **knobs})
    assert summary["status"] == "ok" and summary["steps_run"] == 20
    clipped = summary["series"]["clipped"]
    assert any(clipped), clipped  # it was 0 (all False) whatever the policy did
    assert summary["metrics"]["clip_fraction"] == pytest.approx(sum(clipped) / len(clipped))
    assert summary["metrics"]["clip_fraction"] > 0


def test_without_clipping_nothing_is_clipped_and_a_reported_value_wins(
    run: Callable[..., dict[str, Any]],
) -> None:
    off = run(LOOP, {"lr": 0.01, "clip_policy": "none"})
    assert off["metrics"]["clip_fraction"] == 0.0 and not any(off["series"]["clipped"])
    told = run(LOOP, {"lr": 0.01, "clip_policy": "agc", "agc_lambda": 1e-4}, "{'clipped': False}")
    assert told["metrics"]["clip_fraction"] == 0.0  # the script's own `clipped=` wins


HF = hf_trainer_job(label_scale=" * 5")


def test_an_hf_trainer_records_what_the_callbacks_policy_clipped(
    run: Callable[..., dict[str, Any]],
) -> None:
    pytest.importorskip("transformers")
    summary = run(HF, {"lr": 0.01, "clip_policy": "agc", "agc_lambda": 1e-4}, steps=6)
    assert summary["status"] == "ok" and summary["steps_run"] == 6
    assert summary["metrics"]["clip_fraction"] == pytest.approx(1.0)  # agc at 1e-4 clips all
