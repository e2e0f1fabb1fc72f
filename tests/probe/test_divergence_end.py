"""The verdict at a run's end (`DivergenceMonitor.at_end`), as two black-box reviews saw it fail:
a noisy plateau at ~49x the reference for the last 50 steps was diverged on 4 seeds of 6 and ok on
2 (the window's fifths were a handful of losses each), and a run that exploded 3 steps before its
end (fewer than END_STEPS losses after the spike), its held-out loss 69x its reference, was
"complete, not diverged"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.probe import ProbeConfig, run_probe
from autotune.probe import divergence as d

THR = d.DivergenceThresholds()  # the calibrated defaults: k 75, W 300, F 5, R 2


def _fed(loss: np.ndarray) -> d.DivergenceMonitor:
    mon = d.DivergenceMonitor("fp32", initial_loss=2.0, thresholds=THR)
    for start in range(0, len(loss), 10):
        mon.update(loss[start : start + 10])
    return mon


@pytest.mark.parametrize("seed", range(20))
def test_a_noisy_plateau_to_the_end_is_diverged_on_every_seed(seed: int) -> None:
    rng = np.random.default_rng(seed)
    calm = np.linspace(2.0, 1.0, 250) + rng.normal(0, 0.01, 250)
    plateau = 49 * 2.0 * np.exp(0.8 * rng.standard_normal(50))
    mon = _fed(np.r_[calm, plateau])
    assert not mon.diverged  # fewer than k spikes in a row, no window closed
    assert mon.at_end() == ("no_recovery", 299)


def test_a_loss_coming_down_at_the_end_is_not_diverged() -> None:
    calm = np.linspace(2.0, 1.0, 250)
    down = np.geomspace(100.0, 10.0, 50)  # from 100x down to 10x: coming back
    assert _fed(np.r_[calm, down]).at_end() is None


def test_a_jump_too_late_for_end_steps_is_judged_by_the_held_out_loss() -> None:
    loss = np.r_[np.linspace(2.0, 1.0, 297), [15.7, 3.35e5, 23.8, 73.5]]
    assert _fed(loss).at_end() is None  # one late jump alone: no verdict
    assert _fed(loss).at_end(lambda: 1.1) is None  # the trained model is fine
    assert _fed(loss).at_end(lambda: None) is None  # no held-out loss to tell
    assert _fed(loss).at_end(lambda: 130.0) == ("no_recovery", 300)
    assert _fed(loss).at_end(lambda: float("nan")) == ("no_recovery", 300)
    recovered = np.r_[loss[:-2], [1.0, 1.0]]  # back at once: the median after it is low
    assert _fed(recovered).at_end(lambda: 130.0) is None


LATE = """
import torch

from autotune.workloads.mlp import MLPWorkload


class Late(MLPWorkload):
    calls = 0

    def loss(self, model, batch):
        out = super().loss(model, batch)
        if torch.is_grad_enabled():
            self.calls += 1
            return out * 1000 if self.calls > 57 else out  # the last 3 of 60 steps
        return out * {held_out} if self.calls > 57 else out  # the held-out loss at the end
"""


@pytest.mark.parametrize(("held_out", "status"), [(1, "ok"), (200, "diverged")])
def test_the_probe_asks_the_held_out_loss_of_a_late_jump(
    tmp_path: Path, held_out: int, status: str
) -> None:
    path = tmp_path / f"late_{held_out}.py"
    path.write_text(
        LATE.format(held_out=held_out) + "\n\ndef make(size='tiny'):\n    return Late(size)\n"
    )
    cfg = ProbeConfig(
        workload=f"{path}:make", steps=60, micro_batch=8, knobs={"lr": 0.001}, telemetry_every=5
    )
    r = run_probe(cfg)
    assert r["status"] == status, (r["status"], r["metrics"]["final_loss"])
    if status == "diverged":
        assert (r["divergence_cause"], r["diverged_at_step"]) == ("no_recovery", 59)
