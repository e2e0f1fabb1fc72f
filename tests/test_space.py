"""autotune.space: the search-space schema, its errors, `--set`, round trips and conditioning."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import space as sp
from autotune.errors import AutotuneError, SpaceError

# Line numbers in the assertions below are found by searching the text, so editing BASE keeps
# them right; each edit of BASE must match exactly once.
BASE = """\
name: demo
description: a space for the tests
workload: {name: mlp, size: tiny}
probe:
  steps: 30
  precision: fp32
objectives:
  - {metric: loss_cv, direction: minimize}
  - {metric: throughput, direction: maximize}
knobs:
  lr: {low: 0.0001, high: 0.01, log: true}
  clip_norm: 1.0
  warmup_steps: {low: 0, high: 20, step: 5}
env:
  NCCL_ALGO: {choices: [Ring, Tree]}
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} must occur once"
    return text.replace(old, new)


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line containing `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]


def load_error(path: Path, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(SpaceError) as info:
        sp.load(path, overrides)
    message = str(info.value)
    assert "\n" not in message, "an error is one line"
    assert isinstance(info.value, AutotuneError)
    return message


# --------------------------------------------------------------------------------------------
# Errors in the file: `FILE: key.path (line N): rule`
# --------------------------------------------------------------------------------------------

# (id, file text, key path, text on the key's line, fragments of the rule and its values)
FILE_ERRORS = [
    (
        "wrong-type-section",
        edit("steps: 30", "steps: many"),
        "probe.steps",
        "steps: many",
        ["integer", "'many'"],
    ),
    (
        "wrong-type-knob",
        edit("clip_norm: 1.0", "clip_norm: high"),
        "knobs.clip_norm",
        "clip_norm: high",
        ["must be a number", "'high'"],
    ),
    (
        "wrong-type-enum",
        edit("precision: fp32", "precision: fp8"),
        "probe.precision",
        "precision: fp8",
        ["'fp16'", "'fp8'"],
    ),
    (
        "low-above-high",
        edit("lr: {low: 0.0001, high: 0.01, log: true}", "lr: {low: 0.01, high: 0.0001}"),
        "knobs.lr",
        "lr: {low: 0.01",
        ["low <= high must hold", "low=0.01", "high=0.0001"],
    ),
    (
        "log-low-zero",
        edit("clip_norm: 1.0", "clip_norm: {low: 0, high: 10, log: true}"),
        "knobs.clip_norm.low",
        "clip_norm:",
        ["log domain needs low > 0", "low=0"],
    ),
    (
        "log-low-negative",
        edit("lr: {low: 0.0001,", "lr: {low: -0.1,"),
        "knobs.lr.low",
        "lr: {low: -0.1",
        ["log domain needs low > 0", "low=-0.1"],
    ),
    (
        "unknown-knob",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  clip_nrom: 2.0\n"),
        "knobs.clip_nrom",
        "clip_nrom",
        ["unknown knob", "did you mean 'clip_norm'?"],
    ),
    (
        "env-var-under-knobs",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  NCCL_ALGO: Ring\n"),
        "knobs.NCCL_ALGO",
        "NCCL_ALGO: Ring",
        ["unknown knob", "go under `env:`"],
    ),
    (
        "unknown-top-level-key",
        BASE + "sampelr: {name: random}\n",
        "sampelr",
        "sampelr",
        ["unknown key", "did you mean 'sampler'?", "allowed: name"],
    ),
    (
        "unknown-section-key",
        edit("steps: 30", "stesp: 30"),
        "probe.stesp",
        "stesp",
        ["unknown key", "did you mean 'steps'?"],
    ),
    (
        "unknown-domain-key",
        edit("step: 5}", "stpe: 5}"),
        "knobs.warmup_steps.stpe",
        "warmup_steps:",
        ["unknown domain key", "did you mean 'step'?"],
    ),
    (
        "beta1-is-one",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  beta1: 1.0\n"),
        "knobs.beta1",
        "beta1: 1.0",
        ["out of range", "beta1 must lie in [0.0, 1.0)"],
    ),
    (
        "lr-zero",
        edit("lr: {low: 0.0001, high: 0.01, log: true}", "lr: 0"),
        "knobs.lr",
        "lr: 0",
        ["out of range", "lr must lie in (0.0, 10.0]"],
    ),
    (
        "adam-eps-negative",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  adam_eps: -1\n"),
        "knobs.adam_eps",
        "adam_eps: -1",
        ["out of range", "adam_eps must lie in (0.0, 1.0]"],
    ),
    (
        "domain-bound-out-of-range",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  beta2: {low: 0.9, high: 1.5}\n"),
        "knobs.beta2",
        "beta2:",
        ["out of range", "1.5"],
    ),
    (
        "env-ld-preload",
        BASE + "  LD_PRELOAD: /tmp/evil.so\n",
        "env.LD_PRELOAD",
        "LD_PRELOAD",
        ["refused", "NCCL_"],
    ),
    (
        "env-pythonpath",
        BASE + "  PYTHONPATH: /tmp\n",
        "env.PYTHONPATH",
        "PYTHONPATH",
        ["refused", "NCCL_"],
    ),
    (
        "env-site-setting",
        BASE + "  NCCL_SOCKET_IFNAME: eth0\n",
        "env.NCCL_SOCKET_IFNAME",
        "NCCL_SOCKET_IFNAME",
        ["site setting", "cluster's environment"],
    ),
    (
        "env-site-setting-ib",
        BASE + "  NCCL_IB_HCA: mlx5_0\n",
        "env.NCCL_IB_HCA",
        "NCCL_IB_HCA",
        ["site setting"],
    ),
    (
        "unknown-metric",
        edit("metric: loss_cv,", "metric: loss_vc,"),
        "objectives.0.metric",
        "loss_vc",
        ["unknown metric 'loss_vc'", "did you mean 'loss_cv'?"],
    ),
    (
        "unknown-constraint-metric",
        BASE + "constraints:\n  - {metric: los_drop, op: '>=', value: 0.1}\n",
        "constraints.0.metric",
        "los_drop",
        ["unknown metric 'los_drop'", "did you mean 'loss_drop'?"],
    ),
    (
        "relative-count",
        BASE + "constraints:\n  - {metric: spike_count, op: '<=', value: 2, relative_to: baseline}"
        "\n",
        "constraints.0.relative_to",
        "spike_count",
        ["spike_count cannot be relative to the baseline", "final_loss"],
    ),
    (
        "relative-signed",
        BASE + "constraints:\n  - {metric: loss_drop, op: '>=', value: 0.9, relative_to: baseline}"
        "\n",
        "constraints.0.relative_to",
        "loss_drop",
        ["loss_drop cannot be relative to the baseline"],
    ),
    (
        "relative-factor-not-positive",
        BASE + "constraints:\n  - {metric: final_loss, op: '<=', value: 0, relative_to: baseline}"
        "\n",
        "constraints.0.relative_to",
        "final_loss",
        ["value is a factor > 0 (got 0)"],
    ),
    (
        "relative-to-unknown",
        BASE + "constraints:\n  - {metric: final_loss, op: '<=', value: 1.1, relative_to: best}\n",
        "constraints.0.relative_to",
        "final_loss",
        ["'baseline'", "got 'best'"],
    ),
    (
        "duplicate-objectives",
        edit("metric: throughput, direction: maximize", "metric: loss_cv, direction: maximize"),
        "objectives",
        "objectives:",
        ["each metric at most once", "['loss_cv', 'loss_cv']"],
    ),
    (
        "choice-default-outside",
        edit("[Ring, Tree]}", "[Ring, Tree], default: X}"),
        "env.NCCL_ALGO.default",
        "NCCL_ALGO",
        ["default 'X' lies outside the domain"],
    ),
    (
        "env-range-default-outside",
        BASE + "  NCCL_MIN_NCHANNELS: {low: 1, high: 8, default: 32}\n",
        "env.NCCL_MIN_NCHANNELS.default",
        "NCCL_MIN_NCHANNELS",
        ["default 32 lies outside the domain"],
    ),
    (
        "knob-choice-typo",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  clip_mode: per_lyer\n"),
        "knobs.clip_mode",
        "clip_mode",
        ["must be one of ['global', 'per_layer']", "did you mean 'per_layer'?"],
    ),
    (
        "list-instead-of-choices",
        edit("clip_norm: 1.0", "clip_norm: [0.5, 1.0]"),
        "knobs.clip_norm",
        "clip_norm:",
        ["{choices: [...]}"],
    ),
]


@pytest.mark.parametrize(
    ("text", "key", "needle", "fragments"),
    [case[1:] for case in FILE_ERRORS],
    ids=[case[0] for case in FILE_ERRORS],
)
def test_file_error_names_file_key_line_and_rule(
    write_space: Callable[..., Path], text: str, key: str, needle: str, fragments: list[str]
) -> None:
    path = write_space(text)
    message = load_error(path)
    assert message.startswith(f"{path}: {key} (line {line_of(text, needle)}): "), message
    for fragment in fragments:
        assert fragment in message


def test_malformed_yaml_gives_line_and_column(write_space: Callable[..., Path]) -> None:
    text = edit("precision: fp32", "precision: fp32: yes")
    path = write_space(text)
    message = load_error(path)
    assert message.startswith(f"{path}: malformed YAML (line {line_of(text, 'fp32: yes')}, column ")
    assert "mapping values are not allowed" in message


def test_unclosed_flow_mapping_is_malformed_yaml(write_space: Callable[..., Path]) -> None:
    path = write_space(edit("size: tiny}", "size: tiny"))
    message = load_error(path)
    assert message.startswith(f"{path}: malformed YAML (line ")
    assert ", column " in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- a\n- b\n", "top level must be a mapping"),
        ("workload: mlp\n", ": name: required"),
        ("name: x\n", ": workload: required"),
        ("name: 'has space'\nworkload: mlp\n", ": name (line 1): required: a study name"),
    ],
)
def test_top_level_shape_errors(write_space: Callable[..., Path], text: str, fragment: str) -> None:
    message = load_error(write_space(text))
    assert fragment in message


def test_loads_names_its_source() -> None:
    with pytest.raises(SpaceError, match=r"^study x: knobs.beta1 \(line 4\): "):
        sp.loads("name: x\nworkload: mlp\nknobs:\n  beta1: 2\n", source="study x")


# --------------------------------------------------------------------------------------------
# --set key.path=value
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "check"),
    [
        ("probe.steps=60", lambda s: s.probe.steps == 60),
        ("probe.divergence.stop_early=false", lambda s: s.probe.divergence.stop_early is False),
        ("budget.trials=8", lambda s: s.budget.trials == 8),
        ("sampler.name=random", lambda s: s.sampler.name == "random"),
        ("workload.size=small", lambda s: s.workload.size == "small"),
        # A workload file given with --set is relative to the current folder (recorded absolute).
        (
            "workload.name=other.py:make",
            lambda s: s.workload.name == f"{Path('other.py').resolve()}:make",
        ),
        ("name=renamed", lambda s: s.name == "renamed"),
        ("description=other words", lambda s: s.description == "other words"),
        ("knobs.lr=0.05", lambda s: s.knobs.get("lr") == 0.05),
        ("knobs.adam_eps=1e-6", lambda s: s.knobs.get("adam_eps") == 1e-6),
        (
            "knobs.clip_norm={low: 0.5, high: 4.0, log: true}",
            lambda s: s.knobs.get("clip_norm") == sp.Domain(low=0.5, high=4.0, log=True),
        ),
        ("knobs.warmup_steps.high=40", lambda s: s.knobs["warmup_steps"].high == 40),
        ("env.NCCL_ALGO=Ring", lambda s: s.env.get("NCCL_ALGO") == "Ring"),
        ("env.NCCL_MIN_NCHANNELS=4", lambda s: s.env.get("NCCL_MIN_NCHANNELS") == 4),
        (
            "objectives=[{metric: final_loss, direction: minimize}]",
            lambda s: [o.metric for o in s.objectives] == ["final_loss"],
        ),
    ],
)
def test_set_overrides_any_key(
    write_space: Callable[..., Path], override: str, check: Callable[[sp.Space], bool]
) -> None:
    base = sp.load(write_space(BASE))
    overridden = sp.load(write_space(BASE), [override])
    assert check(overridden)
    assert not check(base), "the override must change something"


def test_later_set_wins(write_space: Callable[..., Path]) -> None:
    s = sp.load(write_space(BASE), ["probe.steps=60", "probe.steps=70"])
    assert s.probe.steps == 70


# (override, expected message prefix, fragments)
SET_ERRORS = [
    ("knobs.lr", "--set knobs.lr: ", ["expected key.path=value"]),
    ("=3", "--set =3: ", ["empty key"]),
    ("knbos.lr=0.1", "--set knbos.lr=0.1: ", ["unknown key 'knbos'", "did you mean 'knobs'?"]),
    (
        "knobs.clip_norm.low=1",
        "--set knobs.clip_norm.low=1: ",
        ["'knobs.clip_norm' is a value in {path}", "not a section"],
    ),
    ("name.x=1", "--set name.x=1: ", ["'name' is a value in {path}"]),
    ("knobs.lr=[1, 2", "--set knobs.lr=[1, 2: ", ["malformed YAML"]),
    # Validated like the file: the message says the value came from --set, not a line.
    ("knobs.beta1=1.0", "{path}: knobs.beta1 (from --set): ", ["out of range"]),
    ("knobs.lr=0", "{path}: knobs.lr (from --set): ", ["out of range"]),
    ("knobs.clip_nrom=1", "{path}: knobs.clip_nrom (from --set): ", ["did you mean 'clip_norm'?"]),
    ("probe.stesp=3", "{path}: probe.stesp (from --set): ", ["did you mean 'steps'?"]),
    ("probe.steps=abc", "{path}: probe.steps (from --set): ", ["integer", "'abc'"]),
    (
        "knobs.lr={low: 0.01, high: 0.001}",
        "{path}: knobs.lr (from --set): ",
        ["low <= high must hold"],
    ),
    ("env.LD_PRELOAD=/x.so", "{path}: env.LD_PRELOAD (from --set): ", ["refused"]),
    (
        "objectives=[{metric: loss_vc, direction: minimize}]",
        "{path}: objectives.0.metric (from --set): ",
        ["did you mean 'loss_cv'?"],
    ),
]


@pytest.mark.parametrize(
    ("override", "prefix", "fragments"), SET_ERRORS, ids=[c[0] for c in SET_ERRORS]
)
def test_bad_set(
    write_space: Callable[..., Path], override: str, prefix: str, fragments: list[str]
) -> None:
    path = write_space(BASE)
    message = load_error(path, (override,))
    assert message.startswith(prefix.format(path=path)), message
    for fragment in fragments:
        assert fragment.format(path=path) in message


def test_error_elsewhere_keeps_its_line_despite_set(write_space: Callable[..., Path]) -> None:
    text = edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  beta1: 1.0\n")
    path = write_space(text)
    message = load_error(path, ("probe.steps=40",))
    assert message.startswith(f"{path}: knobs.beta1 (line {line_of(text, 'beta1')}): ")


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


# --------------------------------------------------------------------------------------------
# Conditioning
# --------------------------------------------------------------------------------------------

COND = """\
name: cond
workload: mlp
probe: {{precision: {precision}}}
knobs:
  clip_norm: {{low: 0.1, high: 10.0, log: true}}
  init_scale: {{low: 1024, high: 65536, log: true}}
  growth_factor: {{low: 1.5, high: 4.0}}
  backoff_factor: {{low: 0.25, high: 0.75}}
  growth_interval: {{choices: [100, 2000]}}
  schedule: {schedule}
  min_lr_ratio: {{low: 0.0, high: 0.2}}
  bucket_cap_mb: {{low: 5, high: 100}}
env:
  NCCL_ALGO: {{choices: [Ring, Tree]}}
  NCCL_MIN_NCHANNELS: {{low: 1, high: 16}}
  TORCH_NCCL_HIGH_PRIORITY: {{choices: [0, 1]}}
  RCCL_MSCCL_ENABLE: {{choices: [0, 1]}}
  NCCL_PROTO: {{choices: [{protos}], default: {proto_default}}}
  ROCBLAS_INTERNAL_FP16_ALT_IMPL: {{choices: [0, 1]}}
  MIOPEN_DEBUG_CONVOLUTION_ATTRIB_FP16_ALT_IMPL: {{choices: [0, 1]}}
  HSA_ENABLE_SDMA: {{choices: [0, 1]}}
"""

SCALER = set(sp.SCALER_KNOBS)
COMM = {"NCCL_ALGO", "NCCL_MIN_NCHANNELS", "TORCH_NCCL_HIGH_PRIORITY", "RCCL_MSCCL_ENABLE"}
ALT_IMPL = set(sp.ENV_FP16_ALT_IMPL)


def cond_space(
    precision: str = "fp16",
    schedule: str = "cosine",
    protos: str = "LL, LL128, Simple",
    proto_default: str = "LL128",
) -> sp.Space:
    return sp.loads(
        COND.format(
            precision=precision, schedule=schedule, protos=protos, proto_default=proto_default
        )
    )


def test_condition_keeps_everything_where_it_acts() -> None:
    s = cond_space()
    c = sp.condition(s, platform="rocm", arch="gfx90a", world_size=8)
    assert c.dropped == {}
    assert c.searched == s.searched()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_scaler_knobs_dropped_outside_fp16(precision: str) -> None:
    c = sp.condition(cond_space(precision), platform="rocm", arch="gfx90a", world_size=8)
    assert set(c.dropped) >= SCALER
    assert not SCALER & set(c.searched)
    for name in SCALER:
        assert "GradScaler" in c.dropped[name] and precision in c.dropped[name]
    assert "clip_norm" in c.searched


def test_scaler_knobs_kept_under_fp16() -> None:
    c = sp.condition(cond_space("fp16"), platform="cuda", arch="sm_90", world_size=1)
    assert set(c.searched) >= SCALER
    assert c.searched["init_scale"] == sp.Domain(low=1024.0, high=65536.0, log=True)


@pytest.mark.parametrize(
    ("platform", "world_size", "why"),
    [("cpu", 4, "gloo on CPU"), ("rocm", 1, "one process"), ("cuda", 1, "one process")],
)
def test_comm_env_knobs_dropped_without_gpu_collectives(
    platform: str, world_size: int, why: str
) -> None:
    c = sp.condition(cond_space(), platform=platform, arch="gfx90a", world_size=world_size)
    for name in [*COMM, "NCCL_PROTO"]:
        assert name not in c.searched
        assert why in c.dropped[name], name
    assert "HSA_ENABLE_SDMA" in c.searched  # not a collective setting


def test_ddp_knobs_dropped_on_one_process() -> None:
    c = sp.condition(cond_space(), platform="cuda", world_size=1)
    assert "bucket_cap_mb" in c.dropped
    assert "bucket_cap_mb" in sp.condition(cond_space(), platform="cuda", world_size=2).searched


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950"])
def test_ll128_kept_on_archs_that_enable_it(arch: str) -> None:
    c = sp.condition(cond_space(), platform="rocm", arch=arch, world_size=8)
    assert c.searched["NCCL_PROTO"] == sp.Domain(choices=("LL", "LL128", "Simple"), default="LL128")
    assert "NCCL_PROTO=LL128" not in c.dropped


@pytest.mark.parametrize(
    ("platform", "arch"), [("rocm", "gfx908"), ("rocm", None), ("cuda", "sm_90")]
)
def test_ll128_removed_elsewhere(platform: str, arch: str | None) -> None:
    c = sp.condition(cond_space(), platform=platform, arch=arch, world_size=8)
    # The default LL128 is gone with the choice; the other protocols stay searched.
    assert c.searched["NCCL_PROTO"] == sp.Domain(choices=("LL", "Simple"))
    assert "gfx90a" in c.dropped["NCCL_PROTO=LL128"]
    assert "NCCL_PROTO" not in c.dropped


@pytest.mark.parametrize("spelling", ["ll128", "Simple,LL128", "LL, LL128"])
def test_ll128_removed_however_spelled(spelling: str) -> None:
    s = cond_space(protos=f"Simple, '{spelling}'", proto_default="Simple")
    c = sp.condition(s, platform="rocm", arch="gfx908", world_size=8)
    assert c.searched["NCCL_PROTO"] == sp.Domain(choices=("Simple",), default="Simple")


def test_ll128_exclusion_is_kept() -> None:
    s = cond_space(protos="Simple, '^LL128'", proto_default="Simple")
    c = sp.condition(s, platform="rocm", arch="gfx908", world_size=8)
    assert c.searched["NCCL_PROTO"].choices == ("Simple", "^LL128")


def test_proto_with_only_ll128_is_dropped() -> None:
    s = cond_space(protos="LL128", proto_default="LL128")
    c = sp.condition(s, platform="rocm", arch="gfx908", world_size=8)
    assert "NCCL_PROTO" not in c.searched
    assert "no protocol left" in c.dropped["NCCL_PROTO"]


def test_fp16_alt_impl_only_on_rocm_gfx90a_fp16() -> None:
    kept = sp.condition(cond_space("fp16"), platform="rocm", arch="gfx90a", world_size=8)
    assert set(kept.searched) >= ALT_IMPL
    for precision, platform, arch in [
        ("bf16", "rocm", "gfx90a"),
        ("fp16", "rocm", "gfx942"),
        ("fp16", "cuda", "gfx90a"),
        ("fp16", "rocm", None),
    ]:
        c = sp.condition(cond_space(precision), platform=platform, arch=arch, world_size=8)
        assert not ALT_IMPL & set(c.searched), (precision, platform, arch)
        for name in ALT_IMPL:
            assert "gfx90a" in c.dropped[name]


def test_min_lr_ratio_dropped_with_a_constant_schedule() -> None:
    c = sp.condition(cond_space(schedule="constant"), platform="cpu", world_size=1)
    assert "constant" in c.dropped["min_lr_ratio"]
    assert "min_lr_ratio" not in c.searched
    # No schedule in the file: PyTorch's (constant) applies.
    s = sp.loads("name: x\nworkload: mlp\nknobs:\n  min_lr_ratio: {low: 0.0, high: 0.2}\n")
    assert "min_lr_ratio" in sp.condition(s, platform="cpu").dropped


@pytest.mark.parametrize("schedule", ["cosine", "linear", "{choices: [constant, cosine]}"])
def test_min_lr_ratio_kept_with_a_decaying_or_searched_schedule(schedule: str) -> None:
    s = cond_space(schedule=schedule)
    c = sp.condition(s, platform="cpu", world_size=1)
    assert c.searched["min_lr_ratio"] == sp.Domain(low=0.0, high=0.2)


# --------------------------------------------------------------------------------------------
# find: built-in spaces by bare name
# --------------------------------------------------------------------------------------------

GRADCLIP = sp.builtin_dir() / "gradclip.yaml"


def test_find_gradclip_by_bare_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no local file of that name
    assert sp.find("gradclip") == GRADCLIP
    assert sp.find("gradclip.yaml") == GRADCLIP
    assert "gradclip" in sp.builtin_names()
    assert sp.load("gradclip") == sp.load(GRADCLIP)
    with pytest.raises(SpaceError, match=r"did you mean 'gradclip'\?"):
        sp.find("gradclp")


@pytest.fixture
def fake_builtins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of built-in spaces standing in for the shipped one; cwd is elsewhere."""
    folder = tmp_path / "builtin"
    folder.mkdir()
    for name in ("gradclip", "amp", "full"):
        (folder / f"{name}.yaml").write_text(f"name: {name}\nworkload: mlp\n")
    (folder / "notes.txt").write_text("not a space")
    monkeypatch.setattr(sp.builtin, "builtin_dir", lambda: folder)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return folder


def test_find_bare_name_in_builtin_folder(fake_builtins: Path) -> None:
    assert sp.builtin_names() == ["amp", "full", "gradclip"]
    assert sp.find("amp") == fake_builtins / "amp.yaml"
    assert sp.find("amp.yaml") == fake_builtins / "amp.yaml"
    assert sp.load("full").name == "full"


def test_local_file_wins_over_builtin(fake_builtins: Path) -> None:
    Path("amp.yaml").write_text("name: local\nworkload: mlp\n")
    assert sp.load("amp.yaml").name == "local"


def test_unknown_name_lists_builtins_with_did_you_mean(fake_builtins: Path) -> None:
    with pytest.raises(SpaceError) as info:
        sp.find("gradclp")
    message = str(info.value)
    assert message.startswith("gradclp: no such file")
    assert "did you mean 'gradclip'?" in message
    assert "built-in spaces: amp, full, gradclip" in message


def test_missing_path_with_folder_is_no_such_file(fake_builtins: Path) -> None:
    with pytest.raises(SpaceError, match=r"^sub/gradclip\.yaml: no such file$"):
        sp.load("sub/gradclip.yaml")


def test_real_builtin_listing_matches_the_folder() -> None:
    shipped = sorted(p.stem for p in sp.builtin_dir().glob("*.yaml"))
    assert sp.builtin_names() == shipped
    assert (sp.builtin_dir() / "__init__.py").is_file()


EXAMPLE_SPACES = sorted((Path(__file__).parents[1] / "examples").glob("*/space.yaml"))


@pytest.mark.parametrize(
    "ref", [*sp.builtin_names(), *map(str, EXAMPLE_SPACES)], ids=lambda r: Path(r).parent.name or r
)
def test_stability_spaces_bound_the_final_loss_by_the_baselines(ref: str) -> None:
    """A stability space (its first objective not a hardware number) keeps the final loss
    within 5% of the defaults' at the same length; a speed space (nccl) does not need to."""
    from autotune.knobs import HARDWARE_METRICS

    space = sp.load(ref)
    labels = [c.label for c in space.constraints]
    stability = space.objectives[0].metric not in HARDWARE_METRICS
    assert ("final_loss <= 1.05 x baseline" in labels) == stability, labels
    assert "loss_drop >= 0.05" in labels
    target = space.budget.target_steps
    assert target is not None and space.probe.steps < target <= 5 * space.probe.steps


def test_a_grid_space_keeps_its_name() -> None:
    s = sp.loads(
        "name: failures\nworkload: mlp\nsampler: {name: grid}\n"
        "knobs: {clip_norm: {low: 0.1, high: 1.0}}\nenv: {HSA_X: {choices: [a, b]}}\n"
    )
    assert s.name == "failures"


# ---------------------------------------------------------------------------------------------
# Seeds: what NumPy, torch, Optuna and verification's offsets accept, checked at load
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("probe.seed=99999999999999999999999", "probe.seed"),
        (f"probe.seed={2**64}", "probe.seed"),  # torch: "Overflow when unpacking long long"
        (f"probe.seed={sp.MAX_SEED + 1}", "probe.seed"),  # + verification's seeds: past NumPy's
        ("probe.seed=-1", "probe.seed"),
        (f"sampler.seed={2**32}", "sampler.seed"),  # Optuna: "Seed must be between 0 and 2**32-1"
        ("sampler.seed=-1", "sampler.seed"),
    ],
)
def test_a_seed_out_of_range_is_refused_at_load_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(SpaceError) as e:
        sp.loads(BASE, source="s.yaml", overrides=[override])
    text = str(e.value)
    assert text.startswith(f"s.yaml: {key} (from --set): a seed is a whole number from 0 to ")
    assert "\n" not in text


def test_a_seed_out_of_range_in_the_file_names_its_line() -> None:
    text = edit("  precision: fp32\n", f"  precision: fp32\n  seed: {10**30}\n")
    line = text.splitlines().index(f"  seed: {10**30}") + 1
    with pytest.raises(SpaceError, match=rf"s\.yaml: probe\.seed \(line {line}\): a seed is"):
        sp.loads(text, source="s.yaml")


SEED_EDGES = [0, sp.MAX_SEED, sp.MAX_SEED + 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, -1]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.one_of(
        st.integers(0, sp.MAX_SEED), st.integers(-(2**70), 2**70), st.sampled_from(SEED_EDGES)
    )
)
def test_a_seed_accepted_at_load_never_fails_at_seeding(seed: int) -> None:
    import numpy as np
    import optuna
    import torch

    from autotune.probe.steps import seed_everything
    from autotune.recipe.seeds import seeds_for

    try:
        space = sp.loads(BASE, overrides=[f"probe.seed={seed}", f"sampler.seed={seed}"])
    except SpaceError as e:
        assert "a seed is a whole number" in str(e)
        return
    # The probe's seed and every seed verification derives from it (the most it may ask for).
    for s in [space.probe.seed, *seeds_for(space.probe.seed, sp.MAX_VERIFY_SEEDS)]:
        seed_everything(s)
        torch.Generator().manual_seed(s)  # a workload's data order
        np.random.seed(s)  # what HF's and Lightning's seeding call, without a modulo
    optuna.samplers.TPESampler(seed=space.sampler.seed)
