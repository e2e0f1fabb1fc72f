"""`migrate --space` re-tunes in the recipe's own space: a space for another workload, or one
that fixes a knob at another value than the recipe's, is refused before anything runs (a
black-box review: the mlp recipe at lr 0.3 was "re-tuned" inside defaults_hold.yaml, tiny_gpt at
lr 0.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from assets.recipes import make_recipe

from autotune import Recipe
from autotune import space as sp
from autotune.errors import UsageError
from autotune.migrate.retune_check import check_retune, source_mismatch

SPACE = """\
name: src
workload: {name: mlp, size: tiny}
probe: {steps: 50}
knobs:
  lr: 0.3
  clip_norm: {low: 0.1, high: 5.0, log: true}
"""


def recipe(**knobs: Any) -> Recipe:
    return make_recipe(lr=0.3, **knobs)


def test_the_recipes_own_space_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SPACE)
    assert source_mismatch(sp.load(tmp_path / "s.yaml"), recipe(clip_norm=1.3)) is None
    check_retune(str(tmp_path / "s.yaml"), recipe(clip_norm=1.3))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (SPACE.replace("lr: 0.3", "lr: 0.5"), "knobs.lr is 0.5 there, 0.3 in the recipe"),
        (SPACE.replace("name: mlp", "name: tiny_gpt"), "workload is tiny_gpt (tiny) there"),
    ],
)
def test_another_jobs_space_is_refused_naming_what_differs(
    tmp_path: Path, text: str, named: str
) -> None:
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(UsageError) as e:
        check_retune(str(tmp_path / "s.yaml"), recipe(clip_norm=1.3))
    assert named in str(e.value) and "not the space this recipe was tuned in" in str(e.value)
