"""Space and recipe files from elsewhere: any bytes, any YAML, alias bombs, huge files.

Whatever a file holds, loading it either succeeds or raises an AutotuneError with one line, in
bounded time: never another exception, never minutes of work or gigabytes of memory.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune import Recipe
from autotune import space as sp
from autotune.errors import AutotuneError, RecipeError, SpaceError
from autotune.recipe import RECIPE_VERSION
from autotune.repro import repro
from autotune.space import yaml_reader
from autotune.space.limits import MAX_PROBE_TIMEOUT_S, MAX_STEPS, MAX_TIMEOUT_S

# ~30 s for the whole file on the 2-core CI machine; each example well under its deadline.
FUZZ = settings(
    max_examples=250,
    deadline=10_000,  # a loaded 2-core machine took over 2 s for one example: flaky, not slow input
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SPACE = {
    "name": "fuzz",
    "workload": {"name": "mlp", "size": "tiny"},
    "probe": {"steps": 50, "micro_batch": 8, "precision": "fp16", "device": "cpu"},
    "budget": {"trials": 4, "trial_timeout_s": 60.0},
    "objectives": [{"metric": "loss_cv", "direction": "minimize"}],
    "constraints": [{"metric": "loss_drop", "op": ">=", "value": 0.05}],
    "knobs": {"lr": 0.01, "clip_norm": {"low": 0.1, "high": 10.0, "log": True}},
    "env": {"NCCL_ALGO": {"choices": ["Ring", "Tree"]}, "NCCL_PROTO": "Simple"},
}

RECIPE: dict[str, Any] = {
    "autotune_recipe": RECIPE_VERSION,
    "name": "fuzz",
    "workload": {"name": "mlp", "size": "tiny"},
    "precision": "fp32",
    "micro_batch": 16,
    "world_size": 1,
    "probe": {"steps": 50, "seed": 0, "device": "cpu"},
    "knobs": {"lr": 0.01, "clip_norm": 1.0, "warmup_steps": 10},
    "env": {"NCCL_ALGO": "Ring"},
    "achieved": {"loss_cv": {"direction": "minimize", "value": 0.05, "verified": None}},
    "source": {"study": "s", "trial": 1},
}


def load_space(path: Path) -> Any:
    return sp.load(path)


def load_recipe(path: Path) -> Any:
    return Recipe.load(path)


def load_for_repro(path: Path) -> Any:
    return repro.load_space(path)


LOADERS: dict[str, Callable[[Path], Any]] = {
    "space": load_space,
    "recipe": load_recipe,
    "repro": load_for_repro,
}


def outcome(load: Callable[[Path], Any], path: Path, limit_s: float = 1.5) -> str | None:
    """Load `path`: None when it loads, else the error's one line. Anything else fails."""
    t0 = time.monotonic()
    try:
        load(path)
        message = None
    except AutotuneError as e:
        message = str(e)
        assert message.strip(), "an empty message"
        assert len(message.splitlines()) == 1, message
        assert str(path) in message or message.startswith("--set "), message
    elapsed = time.monotonic() - t0
    assert elapsed < limit_s, f"{elapsed:.2f} s to load {path.name}"
    return message


# ---------------------------------------------------------------------------------------------
# Property-based: any bytes, any YAML document, any value at any key of a valid file
# ---------------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included
    st.text(max_size=20),
    st.sampled_from(["fp16", "cpu", "Ring", "NCCL_ALGO", "lr", "low", "high", "choices"]),
)
KEYS = [*sp.TOP_KEYS, *sp.KNOBS, *sp.ProbeSettings.model_fields, *sp.Budget.model_fields]
KEYS += ["low", "high", "log", "step", "choices", "default", "NCCL_ALGO", "NCCL_X=1", *RECIPE]
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=12), st.integers())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)


def _write(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "input.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return path


@pytest.mark.parametrize("kind", LOADERS)
@FUZZ
@given(data=st.binary(max_size=400))
def test_any_bytes(tmp_path: Path, kind: str, data: bytes) -> None:
    outcome(LOADERS[kind], _write(tmp_path, data))


@pytest.mark.parametrize("kind", LOADERS)
@FUZZ
@given(doc=values)
def test_any_yaml_document(tmp_path: Path, kind: str, doc: Any) -> None:
    outcome(LOADERS[kind], _write(tmp_path, yaml.safe_dump(doc)))


def _set_at(base: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = yaml.safe_load(yaml.safe_dump(base))  # a deep copy
    node = out
    for key in path[:-1]:
        nxt = node.get(key) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            nxt = {}
            node[key] = nxt
        node = nxt
    node[path[-1]] = value
    return dict(out)


def _paths(base: dict[str, Any]) -> list[list[Any]]:
    """Every key path of `base` (mappings only), and one new key in each mapping."""
    out: list[list[Any]] = []

    def walk(node: dict[str, Any], prefix: list[Any]) -> None:
        out.append([*prefix, "NEW_KEY"])
        for k, v in node.items():
            out.append([*prefix, k])
            if isinstance(v, dict):
                walk(v, [*prefix, k])

    walk(base, [])
    return out


@pytest.mark.parametrize("kind", LOADERS)
@FUZZ
@given(data=st.data())
def test_any_value_in_a_valid_file(tmp_path: Path, kind: str, data: st.DataObject) -> None:
    base = RECIPE if kind == "recipe" else SPACE
    where = data.draw(st.sampled_from(_paths(base)), label="key path")
    value = data.draw(values, label="value")
    doc = _set_at(base, where, value)
    outcome(LOADERS[kind], _write(tmp_path, yaml.safe_dump(doc, allow_unicode=True)))


@FUZZ
@given(
    key=st.sampled_from(["knobs.lr", "budget.trial_timeout_s", "env.NCCL_ALGO", "probe", "x.y"]),
    raw=st.text(max_size=40),
)
def test_any_set_override(tmp_path: Path, key: str, raw: str) -> None:
    path = _write(tmp_path, yaml.safe_dump(SPACE))
    outcome(lambda p: sp.load(p, [f"{key}={raw}"]), path)


SECTIONS = ["probe", "budget", "sampler", "verify", "rungs", "knobs", "env", "description"]


@FUZZ
@given(
    key=st.sampled_from(SECTIONS),
    value=values.filter(lambda v: v is not None and not isinstance(v, dict | str)),
)
def test_a_section_that_is_not_a_mapping_is_refused(tmp_path: Path, key: str, value: Any) -> None:
    """Whatever a section holds that is not a mapping (a description: not text), however empty
    (`verify: false`, `probe: []`, `budget: 0`), is refused naming the section: never read as
    the defaults."""
    path = _write(tmp_path, yaml.safe_dump({**SPACE, key: value}))
    message = outcome(load_space, path)
    assert message is not None and f"{path}: {key} (line " in message, message
    assert f"must be {'text' if key == 'description' else 'a mapping'}" in message, message


def test_the_valid_bases_load(tmp_path: Path) -> None:
    """The fuzzed files start from files that load (else the properties test little)."""
    assert outcome(load_space, _write(tmp_path, yaml.safe_dump(SPACE))) is None
    assert outcome(load_recipe, _write(tmp_path, yaml.safe_dump(RECIPE))) is None


# ---------------------------------------------------------------------------------------------
# The known attacks, by name
# ---------------------------------------------------------------------------------------------

BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]"
            for p, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "name: *i",
        "workload: mlp",
        "autotune_recipe: 1",
    ]
)
RECURSIVE = "name: &n [x, *n]\nworkload: mlp\nautotune_recipe: 1\n"


@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BILLION_LAUGHS, f"refused: more than {yaml_reader.MAX_NODES} nodes"),
        (RECURSIVE, "refused: alias *n (line 1) refers to a node that contains it"),
        ("name: " + "[" * 200 + "]" * 200, f"nested more than {yaml_reader.MAX_DEPTH} levels"),
        ("name: x\nworkload: mlp\nautotune_recipe: 1\nnote: " + "9" * 5000, "malformed YAML"),
    ],
    ids=["billion-laughs", "recursive-alias", "deep-nesting", "huge-int"],
)
def test_hostile_yaml_is_refused_at_once(
    tmp_path: Path, kind: str, text: str, expected: str
) -> None:
    message = outcome(LOADERS[kind], _write(tmp_path, text), limit_s=1.0)
    assert message is not None and expected in message, message


@pytest.mark.parametrize("kind", LOADERS)
def test_millions_of_items_are_refused_by_size(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("name: huge\nworkload: mlp\nknobs:\n  lr: [" + "0, " * 5_000_000 + "0]\n")
    message = outcome(LOADERS[kind], path, limit_s=1.0)
    assert message == f"{path}: larger than 1024 KiB: refused (a space or recipe file is a few KB)"


@pytest.mark.parametrize("kind", LOADERS)
def test_invalid_utf8_names_the_byte(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path, b"name: caf\xc3\xa9\nworkload: \xff\xfemlp\n")
    assert outcome(LOADERS[kind], path) == f"{path}: not valid UTF-8 at byte 22"


def test_aliases_within_the_limits_still_load(tmp_path: Path) -> None:
    """A recipe written by an older autotune may share a mapping through an anchor."""
    text = "fingerprint: &fp {hash: abc, platform: cpu}\n" + yaml.safe_dump(RECIPE)
    text = text.replace("source:\n", "source:\n  fp: *fp\n", 1)
    recipe = Recipe.load(_write(tmp_path, text))
    assert recipe.fingerprint == recipe.source["fp"] == {"hash": "abc", "platform": "cpu"}


@pytest.mark.integration
@pytest.mark.parametrize(
    "text",
    [BILLION_LAUGHS, RECURSIVE, b"name: \xff\n"],
    ids=["billion-laughs", "recursive-alias", "invalid-utf8"],
)
def test_check_prints_one_line_and_exits_2(tmp_path: Path, text: str | bytes) -> None:
    path = _write(tmp_path, text)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"autotune: error: {path}: ")
    assert elapsed < 10, f"{elapsed:.1f} s"  # the interpreter's start included; was minutes


# ---------------------------------------------------------------------------------------------
# Values that load but cannot run
# ---------------------------------------------------------------------------------------------

NONFINITE = [".inf", "-.inf", ".nan"]


@pytest.mark.parametrize("value", NONFINITE)
@pytest.mark.parametrize(
    "key",
    [
        "budget.trial_timeout_s",
        "budget.cpus_per_trial",
        "budget.gpus_per_trial",
        "probe.divergence.loss_explosion_factor",
        "probe.divergence.scale_floor",
        "knobs.clip_norm",
        "knobs.warmup_steps",
        "knobs.clip_norm.high",
        "knobs.clip_norm.low",
        "env.NCCL_NTHREADS.high",
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, key: str, value: str) -> None:
    space = yaml.safe_load(yaml.safe_dump(SPACE))
    space["knobs"]["clip_norm"] = {"low": 0.1, "high": 10.0}
    space["env"]["NCCL_NTHREADS"] = {"low": 64, "high": 512}
    path = _write(tmp_path, yaml.safe_dump(space))
    message = outcome(lambda p: sp.load(p, [f"{key}={value}"]), path)
    assert message is not None and key in message, message
    assert "finite" in message, message


@pytest.mark.parametrize("value", NONFINITE)
def test_non_finite_constraint_in_the_file_is_refused(tmp_path: Path, value: str) -> None:
    text = yaml.safe_dump(SPACE).replace("value: 0.05", f"value: {value}")
    message = outcome(load_space, _write(tmp_path, text))
    assert message is not None and "constraints.0.value (line" in message, message
    assert "finite" in message


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ('{NCCL_ALGO: "Ring\\0"}', "env.NCCL_ALGO (line 2): control characters"),
        ('{NCCL_ALGO: {choices: [Ring, "Tree\\0"]}}', "env.NCCL_ALGO.choices (line 2): control"),
        ('{"NCCL_AL\\0GO": Ring}', "env.'NCCL_AL\\x00GO' (line 2): environment variable names"),
        ('{"NCCL_ALGO=Tree": Ring}', "env.NCCL_ALGO=Tree (line 2): environment variable names"),
        ('{"NCCL_ALGO;rm": Ring}', "env.NCCL_ALGO;rm (line 2): environment variable names"),
    ],
    ids=["nul-in-value", "nul-in-choice", "nul-in-name", "equals-in-name", "semicolon-in-name"],
)
def test_environment_names_and_values_that_cannot_be_set(
    tmp_path: Path, env: str, fragment: str
) -> None:
    path = _write(tmp_path, f"name: x\nenv: {env}\nworkload: mlp\n")
    message = outcome(load_space, path)
    assert message is not None and fragment in message, message


def test_set_cannot_smuggle_a_nul_into_env(tmp_path: Path) -> None:
    path = _write(tmp_path, yaml.safe_dump(SPACE))
    message = outcome(lambda p: sp.load(p, ['env.NCCL_PROTO="Simple\\0"']), path)
    assert message is not None and "env.NCCL_PROTO (from --set): control characters" in message


def test_finite_values_still_load(tmp_path: Path) -> None:
    space = sp.load(_write(tmp_path, yaml.safe_dump(SPACE)), ["budget.trial_timeout_s=2592000"])
    assert space.budget.trial_timeout_s == MAX_TIMEOUT_S == 30 * 24 * 3600


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (
            ["budget.trial_timeout_s=1e10"],
            "Input should be less than or equal to 2592000 (got '1e10')",
        ),
        (
            ["budget.trial_timeout_s=1e300"],
            "Input should be less than or equal to 2592000 (got '1e300')",
        ),
        (["budget.trial_timeout_s=2592000.5"], "Input should be less than or equal to 2592000"),
        (
            ["budget.trial_timeout_s=2592000", "budget.target_steps=50000"],
            "2.592e+06 s per screen probe is 2.592e+09 s for a probe at target_steps 50000",
        ),
    ],
    ids=["1e10", "1e300", "past-30-days", "scaled-to-the-target"],
)
def test_a_timeout_no_timer_can_wait_is_refused(
    tmp_path: Path, overrides: list[str], fragment: str
) -> None:
    """Every trial crashed with `OverflowError: timestamp out of range for platform time_t`."""
    message = outcome(lambda p: sp.load(p, overrides), _write(tmp_path, yaml.safe_dump(SPACE)))
    assert message is not None and "budget.trial_timeout_s (from --set): " + fragment in message


@FUZZ
@given(
    timeout=st.floats(min_value=1e-3, max_value=1e12),
    steps=st.integers(min_value=10, max_value=1000),
    scale=st.integers(min_value=1, max_value=100_000),
)
def test_any_probe_limit_that_loads_is_a_wait_python_can_make(
    timeout: float, steps: int, scale: int
) -> None:
    """The longest probe of a space that loads (a rung probe at the target: trial_timeout_s scaled
    by its steps) gets a limit the process launcher's socket accepts."""
    target = min(steps * scale, MAX_STEPS)
    text = yaml.safe_dump(SPACE)
    sets = [f"budget.trial_timeout_s={timeout!r}", f"probe.steps={steps}"]
    try:
        space = sp.loads(text, overrides=[*sets, f"budget.target_steps={target}"])
    except SpaceError as e:
        assert "budget.trial_timeout_s (from --set): " in str(e), e
        assert timeout > MAX_TIMEOUT_S or timeout * target / steps > MAX_PROBE_TIMEOUT_S
        return
    longest = space.budget.trial_timeout_s * target / space.probe.steps
    with socket.socket() as s:
        s.settimeout(longest)  # OverflowError past ~9.2e9 s


def test_the_error_classes_match_the_file_kind(tmp_path: Path) -> None:
    path = _write(tmp_path, b"\xff")
    with pytest.raises(SpaceError):
        sp.load(path)
    with pytest.raises(RecipeError):
        Recipe.load(path)
