"""A trend verdict (spikes that persisted, a loss that did not recover) is undone when every run
is carried on to its end (`divergence.stop_early: false`) and the loss came back by then
(`DivergenceMonitor.recovered_at_end`): a black-box review saw a loss 22x its reference for 80
steps, ending at 0.037, called diverged. A verdict of the step alone (a non-finite loss or
gradient, the fp16 scaler's collapse) stays, and so does one whose loss is still up at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.probe import ProbeConfig, run_probe
from autotune.probe import divergence as d

THR = d.DivergenceThresholds(persist_steps=20, recovery_window=50, recovery_factor=5.0)


def _fed(loss: np.ndarray, *, chunk: int = 9, **kw: object) -> d.DivergenceMonitor:
    mon = d.DivergenceMonitor("fp32", initial_loss=2.0, thresholds=THR, **kw)  # type: ignore[arg-type]
    for start in range(0, len(loss), chunk):
        mon.update(loss[start : start + chunk])
    return mon


def _excursion(after: float, n_after: int = 60) -> np.ndarray:
    """100 calm steps, 30 steps at 22x the reference, then `n_after` steps at `after`."""
    return np.r_[np.linspace(2.0, 1.0, 100), np.full(30, 44.0), np.full(n_after, after)]


def test_a_persisting_spike_whose_loss_came_back_is_withdrawn_at_the_end() -> None:
    mon = _fed(_excursion(0.9))
    assert (mon.cause, mon.onset, mon.step) == ("loss_explosion", 100, 119)
    undone = mon.recovered_at_end()
    assert undone is not None and (undone["cause"], undone["onset"], undone["step"]) == (
        "loss_explosion",
        100,
        119,
    )
    assert undone["end_median"] == pytest.approx(0.9) and undone["end_median"] < undone["level"]
    assert not mon.diverged and mon.cause is None and mon.onset is None
    assert mon.record()["divergence_withdrawn"] == undone
    assert mon.recovered_at_end() is None  # once


@pytest.mark.parametrize(
    ("loss", "why"),
    [
        (_excursion(44.0), "still at 22x at the end"),
        (_excursion(0.9, n_after=4), "fewer than END_STEPS losses after the verdict"),
        (np.r_[_excursion(0.9), [44.0]], "a spike on the last step"),
        (np.r_[_excursion(0.9)[:150], [np.nan], np.full(40, 0.9)], "a non-finite loss"),
    ],
)
def test_a_verdict_the_end_does_not_undo_stays(loss: np.ndarray, why: str) -> None:
    mon = _fed(loss)
    assert mon.diverged, why
    cause = mon.cause
    assert mon.recovered_at_end() is None, why
    assert mon.cause == cause and mon.record()["divergence_withdrawn"] is None, why


def test_a_verdict_of_the_step_alone_is_not_undone() -> None:
    mon = d.DivergenceMonitor("fp32", initial_loss=2.0, thresholds=THR)
    grad = np.r_[np.ones(10), [np.inf], np.ones(60)]
    mon.update(np.full(71, 1.0), grad_norm=grad)  # a non-finite gradient in fp32
    assert mon.cause == "grad_explosion" and mon.recovered_at_end() is None
    fp16 = d.DivergenceMonitor("fp16", initial_loss=2.0, thresholds=THR)
    fp16.update(np.full(71, 1.0), scale=np.r_[np.ones(10), np.full(61, 1e-6)])
    assert fp16.cause == "scaler_collapse" and fp16.recovered_at_end() is None


EXCURSION = """
import torch

from autotune.workloads.mlp import MLPWorkload


class Excursion(MLPWorkload):
    calls = 0

    def loss(self, model, batch):
        out = super().loss(model, batch)
        if torch.is_grad_enabled():  # a training step: 200x for steps 30-79, then as it was
            self.calls += 1
            return out * 200 if 30 < self.calls <= 80 else out
        return out * {held_out} if self.calls >= 100 else out  # the held-out loss at the end


def make(size="tiny"):
    return Excursion(size)
"""


def _probe(tmp_path: Path, held_out: float, **divergence: object) -> dict[str, Any]:
    path = tmp_path / f"excursion_{held_out}.py"
    path.write_text(EXCURSION.format(held_out=held_out))
    cfg = ProbeConfig(
        workload=f"{path}:make", steps=150, micro_batch=8, knobs={"lr": 0.001},
        telemetry_every=5, divergence={"persist_steps": 20, **divergence},
    )  # fmt: skip
    return run_probe(cfg.for_baseline() if divergence.get("stop_early") == "baseline" else cfg)


def test_the_probe_undoes_it_only_when_every_run_is_carried_on(tmp_path: Path) -> None:
    carried = _probe(tmp_path, 1, stop_early=False)
    loss = np.asarray(carried["series"]["loss"], dtype=float)
    ref = carried["metrics"]["initial_loss"]
    assert loss[30:80].min() > 10 * ref and np.median(loss[-30:]) < 2 * ref  # out, and back
    assert (carried["status"], carried["divergence_cause"], carried["steps_run"]) == (
        "ok",
        None,
        150,
    )
    undone = carried["divergence_withdrawn"]
    assert (undone["cause"], undone["onset"], undone["step"]) == ("loss_explosion", 30, 49)
    assert undone["held_out"] == pytest.approx(carried["metrics"]["final_loss"])
    assert undone["held_out"] < undone["level"] and undone["end_median"] < undone["level"]

    stopped = _probe(tmp_path, 1)  # stops at the verdict: nothing to carry on to
    assert (stopped["status"], stopped["diverged_at_step"]) == ("diverged", 49)
    # the baseline runs on past a verdict while trials stop at theirs: it keeps its verdict, so
    # that both are judged by the same rule
    baseline = _probe(tmp_path, 1, stop_early="baseline")
    assert baseline["steps_run"] == 150 and baseline["status"] == "diverged"
    assert baseline["divergence_withdrawn"] is None


def test_a_run_whose_held_out_loss_is_still_up_keeps_its_verdict(tmp_path: Path) -> None:
    up = _probe(tmp_path, 200, stop_early=False)  # training losses back, the held-out not
    assert (up["status"], up["divergence_cause"], up["diverged_at_step"]) == (
        "diverged",
        "loss_explosion",
        49,
    )
    assert up["divergence_withdrawn"] is None
    assert up["metrics"]["final_loss"] > 20 * up["metrics"]["initial_loss"]
