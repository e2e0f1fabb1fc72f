"""The probe applies every knob honestly and measures what it claims (real torch on CPU)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.probe import (
    ProbeConfig,
    build_optimizer,
    build_scaler,
    clip_gradients,
    forward_backward,
    lr_at,
    metrics,
    resolve_knobs,
    run_probe,
)
from autotune.probe.workload import resolve


def probe(steps: int = 40, **knobs: object) -> ProbeConfig:
    return ProbeConfig(workload="mlp", size="tiny", steps=steps, micro_batch=16, knobs=knobs)


# ----- the schedule ------------------------------------------------------------------------


def test_lr_warmup_is_linear_to_peak() -> None:
    lrs = [
        lr_at(s, peak=1.0, warmup=4, schedule="constant", total=10, min_ratio=0.0) for s in range(6)
    ]
    assert lrs == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_lr_linear_and_cosine_decay_end_at_min_ratio() -> None:
    kw = {"peak": 2.0, "warmup": 2, "total": 12, "min_ratio": 0.1}
    linear = [lr_at(s, schedule="linear", **kw) for s in range(12)]
    cosine = [lr_at(s, schedule="cosine", **kw) for s in range(12)]
    assert linear[2] == pytest.approx(2.0) and cosine[2] == pytest.approx(2.0)
    assert linear[-1] == pytest.approx(0.2) and cosine[-1] == pytest.approx(0.2)
    # halfway through the decay: linear is at the mean of peak and floor, cosine too (cos(pi/2))
    mid = 2 + (12 - 2 - 1) / 2
    assert lr_at(int(mid * 2) // 2, schedule="linear", **kw) > lr_at(9, schedule="linear", **kw)
    assert np.all(np.diff(linear[2:]) < 0) and np.all(np.diff(cosine[2:]) < 0)
    assert cosine[3] > linear[3]  # cosine stays high early


def test_probe_lr_series_follows_the_schedule_exactly() -> None:
    cfg = probe(steps=30, lr=0.01, warmup_steps=5, schedule="cosine", min_lr_ratio=0.2)
    r = run_probe(cfg)
    expected = [
        lr_at(s, peak=0.01, warmup=5, schedule="cosine", total=30, min_ratio=0.2) for s in range(30)
    ]
    assert r["series"]["lr"] == pytest.approx(expected, rel=0, abs=0)


# The LR schedule of the target length (design rungs.md section 2.3): a probe is a prefix.
PREFIX_KNOBS = {"lr": 0.02, "warmup_steps": 5, "min_lr_ratio": 0.0}


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_a_probe_scheduled_over_the_target_is_the_targets_first_steps(schedule: str) -> None:
    knobs = {**PREFIX_KNOBS, "schedule": schedule}
    long = run_probe(probe(steps=120, **knobs))
    short = run_probe(replace(probe(steps=40, **knobs), schedule_steps=120))
    own = run_probe(probe(steps=40, **knobs))
    assert short["schedule_steps"] == 120 and own["schedule_steps"] == 40
    assert short["series"]["lr"] == long["series"]["lr"][:40]
    assert short["series"]["loss"] == long["series"]["loss"][:40]  # bit for bit on CPU
    # Scheduled over its own 40 steps the probe decays sooner: another curve, other losses.
    assert own["series"]["lr"][-1] < short["series"]["lr"][-1]
    assert own["series"]["loss"] != short["series"]["loss"]


def test_schedule_steps_changes_nothing_under_a_constant_schedule() -> None:
    knobs = {**PREFIX_KNOBS, "schedule": "constant"}
    own = run_probe(probe(steps=40, **knobs))
    short = run_probe(replace(probe(steps=40, **knobs), schedule_steps=120))
    assert short["series"]["lr"] == own["series"]["lr"]
    assert short["series"]["loss"] == own["series"]["loss"]


# ----- clipping -------------------------------------------------------------------------------


def _params_with_grads(seed: int = 0, scale: float = 10.0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (5, 7, 3)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * scale
    return params


def test_global_clip_matches_torch_and_bounds_the_norm() -> None:
    mine, ref = _params_with_grads(), _params_with_grads()
    total, layer_norms, clipped = clip_gradients(mine, 1.0, per_layer=False)
    ref_total = torch.nn.utils.clip_grad_norm_(ref, 1.0)
    assert float(total) == pytest.approx(float(ref_total), rel=1e-6)
    assert bool(clipped)
    for a, b in zip(mine, ref, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad)
    after = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in mine if p.grad is not None])
    )
    assert float(after) <= 1.0 + 1e-5
    assert layer_norms.shape == (3,)


def test_per_layer_clip_bounds_each_tensor() -> None:
    params = _params_with_grads()
    before = [float(p.grad.norm()) for p in params if p.grad is not None]
    clip_gradients(params, 0.5, per_layer=True)
    after = [float(p.grad.norm()) for p in params if p.grad is not None]
    assert all(a <= 0.5 + 1e-5 for a in after)
    assert all(b > 0.5 for b in before)  # every one was clipped, each to its own bound


def test_no_clip_leaves_grads_and_reports_the_norm() -> None:
    params = _params_with_grads()
    before = [p.grad.clone() for p in params if p.grad is not None]
    total, _, clipped = clip_gradients(params, 0.0, per_layer=False)
    for b, p in zip(before, params, strict=True):
        torch.testing.assert_close(b, p.grad)
    assert not bool(clipped)
    assert float(total) == pytest.approx(float(torch.linalg.vector_norm(torch.cat(before))))


def test_probe_clipping_fires_and_is_counted() -> None:
    loose = run_probe(probe(steps=20, lr=0.01, clip_norm=0.0))
    tight = run_probe(probe(steps=20, lr=0.01, clip_norm=0.05))
    assert loose["metrics"]["clip_fraction"] == 0.0
    assert tight["metrics"]["clip_fraction"] > 0.5


# ----- accumulation -----------------------------------------------------------------------------


def test_accumulation_4x8_gives_the_gradient_of_one_batch_of_32() -> None:
    workload = resolve("mlp", "tiny")
    big = next(workload.batches(32, seed=3))
    grads = []
    for parts in ([big], [tuple(t[i : i + 8] for t in big) for i in range(0, 32, 8)]):
        torch.manual_seed(0)
        model = workload.build_model()
        scaler = build_scaler(resolve_knobs({}, 1e-3), torch.device("cpu"), enabled=False)
        loss, samples, _ = forward_backward(model, workload, parts, scaler, None)
        assert samples == 32
        grads.append(([p.grad.clone() for p in model.parameters()], float(loss)))
    (g1, l1), (g4, l4) = grads
    assert l1 == pytest.approx(l4, rel=1e-6)
    for a, b in zip(g1, g4, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_probe_effective_batch_is_micro_times_accum() -> None:
    r = run_probe(probe(steps=12, accum_steps=4))
    assert r["effective_batch"] == 64 and r["samples_per_step"] == 64


# ----- optimizer and GradScaler knobs ------------------------------------------------------------


def test_adamw_knobs_reach_the_optimizer() -> None:
    k = resolve_knobs(
        {"lr": 0.02, "adam_eps": 1e-6, "beta1": 0.8, "beta2": 0.95, "weight_decay": 0.1}, 1e-3
    )
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(3))], k, torch.device("cpu"))
    group = opt.param_groups[0]
    assert group["eps"] == 1e-6 and group["betas"] == (0.8, 0.95)
    assert group["lr"] == 0.02 and group["weight_decay"] == 0.1


def test_grad_scaler_knobs_reach_the_scaler() -> None:
    k = resolve_knobs(
        {"init_scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 7},
        1e-3,
    )
    scaler = build_scaler(k, torch.device("cpu"), enabled=True)
    assert scaler.get_scale() == 1024.0
    assert scaler.get_growth_factor() == 4.0 and scaler.get_backoff_factor() == 0.25
    assert scaler.get_growth_interval() == 7


def test_fp16_scaler_grows_on_schedule_and_skipped_steps_are_counted() -> None:
    grows = run_probe(
        ProbeConfig(
            workload="mlp",
            steps=12,
            micro_batch=16,
            precision="fp16",
            knobs={"init_scale": 8.0, "growth_interval": 5},
        )
    )
    scale = grows["series"]["scale"]
    assert scale[:5] == [8.0] * 5 and scale[5] == 16.0 and scale[10] == 32.0
    assert grows["metrics"]["skipped_steps"] == 0
    # A huge initial scale overflows fp16: the first steps are skipped and the scale backs off.
    skips = run_probe(
        ProbeConfig(
            workload="mlp",
            steps=30,
            micro_batch=16,
            precision="fp16",
            knobs={"init_scale": 2.0**24, "backoff_factor": 0.5},
        )
    )
    skipped = skips["series"]["skipped"]
    assert skipped[0] and skips["metrics"]["skipped_steps"] == sum(skipped) > 0
    first_ok = skipped.index(False)
    assert skips["series"]["scale"][first_ok] == 2.0 ** (24 - first_ok)
    assert skips["status"] == "ok"  # overflow skips are the scaler working, not divergence


def test_bf16_runs_without_a_scaler() -> None:
    r = run_probe(ProbeConfig(workload="mlp", steps=15, micro_batch=16, precision="bf16"))
    assert r["status"] == "ok" and "final_scale" not in r["metrics"]
    assert all(math.isfinite(x) for x in r["series"]["loss"])


# ----- seeds and determinism ---------------------------------------------------------------------


def test_same_seed_gives_identical_losses_and_another_seed_does_not() -> None:
    a = run_probe(probe(steps=25, lr=0.01))
    b = run_probe(probe(steps=25, lr=0.01))
    c = run_probe(ProbeConfig(workload="mlp", steps=25, micro_batch=16, seed=1, knobs={"lr": 0.01}))
    assert a["series"]["loss"] == b["series"]["loss"]
    assert a["series"]["loss"] != c["series"]["loss"]


def test_deterministic_mode_is_applied_and_recorded() -> None:
    try:
        r = run_probe(ProbeConfig(workload="mlp", steps=10, micro_batch=16, deterministic=True))
        assert r["determinism"]["use_deterministic_algorithms"] is True
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


# ----- divergence -----------------------------------------------------------------------------


def test_unstable_config_diverges_with_a_cause_and_stops_early() -> None:
    # mlp at lr 5 sits at 30-50x its reference for ~30 steps: a divergence once k = 20 spikes
    # persisted (the default k = 100 leaves it to the final-loss constraint: it then stalls)
    r = run_probe(replace(probe(steps=200, lr=5.0), divergence={"persist_steps": 20}))
    assert r["status"] == "diverged" and r["diverged"]
    assert r["divergence_cause"] in {"nonfinite_loss", "loss_explosion", "grad_explosion"}
    assert r["steps_run"] < 200  # stopped early
    assert r["diverged_at_step"] is not None and r["diverged_at_step"] < r["steps_run"]
    # It blows up within the first steps, which are checked one by one: the explosion begins
    # there (its onset), and is a divergence once it persisted (probe.divergence.persist_steps)
    # or went non-finite; the probe stops at the fetch that reached the verdict.
    assert r["divergence_onset_step"] < metrics.throughput_warmup_steps(200)
    assert r["divergence_onset_step"] in [s["step"] for s in r["divergence_spikes"]]
    assert r["steps_run"] <= r["diverged_at_step"] + 10  # telemetry_every


EXPLODING = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Exploding:
        '''A linear model whose gradient (not its loss) is multiplied by 1e6 at step 30.'''
        name, size, default_lr, unstable_lr = "exploding", "tiny", 1e-2, 1e-1

        def __init__(self, size="tiny"):
            self.size = size

        def build_model(self):
            return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

        def batches(self, micro_batch, seed):
            g = torch.Generator().manual_seed(seed)
            step = 0
            while True:
                x = torch.randn(micro_batch, 4, generator=g)
                boost = torch.tensor(1e6 if step == 30 else 0.0)
                step += 1
                yield x, x.sum(dim=1, keepdim=True), boost

        def eval_batches(self, micro_batch):
            return [next(self.batches(micro_batch, 99))]

        def loss(self, model, batch):
            x, y, boost = batch
            w = model[2].weight
            base = ((model(x) - y) ** 2).mean()
            return base + boost * (w.sum() - w.sum().detach())  # same value, huge gradient

        def samples(self, batch):
            return len(batch[0])

        def tokens(self, batch):
            return 0

    def make(size="tiny"):
        return Exploding(size)
    """
)


def test_gradient_explosion_keeps_an_anomaly_report(tmp_path: Path) -> None:
    (tmp_path / "exploding.py").write_text(EXPLODING)
    cfg = ProbeConfig(
        workload=f"{tmp_path / 'exploding.py'}:make",
        steps=60,
        micro_batch=8,
        telemetry_every=10,
        knobs={"lr": 1e-3},
    )
    # One exploding gradient is a spike, not a divergence: the run goes on, and the report of
    # the layers is kept at that step. Under the one-step rule (persist_steps 1) it is the verdict.
    spike = run_probe(cfg)
    assert spike["status"] == "ok" and spike["steps_run"] == 60
    assert [(s["step"], s["cause"]) for s in spike["divergence_spikes"]] == [(30, "grad_explosion")]
    assert spike["anomaly"]["step"] == 30
    r = run_probe(replace(cfg, divergence={"persist_steps": 1}))
    assert r["status"] == "diverged" and r["divergence_cause"] == "grad_explosion"
    assert r["diverged_at_step"] == 30
    anomaly = r["anomaly"]
    assert anomaly["step"] == 30 and anomaly == spike["anomaly"]
    top = anomaly["layers"][0]
    assert top["name"] == "2.weight"  # the boosted layer is first
    norms = [x["grad_norm"] for x in anomaly["layers"]]
    assert norms == sorted(norms, reverse=True)


def test_report_callable_gets_start_telemetry_and_summary() -> None:
    seen: list[dict] = []
    run_probe(probe(steps=25), seen.append)
    events = [m["event"] for m in seen]
    assert events[0] == "start" and events[-1] == "summary"
    tele = [m for m in seen if m["event"] == "telemetry"]
    # each of the first max(3, ceil(10% of 25)) = 3 steps, then every telemetry_every (10)
    assert metrics.throughput_warmup_steps(25) == 3
    assert [m["first_step"] for m in tele] == [0, 1, 2, 3, 13, 23]
    assert sum(len(m["loss"]) for m in tele) == 25


DETACHED = textwrap.dedent(
    """
    import torch
    from autotune.workloads.mlp import MLPWorkload

    class Detached(MLPWorkload):
        '''From step 3 on, a loss without a graph: NaN, or a finite number.'''

        def __init__(self, size, value):
            super().__init__(size)
            self.value, self.calls = value, 0

        def loss(self, model, batch):
            self.calls += torch.is_grad_enabled()  # training steps (not the held-out reference)
            if self.calls > 3:
                return torch.tensor(self.value)
            return super().loss(model, batch)

    def nan(size="tiny"):
        return Detached(size, float("nan"))

    def finite(size="tiny"):
        return Detached(size, 1.0)

    class Orphan(Detached):
        '''A NaN loss that requires grad but depends on no parameter of the model.'''

        def loss(self, model, batch):
            out = super().loss(model, batch)
            return out if out.requires_grad else out.clone().requires_grad_()

    def orphan(size="tiny"):
        return Orphan(size, float("nan"))
    """
)


@pytest.mark.parametrize(
    ("factory", "precision"), [("nan", "fp32"), ("nan", "fp16"), ("orphan", "fp32")]
)
def test_a_nan_loss_without_a_graph_is_a_nonfinite_divergence(
    tmp_path: Path, factory: str, precision: str
) -> None:
    (tmp_path / "detached.py").write_text(DETACHED)
    cfg = ProbeConfig(
        workload=f"{tmp_path / 'detached.py'}:{factory}",
        steps=20,
        micro_batch=8,
        precision=precision,
    )
    seen: list[dict] = []
    r = run_probe(cfg, seen.append)
    assert r["status"] == "diverged" and r["divergence_cause"] == "nonfinite_loss"
    assert r["diverged_at_step"] == 3 and r["steps_run"] == 4
    assert math.isnan(r["series"]["loss"][3]) and math.isfinite(r["series"]["loss"][2])
    assert sum(len(m["loss"]) for m in seen if m["event"] == "telemetry") == 4


def test_a_finite_loss_without_a_graph_fails_naming_the_workload_loss(tmp_path: Path) -> None:
    from autotune.errors import WorkloadError

    (tmp_path / "detached.py").write_text(DETACHED)
    cfg = ProbeConfig(workload=f"{tmp_path / 'detached.py'}:finite", steps=20, micro_batch=8)
    with pytest.raises(WorkloadError, match=r"loss\(\) returned a tensor that does not require"):
        run_probe(cfg)


@pytest.mark.parametrize("accum", [2, 4])
def test_accumulation_splits_the_batch_it_does_not_grow_it(accum: int) -> None:
    """Equal data: two trials that differ only in accum_steps see the same samples per step."""
    from autotune import space as sp

    space = sp.loads(
        "name: eq\nworkload: mlp\nprobe: {steps: 10, batch: 16, device: cpu}\n"
        "knobs: {lr: 0.003, accum_steps: {choices: [1, 2, 4]}}\n"
    )
    runs = []
    for a in (1, accum):
        knobs = {**space.fixed_knobs(), "accum_steps": a}
        cfg = sp.probe_config(space, knobs=knobs)
        assert cfg.micro_batch == 16 // a
        runs.append(run_probe(cfg))
    one, split = runs
    assert one["samples_per_step"] == split["samples_per_step"] == 16
    assert one["samples_seen"] == split["samples_seen"] == 16 * 10
    assert split["effective_batch"] == 16 and split["accum_steps"] == accum
