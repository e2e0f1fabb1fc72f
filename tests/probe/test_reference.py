"""The initial loss a probe is measured against (`autotune.probe.reference`): the untrained model
on the held-out set, the run left as it was; step 0's loss only where there is none."""

from __future__ import annotations

import math
import random
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.probe import ProbeConfig, run_probe
from autotune.probe.reference import MAX_BATCHES, held_out
from autotune.probe.workload import resolve

# A regression whose first training batch of every seed is degenerate (inputs 0, targets shrunk
# 100-fold; the untrained MLP maps 0 to 0): step 0's loss is then ~1e-4 of the usual one, and
# every later step is "10 x the initial loss" against it.
ODD_FIRST = textwrap.dedent(
    """
    import itertools
    from autotune.workloads.mlp import MLPWorkload

    class OddFirst(MLPWorkload):
        def batches(self, micro_batch, seed):
            stream = super().batches(micro_batch, seed)
            x, y = next(stream)
            return itertools.chain([(x * 0, y / 100)], stream)

    class NoHeldOut(MLPWorkload):
        def eval_batches(self, micro_batch):
            return []

    class Unwritten(MLPWorkload):
        def eval_batches(self, micro_batch):
            raise NotImplementedError("only for DDP, I thought")

    class Endless(MLPWorkload):
        def eval_batches(self, micro_batch):
            return self.batches(micro_batch, seed=1234)  # never ends

    def odd_first(size="tiny"):
        return OddFirst(size)

    def no_held_out(size="tiny"):
        return NoHeldOut(size)

    def unwritten(size="tiny"):
        return Unwritten(size)

    def endless(size="tiny"):
        return Endless(size)
    """
)


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    path = tmp_path / "odd.py"
    path.write_text(ODD_FIRST)
    return path


@pytest.mark.parametrize("name", ["mlp", "resnet", "tiny_gpt"])
def test_the_reference_is_the_weighted_held_out_mean_and_touches_nothing(name: str) -> None:
    workload = resolve(name, "tiny")
    torch.manual_seed(3)
    model = workload.build_model()
    model.train()
    buffers = [b.clone() for b in model.buffers()]
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    ref = held_out(model, workload, 8, torch.device("cpu"), None)
    # BatchNorm's running statistics and every RNG are as they were
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers(), strict=True))
    assert random.getstate() == states[0]
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])
    batches = workload.eval_batches(8)[:MAX_BATCHES]
    with torch.no_grad():
        parts = [
            (float(workload.loss(model, b)), workload.tokens(b) or workload.samples(b))
            for b in batches
        ]
    # the buffers above were put back, so the recomputation sees the same model
    want = sum(v * w for v, w in parts) / sum(w for _, w in parts)
    assert ref.source == "held_out" and ref.batches == len(batches)
    assert ref.loss == pytest.approx(want, rel=1e-6)


def test_an_odd_first_batch_is_no_explosion_and_no_reference(odd: Path) -> None:
    cfg = ProbeConfig(workload=f"{odd}:odd_first", steps=30, micro_batch=16, knobs={"lr": 3e-3})
    r = run_probe(cfg)
    step0 = r["series"]["loss"][0]
    ref = r["initial_reference"]
    assert ref["source"] == "held_out" and ref["why"] is None
    # against step 0 every later step would be a "loss_explosion"
    assert min(r["series"]["loss"][1:]) > 10 * step0
    assert r["status"] == "ok" and not r["diverged"]
    m = r["metrics"]
    assert m["initial_loss"] == pytest.approx(ref["loss"]) and m["initial_loss"] > 100 * step0
    assert m["loss_drop"] == pytest.approx(1 - m["final_loss"] / ref["loss"])
    assert m["loss_drop"] > 0 and math.isfinite(m["noise_per_drop"])


def test_the_reference_does_not_change_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # The held-out pass draws nothing the run would have drawn: the losses are those of a run
    # without it, which the golden files also pin for the built-ins (resnet's BatchNorm included).
    from autotune.probe import reference

    cfg = ProbeConfig(workload="resnet", steps=12, micro_batch=8, knobs={"lr": 0.05})
    with_ref = run_probe(cfg)
    monkeypatch.setattr(
        reference, "held_out", lambda *a, **k: reference.Reference(None, "step0", why="test")
    )
    without = run_probe(cfg)
    assert with_ref["series"]["loss"] == without["series"]["loss"]
    assert without["initial_reference"]["source"] == "step0"
    assert without["metrics"]["initial_loss"] == without["series"]["loss"][0]
    assert with_ref["metrics"]["initial_loss"] != with_ref["series"]["loss"][0]


@pytest.mark.parametrize(
    ("factory", "why"),
    [
        ("no_held_out", "eval_batches() returned no batch"),
        ("unwritten", "NotImplementedError: only for DDP"),
    ],
)
def test_without_a_held_out_set_step_0_is_the_reference_and_the_summary_says_why(
    odd: Path, factory: str, why: str
) -> None:
    r = run_probe(ProbeConfig(workload=f"{odd}:{factory}", steps=12, micro_batch=16))
    ref = r["initial_reference"]
    assert r["status"] == "ok"
    assert ref["source"] == "step0" and ref["loss"] is None
    assert why in ref["why"]
    assert r["metrics"]["initial_loss"] == r["series"]["loss"][0]


def test_an_endless_held_out_stream_is_read_up_to_its_cap(odd: Path) -> None:
    r = run_probe(ProbeConfig(workload=f"{odd}:endless", steps=5, micro_batch=16))
    assert r["initial_reference"]["source"] == "held_out"
    assert r["initial_reference"]["batches"] == MAX_BATCHES


SPIKE = textwrap.dedent(
    """
    import torch
    from autotune.workloads.mlp import MLPWorkload

    class Spike(MLPWorkload):
        '''At training step 8 the gradient is a million times larger, the loss value the same.'''

        steps = 0

        def loss(self, model, batch):
            out = super().loss(model, batch)
            if not torch.is_grad_enabled():
                return out
            self.steps += 1
            if self.steps == 9:
                return out + (1e6 - 1) * (out - out.detach())
            return out

    def make(size="tiny"):
        return Spike(size)
    """
)


def test_a_gradient_spike_is_a_spike_only_without_clipping(tmp_path: Path) -> None:
    # One huge gradient norm is a spike (recorded), not a divergence: it must persist
    # (probe.divergence.persist_steps) or the loss must not recover. Under the one-step rule
    # (persist_steps 1) it is the verdict.
    path = tmp_path / "spike.py"
    path.write_text(SPIKE)
    base = ProbeConfig(workload=f"{path}:make", steps=20, micro_batch=16, knobs={"lr": 1e-3})
    plain = run_probe(base)
    assert plain["status"] == "ok" and plain["steps_run"] == 20
    assert plain["divergence_spike_count"] == 1
    assert plain["divergence_spikes"][0]["step"] == 8
    assert plain["divergence_spikes"][0]["cause"] == "grad_explosion"
    one_step = run_probe(replace(base, divergence={"persist_steps": 1}))
    assert one_step["divergence_cause"] == "grad_explosion" and one_step["diverged_at_step"] == 8
    assert one_step["divergence_onset_step"] == 8 and one_step["steps_run"] < 20
    clipped = run_probe(replace(base, knobs={"lr": 1e-3, "clip_norm": 1.0}))
    assert clipped["status"] == "ok" and clipped["steps_run"] == 20
    assert clipped["divergence_spike_count"] == 0
    assert clipped["metrics"]["grad_norm_max"] > 1000 * clipped["metrics"]["grad_norm_p50"]


# ----- the final loss: the trained model on the same held-out set -------------------------------


def test_the_final_loss_is_the_trained_models_on_the_same_held_out_set() -> None:
    cfg = ProbeConfig(workload="mlp", steps=40, micro_batch=16, knobs={"lr": 3e-3})
    r = run_probe(cfg)
    first, last, m = r["initial_reference"], r["final_reference"], r["metrics"]
    assert last["source"] == "held_out" and last["why"] is None
    assert (last["samples"], last["chunk"], last["batches"]) == (
        first["samples"],
        first["chunk"],
        first["batches"],
    )
    assert m["final_loss"] == pytest.approx(last["loss"]) and last["loss"] < first["loss"]
    assert m["loss_drop"] == pytest.approx(1 - last["loss"] / first["loss"])
    tail = r["series"]["loss"][-4:]  # the last 10% of 40 steps
    assert m["final_train_loss"] == pytest.approx(sum(tail) / 4)
    # a model that never moved (lr 0) ends where it started: the same samples, the same chunks
    still = run_probe(replace(cfg, knobs={"lr": 0.0}))
    assert still["final_reference"]["loss"] == pytest.approx(
        still["initial_reference"]["loss"], rel=1e-6
    )
    assert still["metrics"]["loss_drop"] == pytest.approx(0.0, abs=1e-6)


def test_without_a_held_out_set_the_final_loss_is_the_last_training_losses(odd: Path) -> None:
    r = run_probe(ProbeConfig(workload=f"{odd}:no_held_out", steps=20, micro_batch=16))
    assert r["final_reference"]["source"] == "train" and r["final_reference"]["loss"] is None
    assert r["metrics"]["final_loss"] == r["metrics"]["final_train_loss"]
    assert r["metrics"]["final_loss"] == pytest.approx(sum(r["series"]["loss"][-2:]) / 2)
