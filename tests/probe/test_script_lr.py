"""The `lr` series of a training script that reports no `lr=` (`autotune.probe.script_lr`):
the learning rate its optimizer actually ran at (the recipe's optimizer, or the one handed to
`trial.resume`), never the knob's peak; nothing (NaN) where autotune knows no optimizer. And a
report whose value is not a number names its step. Run in this process with runpy."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.probe.config import ProbeConfig
from autotune.probe.script import BadReport
from autotune.probe.script_run import run_script

HEAD = "import torch, autotune\ntrial = autotune.trial(steps=99, micro_batch=3)\n"
KNOBS = {"lr": 0.1, "warmup_steps": 4, "schedule": "constant", "min_lr_ratio": 0.0}
# lr_at's warm-up over 4 steps to 0.1, then constant: what the optimizer runs steps 0..5 at
WARM = [0.025, 0.05, 0.075, 0.1, 0.1, 0.1]


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    def go(body: str, steps: int = 6, **cfg: Any) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(HEAD + textwrap.dedent(body))
        c = ProbeConfig(workload="script:train.py", steps=steps, script=str(script), **cfg)
        t = iter(range(10_000))
        return run_script(c, lambda _m: None, clock=lambda: next(t) * 0.010)

    return go


def loop(make_opt: str, *, report_first: bool = False, resume: bool = False) -> str:
    step = "    opt.step()\n    sched.step()\n"
    report = "    trial.report(i, loss=1.0 / (i + 1))\n"
    return (
        "w = torch.nn.Parameter(torch.ones(2))\n"
        f"opt = {make_opt}\n"
        "sched = trial.recipe.scheduler(opt, trial.schedule_steps)\n"
        + ("trial.resume(torch.nn.Linear(1, 1), opt, sched)\n" if resume else "")
        + "for i in range(trial.steps):\n"
        "    opt.zero_grad()\n"
        "    (w ** 2).sum().backward()\n" + (report + step if report_first else step + report)
    )


def check_warm() -> None:
    from autotune.probe import lr_at

    want = [
        lr_at(s, peak=0.1, warmup=4, schedule="constant", total=6, min_ratio=0.0) for s in range(6)
    ]
    assert want == pytest.approx(WARM)


@pytest.mark.parametrize("report_first", [False, True])
def test_the_recipes_optimizer_gives_the_lr_it_ran_at(
    run: Callable[..., dict[str, Any]], report_first: bool
) -> None:
    check_warm()
    summary = run(loop("trial.recipe.optimizer([w])", report_first=report_first), knobs=KNOBS)
    assert summary["status"] == "ok"
    assert summary["series"]["lr"] == pytest.approx(WARM)  # not [0.1] * 6, the peak


def test_the_optimizer_handed_to_resume_is_read(run: Callable[..., dict[str, Any]]) -> None:
    summary = run(loop("torch.optim.SGD([w], lr=trial.recipe.lr)", resume=True), knobs=KNOBS)
    assert summary["series"]["lr"] == pytest.approx(WARM)


def test_an_unknown_optimizer_records_no_made_up_lr(run: Callable[..., dict[str, Any]]) -> None:
    summary = run(loop("torch.optim.SGD([w], lr=trial.recipe.lr)"), knobs=KNOBS)
    assert summary["status"] == "ok"
    assert all(math.isnan(v) for v in summary["series"]["lr"])


def test_a_reported_lr_is_kept(run: Callable[..., dict[str, Any]]) -> None:
    body = loop("trial.recipe.optimizer([w])").replace("loss=1.0 / (i + 1)", "loss=1.0, lr=0.5")
    summary = run(body, knobs=KNOBS)
    assert summary["series"]["lr"] == pytest.approx([0.5] * 6)


def test_a_value_that_is_not_a_number_names_its_step(run: Callable[..., dict[str, Any]]) -> None:
    body = "trial.report(0, loss=1.0)\ntrial.report(1, loss='0.5')\n"
    with pytest.raises(BadReport) as e:
        run(body, steps=3)
    assert str(e.value) == "trial.report(step=1): loss='0.5' is not a number (a str)"
    assert e.value.cause == "bad_report"
