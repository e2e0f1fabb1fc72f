"""A key repeated in one mapping of a space or recipe file (a copy-paste slip: YAML keeps the last
one, silently) is refused with one line naming the file, the key path and both lines. Keys
merged in with `<<` may still be overridden, and the shipped files have no repeated key. Choices
are duplicates when the values they run with are: 1 and 1.0, 0.1 and "1e-1"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import Recipe
from autotune import space as sp
from autotune.errors import AutotuneError, RecipeError, SpaceError
from autotune.space import yaml_reader

ROOT = Path(__file__).resolve().parents[2]

BASE = """\
name: bb
workload: {name: mlp, size: tiny}
probe: {steps: 20, batch: 16}
knobs:
  lr: 0.01
"""


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name: cc\n" + BASE, "name (line 2): duplicate key (also at line 1)"),
        (BASE + "knobs:\n  lr: 0.02\n", "knobs (line 6): duplicate key (also at line 4)"),
        (BASE + "  lr: 0.02\n", "knobs.lr (line 6): duplicate key (also at line 5)"),
        (
            BASE.replace("size: tiny}", "size: tiny, size: small}"),
            "workload.size (line 2): duplicate key (also at line 2)",
        ),
        (
            BASE + "objectives:\n  - {metric: loss_cv, direction: minimize, metric: loss_drop}\n",
            "objectives.0.metric (line 7): duplicate key (also at line 7)",
        ),
        ("True: 1\ntrue: 2\n" + BASE, "true (line 2): duplicate key (also at line 1)"),
    ],
    ids=["top", "block", "nested", "flow", "in-a-list", "same-value"],
)
def test_a_duplicate_key_is_refused_naming_the_key_and_lines(
    tmp_path: Path, text: str, where: str
) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as info:
        sp.load(path)
    assert str(info.value) == f"{path}: {where}; a key may appear once in a mapping"


def test_a_duplicate_key_in_a_recipe_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("autotune_recipe: 1\nname: a\nname: b\n")
    with pytest.raises(RecipeError, match=r"r\.yaml: name \(line 3\): duplicate key"):
        Recipe.load(path)


def test_merged_keys_may_be_overridden() -> None:
    text = "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n"
    assert yaml_reader.load(text, "s", SpaceError) == {
        "base": {"x": 1, "y": 2},
        "c": {"x": 3, "y": 2},
    }


@pytest.mark.integration
def test_check_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "dup.yaml").write_text("name: bb\nname: cc\n" + BASE.split("\n", 1)[1])
    result = subprocess.run(
        [sys.executable, "-m", "autotune", "check", "dup.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "autotune: error: dup.yaml: name (line 2): duplicate key (also at line 1); a key may "
        "appear once in a mapping"
    ]


KEYS = st.text(alphabet="abcxyz_", min_size=1, max_size=4)


@settings(max_examples=150, deadline=10_000)
@given(st.lists(st.tuples(KEYS, st.integers(0, 9)), min_size=1, max_size=8))
def test_a_mapping_loads_exactly_when_its_keys_are_distinct(pairs: list[tuple[str, int]]) -> None:
    text = "".join(f"{k}: {v}\n" for k, v in pairs)
    keys = [k for k, _ in pairs]
    if len(set(keys)) == len(keys):
        assert yaml_reader.load(text, "s", SpaceError) == dict(pairs)
        return
    with pytest.raises(SpaceError, match="duplicate key"):
        yaml_reader.load(text, "s", SpaceError)


def test_the_shipped_files_have_no_duplicate_key() -> None:
    listed = [
        p
        for pattern in ("search_spaces/**/*.y*ml", "examples/**/*.y*ml", "tests/**/*.y*ml")
        for p in ROOT.glob(pattern)
    ] + list(ROOT.glob("tests/golden/*.json"))
    assert any(p.parent.name == "search_spaces" for p in listed), listed
    for path in listed:
        try:
            yaml_reader.load(path.read_text(), str(path), SpaceError)
        except AutotuneError as e:
            assert "duplicate key" not in str(e), e
        except yaml.YAMLError:  # not ours to read (a workflow file with tabs, say)
            pass


#: Numbers a float knob and an int knob may choose from.
POOLS: dict[str, list[float]] = {"clip_norm": [0.1, 0.5, 1.0, 4.0], "accum_steps": [1, 2, 4]}


def _spellings(x: float, kind: str) -> list[object]:
    """Ways a space file may write the number x: a float, the texts YAML leaves unparsed (`1e-1`),
    and for a whole number an int."""
    out: list[object] = [x, f"{x:e}", repr(x)]
    return [*out, int(x)] if kind == "int" else out


@settings(max_examples=150, deadline=10_000)
@given(name=st.sampled_from(sorted(POOLS)), data=st.data())
def test_choices_are_duplicates_when_their_numbers_are(name: str, data: st.DataObject) -> None:
    kind = sp.KNOBS[name].kind
    numbers = data.draw(st.lists(st.sampled_from(POOLS[name]), min_size=1, max_size=4))
    written = [data.draw(st.sampled_from(_spellings(float(x), kind))) for x in numbers]
    text = BASE + f"  {name}: {{choices: {json.dumps(written)}}}\n"
    if len(set(numbers)) == len(numbers):
        domain = sp.loads(text).knobs[name]
        assert isinstance(domain, sp.Domain) and domain.choices == tuple(numbers)
        return
    with pytest.raises(SpaceError, match=rf"knobs\.{name}\.choices \(line 6\): duplicate choices"):
        sp.loads(text)
