"""A space read back as written (load(dump(space)) == space), its knobs' defaults, fixed values and
the baseline."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from assets.space_text import BASE
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import space as sp
from autotune.errors import SpaceError

# --------------------------------------------------------------------------------------------
# Round trip: load(dump(space)) == space
# --------------------------------------------------------------------------------------------

FULL = """\
name: full.round-trip_1
description: |
  Every kind of knob and section.
  Two lines.
workload: {name: workloads/custom.py:make, size: small}
probe:
  steps: 120
  batch: 8
  precision: fp16
  seed: 3
  device: cpu
  deterministic: true
  telemetry_every: 5
  threads: 2
  divergence: {stop_early: false, loss_explosion_factor: 20.0, scale_floor: 1.0e-6}
objectives:
  - {metric: spike_count, direction: minimize}
  - {metric: final_loss, direction: minimize}
  - {metric: tokens_per_s, direction: maximize}
constraints:
  - {metric: loss_drop, op: '>=', value: 0.1}
  - {metric: peak_mem_mb, op: '<=', value: 4096}
  - {metric: final_loss, op: '<=', value: 1.05, relative_to: baseline}
budget: {trials: 12, concurrency: 3, trial_timeout_s: 90, cpus_per_trial: 1.5, gpus_per_trial: 0}
sampler: {name: grid, seed: 7, grid_points: 4}
knobs:
  lr: {low: 1.0e-4, high: 1.0e-2, log: true, default: 3.0e-3}
  adam_eps: {choices: [1e-8, 1e-6, 1e-4], default: 1e-6}
  beta2: {low: 0.95, high: 0.999}
  weight_decay: 0.1
  clip_norm: {low: 0.0, high: 2.0, step: 0.25}
  clip_mode: {choices: [global, per_layer], default: per_layer}
  warmup_steps: {low: 0, high: 40, step: 10, default: 10}
  schedule: cosine
  min_lr_ratio: {low: 0.0, high: 0.2}
  init_scale: {low: 1024, high: 65536, log: true}
  growth_interval: {choices: [100, 2000]}
  accum_steps: 2
  static_graph: {choices: [true, false]}
  broadcast_buffers: false
env:
  NCCL_PROTO: {choices: [LL, LL128, Simple]}
  NCCL_MIN_NCHANNELS: {low: 1, high: 16, step: 1, default: 4}
  NCCL_ALGO: Ring
  HSA_ENABLE_SDMA: "0"
  RCCL_MSCCL_ENABLE: 1
"""

HAND_WRITTEN = {
    "minimal": "name: m\nworkload: mlp\n",
    "base": BASE,
    "full": FULL,
    "string-workload-and-fixed-only": (
        "name: fixed\nworkload: tiny_gpt\nknobs: {lr: 0.001, clip_norm: 0.5}\n"
    ),
}

ROUND_TRIP_CASES = [pytest.param("text", key, id=f"hand:{key}") for key in HAND_WRITTEN] + [
    pytest.param("builtin", name, id=f"builtin:{name}") for name in sp.builtin_names()
]


@pytest.mark.parametrize(("kind", "key"), ROUND_TRIP_CASES)
def test_round_trip(write_space: Callable[..., Path], tmp_path: Path, kind: str, key: str) -> None:
    original = sp.loads(HAND_WRITTEN[key], source=key) if kind == "text" else sp.load(key)
    original = sp.anchor_workload(original, tmp_path)  # as a file there reads a relative one
    text = sp.dump(original)
    reloaded = sp.load(write_space(text, "dumped.yaml"))
    assert reloaded == original
    # Field by field too, so the test does not rest on Space.__eq__ alone.
    for field in ("name", "description", "workload", "probe", "objectives", "constraints"):
        assert getattr(reloaded, field) == getattr(original, field), field
    assert (reloaded.budget, reloaded.sampler) == (original.budget, original.sampler)
    assert dict(reloaded.knobs) == dict(original.knobs)
    assert dict(reloaded.env) == dict(original.env)
    assert {k: type(v) for k, v in reloaded.env.items()} == {
        k: type(v) for k, v in original.env.items()
    }
    assert sp.dump(reloaded) == text


def test_full_space_is_read_as_written() -> None:
    s = sp.loads(FULL)
    assert s.description == "Every kind of knob and section.\nTwo lines.\n"
    assert s.knobs["lr"] == sp.Domain(low=1e-4, high=1e-2, log=True, default=3e-3)
    # YAML 1.1 reads 1e-8 (no dot) as a string: numeric knobs take it as a number anyway.
    assert s.knobs["adam_eps"] == sp.Domain(choices=(1e-8, 1e-6, 1e-4), default=1e-6)
    assert s.knobs["warmup_steps"] == sp.Domain(low=0, high=40, step=10, default=10)
    assert isinstance(s.knobs["warmup_steps"].low, int)
    assert s.knobs["schedule"] == "cosine"
    assert s.env["HSA_ENABLE_SDMA"] == "0"
    assert s.env["RCCL_MSCCL_ENABLE"] == 1
    assert s.probe.divergence.scale_floor == 1e-6
    assert s.sampler.grid_points == 4
    assert [c.label for c in s.constraints] == [
        "loss_drop >= 0.1",
        "peak_mem_mb <= 4096",
        "final_loss <= 1.05 x baseline",
    ]


def test_an_absolute_constraint_dumps_without_relative_to() -> None:
    """Spaces without a relative constraint dump (and fingerprint) as before."""
    text = sp.dump(sp.loads(BASE))
    assert "loss_drop" in text and "relative_to" not in text


@given(
    metric=st.sampled_from(sorted(sp.METRICS)),
    op=st.sampled_from([">=", "<="]),
    factor=st.floats(min_value=-10.0, max_value=10.0, allow_nan=False),
)
@settings(max_examples=60, deadline=None)
def test_relative_constraint_accepted_only_for_a_positive_metric_and_factor(
    metric: str, op: str, factor: float
) -> None:
    text = BASE + f"constraints:\n  - {{metric: {metric}, op: '{op}', value: {factor!r}, "
    text += "relative_to: baseline}\n"
    if metric == "scaling_efficiency":  # measured only by a DDP probe that times one process
        text = text.replace("probe:\n", "probe:\n  world_size: 2\n  measure_scaling: true\n")
    if metric in sp.POSITIVE_METRICS and factor > 0:
        space = sp.loads(text)
        assert space.constraints[0].relative_to == "baseline"
        assert sp.loads(sp.dump(space)) == space
    else:
        with pytest.raises(SpaceError, match=r"constraints\.0\.relative_to"):
            sp.loads(text)


def test_equality_sees_a_changed_knob() -> None:
    a = sp.loads(BASE)
    assert a == sp.loads(BASE, source="elsewhere.yaml"), "the source is not part of equality"
    assert a != sp.loads(BASE, overrides=["knobs.clip_norm=2.0"])
    assert a != sp.loads(BASE, overrides=["env.NCCL_ALGO={choices: [Ring]}"])


# --------------------------------------------------------------------------------------------
# Defaults, fixed values and the baseline
# --------------------------------------------------------------------------------------------


def test_knob_defaults_are_pytorchs() -> None:
    import torch

    adamw = inspect.signature(torch.optim.AdamW).parameters
    assert (sp.KNOBS["beta1"].default, sp.KNOBS["beta2"].default) == adamw["betas"].default
    assert sp.KNOBS["adam_eps"].default == adamw["eps"].default
    assert sp.KNOBS["weight_decay"].default == adamw["weight_decay"].default
    scaler = inspect.signature(torch.amp.GradScaler).parameters
    for name in sp.SCALER_KNOBS:
        assert sp.KNOBS[name].default == scaler[name].default, name


def test_every_knob_default_lies_in_its_valid_range() -> None:
    for info in sp.KNOBS.values():
        if info.default is None:
            continue
        if info.kind in ("choice", "bool"):
            assert info.kind == "bool" or info.default in info.choices, info.name
            continue
        s = sp.loads(f"name: x\nworkload: mlp\nknobs: {{{info.name}: {info.default!r}}}\n")
        assert s.knobs[info.name] == info.default


@pytest.mark.parametrize(
    ("knob", "domain", "expected"),
    [
        # an explicit default wins
        ("clip_norm", "{low: 0.1, high: 10.0, log: true, default: 2.0}", 2.0),
        ("clip_mode", "{choices: [global, per_layer], default: per_layer}", "per_layer"),
        # else PyTorch's default when the domain holds it
        ("adam_eps", "{low: 1.0e-10, high: 1.0e-6, log: true}", 1e-8),
        ("beta2", "{low: 0.95, high: 0.9999}", 0.999),
        ("warmup_steps", "{low: 0, high: 100}", 0),
        ("clip_mode", "{choices: [per_layer, global]}", "global"),
        ("growth_interval", "{low: 100, high: 5000, log: true}", 2000),
        # else the midpoint: geometric for log, arithmetic otherwise, first choice
        ("clip_norm", "{low: 0.1, high: 10.0, log: true}", 1.0),
        ("weight_decay", "{low: 0.05, high: 0.15}", 0.1),
        ("lr", "{low: 1.0e-4, high: 1.0e-2, log: true}", 1e-3),
        ("warmup_steps", "{low: 10, high: 30}", 20),
        ("warmup_steps", "{low: 10, high: 40, step: 10}", 30),
        ("accum_steps", "{low: 2, high: 8, log: true}", 4),
        ("schedule", "{choices: [cosine, linear]}", "cosine"),
    ],
)
def test_default_value(knob: str, domain: str, expected: object) -> None:
    # 840: divisible by every accumulation 2..8 (probe.batch is split into micro-batches)
    s = sp.loads(f"name: x\nworkload: mlp\nprobe: {{batch: 840}}\nknobs:\n  {knob}: {domain}\n")
    value = s.default_value(knob)
    if isinstance(expected, float):
        assert isinstance(value, float)
        assert math.isclose(value, expected, rel_tol=1e-9)
    else:
        assert value == expected
        assert type(value) is type(expected)
    assert s.fixed_knobs()[knob] == value


def test_fixed_knobs_cover_every_knob() -> None:
    s = sp.loads(BASE + "  NCCL_MIN_NCHANNELS: {low: 2, high: 8}\n")
    fixed = s.fixed_knobs()
    assert list(fixed) == list(sp.KNOBS)
    assert fixed["clip_norm"] == 1.0  # fixed in the file
    assert fixed["lr"] == pytest.approx(1e-3)  # geometric midpoint: lr has no PyTorch default
    assert fixed["warmup_steps"] == 0  # PyTorch's default, inside the domain
    assert fixed["beta1"] == 0.9 and fixed["schedule"] == "constant"  # not in the file
    assert s.fixed_env() == {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "5"}


def test_baseline_puts_searched_knobs_at_pytorch_defaults_except_lr() -> None:
    text = """\
name: b
workload: mlp
knobs:
  lr: {low: 1.0e-4, high: 1.0e-2, log: true, default: 3.0e-3}
  clip_norm: {low: 0.1, high: 10.0, log: true, default: 1.0}
  adam_eps: {choices: [1.0e-6, 1.0e-4]}
  warmup_steps: {low: 10, high: 50}
  clip_mode: per_layer
  weight_decay: 0.1
env:
  NCCL_ALGO: {choices: [Ring, Tree]}
  NCCL_PROTO: Simple
"""
    s = sp.loads(text)
    base = s.baseline_knobs()
    assert list(base) == list(sp.KNOBS)
    # searched: PyTorch's default even where the domain excludes it
    assert base["clip_norm"] == 0.0
    assert base["adam_eps"] == 1e-8
    assert base["warmup_steps"] == 0
    # lr is the study's
    assert base["lr"] == 3e-3
    # fixed ones are kept; the rest is PyTorch's
    assert base["clip_mode"] == "per_layer"
    assert base["weight_decay"] == 0.1
    assert base["beta2"] == 0.999
    assert s.baseline_env() == {"NCCL_PROTO": "Simple"}


def test_baseline_lr_without_default_is_the_domain_midpoint() -> None:
    s = sp.loads("name: b\nworkload: mlp\nknobs:\n  lr: {low: 1.0e-4, high: 1.0e-2, log: true}\n")
    assert s.baseline_knobs()["lr"] == pytest.approx(1e-3)
    assert sp.loads("name: b\nworkload: mlp\n").baseline_knobs()["lr"] is None
