"""Space files with errors: `FILE: key.path (line N): rule` for every rule, malformed YAML,
and `--set key.path=value`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from assets.space_text import BASE, edit, line_of, load_error

from autotune import space as sp
from autotune.errors import SpaceError

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
    (  # YAML 1.1 reads an exponent without a dot as text: the number to write instead
        "exponent-as-text",
        edit("steps: 30", "steps: 3e3"),
        "probe.steps",
        "steps: 3e3",
        ["integer", "'3e3'", "YAML reads 3e3 as text; write the number out (3000)"],
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
        "duplicate-choices",
        edit("clip_norm: 1.0", "clip_norm: {choices: [0.5, 0.5]}"),
        "knobs.clip_norm.choices",
        "clip_norm:",
        ["duplicate choices in [0.5, 0.5]"],
    ),
    (
        "duplicate-choices-int-and-float",
        edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  accum_steps: {choices: [1, 1.0, 2]}\n"),
        "knobs.accum_steps.choices",
        "accum_steps:",
        ["duplicate choices in [1, 1.0, 2]"],
    ),
    (
        "duplicate-choices-spelled-as-text",
        edit("clip_norm: 1.0", "clip_norm: {choices: [0.1, 1e-1]}"),
        "knobs.clip_norm.choices",
        "clip_norm:",
        ["duplicate choices in [0.1, '1e-1']"],
    ),
    (
        "duplicate-env-choices",
        edit("{choices: [Ring, Tree]}", "{choices: [1, '1']}"),
        "env.NCCL_ALGO.choices",
        "NCCL_ALGO",
        ["duplicate choices in [1, '1']"],
    ),
    (
        "list-instead-of-choices",
        edit("clip_norm: 1.0", "clip_norm: [0.5, 1.0]"),
        "knobs.clip_norm",
        "clip_norm:",
        ["{choices: [...]}"],
    ),
    # A misspelt required key is named as the unknown key, not as the missing one.
    (
        "typo-of-a-required-key",
        edit("{metric: loss_cv, direction: minimize}", "{metric: loss_cv, directon: minimize}"),
        "objectives.0.directon",
        "directon",
        ["unknown key", "did you mean 'direction'?"],
    ),
    (
        "typo-of-a-required-constraint-key",
        edit("env:", "constraints: [{metric: loss_drop, op: '>=', valeu: 0.1}]\nenv:"),
        "constraints.0.valeu",
        "valeu",
        ["did you mean 'value'?"],
    ),
    # YAML 1.1 reads on/off/yes/no as booleans: the error says so and how to quote it.
    (
        "yaml-off-is-false",
        edit("env:\n", "env:\n  NCCL_DEBUG: off\n"),
        "env.NCCL_DEBUG",
        "NCCL_DEBUG",
        ["got False", "YAML reads unquoted `off` as false", "'off'"],
    ),
    (
        "yaml-on-is-true",
        edit("clip_norm: 1.0", "clip_norm: 1.0\n  clip_mode: on"),
        "knobs.clip_mode",
        "clip_mode",
        ["got True", "YAML reads unquoted `on` as true", "'on'"],
    ),
    (
        "name-not-a-string",
        edit("name: demo", "name: 123"),
        "name",
        "name: 123",
        ["must be a string", "quote it ('123')"],
    ),
    # YAML 1.1 reads 012 as octal 10: refused rather than run as another number.
    (
        "leading-zero-integer",
        edit("env:\n", "env:\n  NCCL_NTHREADS: 012\n"),
        "env.NCCL_NTHREADS",
        "NCCL_NTHREADS",
        ["octal number 10", "quote it ('012')"],
    ),
    # ... and 1:30 as the base-60 number 90 (a black-box review: `steps: 1:30` ran 90 steps)
    (
        "base-60-integer",
        edit("steps: 30", "steps: 1:30"),
        "probe.steps",
        "steps: 1:30",
        ["base-60 number 90", "quote it ('1:30')", "write 90 if that is meant"],
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


SECTION_TYPES = {
    "probe": "a mapping",
    "budget": "a mapping",
    "sampler": "a mapping",
    "verify": "a mapping",
    "rungs": "a mapping",
    "knobs": "a mapping of knob",
    "env": "a mapping of VARIABLE",
    "description": "text",
}


WRONG_TYPES = [("[]", "list"), ("0", "int"), ('""', "str"), ("false", "bool"), ("[1]", "list")]


@pytest.mark.parametrize(
    ("key", "value", "got"),
    [
        (key, value, got)
        for key in SECTION_TYPES
        for value, got in WRONG_TYPES
        if (key, got) != ("description", "str")  # text is what a description is
    ],
)
def test_a_section_of_the_wrong_type_is_refused_even_when_empty(
    write_space: Callable[..., Path], key: str, value: str, got: str
) -> None:
    """`verify: false` read as the defaults (and verification ran); `probe: []`, `budget: 0`,
    `env: ""` were silently the defaults too, while `probe: [1]` was refused."""
    path = write_space(f"name: x\nworkload: mlp\n{key}: {value}\n")
    message = load_error(path)
    assert message.startswith(f"{path}: {key} (line 3): "), message
    assert f"must be {SECTION_TYPES[key]}" in message and f"got {got}" in message, message


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("verify", "`verify: {top_k: 0}` turns verification off"),
        ("rungs", "a study has rungs only with budget.target_steps: leave that out for none"),
    ],
)
def test_turning_a_section_off_with_false_says_how(
    write_space: Callable[..., Path], key: str, instead: str
) -> None:
    message = load_error(write_space(f"{BASE}{key}: false\n"))
    assert message.endswith(f"{key} (line 16): must be a mapping, got bool; {instead}"), message


def test_a_section_given_nothing_is_its_defaults(write_space: Callable[..., Path]) -> None:
    text = "name: x\nworkload: mlp\n" + "".join(f"{key}:\n" for key in SECTION_TYPES)
    space = sp.load(write_space(text))
    assert (space.verify.top_k, space.rungs.eta, space.knobs, space.env) == (3, 3, {}, {})
    assert space.description == "" and space.budget.trials == 20


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
        # An integer segment indexes a list the file has.
        ("objectives.1.metric=final_loss", lambda s: s.objectives[1].metric == "final_loss"),
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
    # YAML 1.1 reads a --set value as it reads the file: the same hint, the same refusal.
    (
        "env.NCCL_DEBUG=off",
        "{path}: env.NCCL_DEBUG (from --set): ",
        ["got False", "YAML reads unquoted `off` as false: quote it, 'off'"],
    ),
    (
        "env={NCCL_DEBUG: 'yes', NCCL_ALGO: no}",
        "{path}: env.NCCL_ALGO (from --set): ",
        ["got False", "YAML reads unquoted `no` as false"],
    ),
    ("env.NCCL_NTHREADS=012", "{path}: env.NCCL_NTHREADS (from --set): ", ["octal number 10"]),
    ("probe.seed=1:00:00", "{path}: probe.seed (from --set): ", ["base-60 number 3600"]),
    ("knobs.lr=0:30.5", "{path}: knobs.lr (from --set): ", ["base-60 number 30.5"]),
    ("knobs..lr=1", "--set knobs..lr=1: ", ["an empty segment in 'knobs..lr'"]),
    ("knobs.lr.=1", "--set knobs.lr.=1: ", ["an empty segment"]),
    (
        "objectives.2.metric=loss_cv",
        "--set objectives.2.metric=loss_cv: ",
        ["'objectives' is a list of 2 item(s)", "objectives.0", "--set 'objectives=[...]'"],
    ),
    (
        "objectives.metric=loss_cv",
        "--set objectives.metric=loss_cv: ",
        ["'objectives' is a list of 2 item(s)"],
    ),
    (
        "constraints.0.value=0.1",  # not in BASE: a list to set whole
        "--set constraints.0.value=0.1: ",
        ["'constraints' is not in {path}", "--set 'constraints=[...]'"],
    ),
    (
        "objectives.0.metric=loss_vc",
        "{path}: objectives.0.metric (from --set): ",
        ["did you mean 'loss_cv'?"],
    ),
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


def test_a_set_value_drops_the_hint_about_the_file_s_value(
    write_space: Callable[..., Path],
) -> None:
    path = write_space(edit("env:\n", "env:\n  NCCL_DEBUG: off\n"))
    message = load_error(path, ("env.NCCL_DEBUG=[1]",))  # what it replaced says nothing now
    assert message.startswith(f"{path}: env.NCCL_DEBUG (from --set): "), message
    assert "YAML reads" not in message


def test_error_elsewhere_keeps_its_line_despite_set(write_space: Callable[..., Path]) -> None:
    text = edit("  clip_norm: 1.0\n", "  clip_norm: 1.0\n  beta1: 1.0\n")
    path = write_space(text)
    message = load_error(path, ("probe.steps=40",))
    assert message.startswith(f"{path}: knobs.beta1 (line {line_of(text, 'beta1')}): ")
