"""bb4 (extra minor items): a recipe's `name` is read by the study name's rule (letters, digits,
'_', '-', '.', starting with a letter or digit): `name: ../../../tmp/evil`, or one with a
terminal escape or a line break, was accepted and printed ("recipe ../../../tmp/evil"). The
names export and migrate give (`STUDY-trialN`, `STUDY-migrated-trialN`) still load."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error
from assets.recipes import make_recipe

from autotune import space as sp
from autotune.errors import RecipeError
from autotune.recipe import Recipe

BAD = {
    "path": "../../../tmp/evil",
    "slash": "a/b",
    "escape": "evil\x1b[31mred",
    "newline": "two\nlines",
    "space": "a b",
    "empty": "",
    "dot_first": ".hidden",
    "too_long": "x" * 201,
}


@pytest.mark.parametrize("name", list(BAD.values()), ids=list(BAD))
def test_a_bad_name_is_refused_naming_the_file_and_the_key(tmp_path: Path, name: str) -> None:
    path = replace(make_recipe(), name=name).save(tmp_path / "r.yaml")
    with pytest.raises(RecipeError) as info:
        Recipe.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: name: must be the recipe's name"), message
    assert "\n" not in message and "\x1b" not in message, message


def _space_name(length: int) -> str:
    """A study name of `length` characters that `space.load` accepts."""
    text = f"name: {'s' * length}\nworkload: {{name: mlp, size: tiny}}\n"
    return sp.loads(text, source="space.yaml").name


def test_the_names_export_and_migrate_give_still_load(tmp_path: Path) -> None:
    longest = _space_name(100)
    migrated = f"{_space_name(91)}-migrated"  # the re-tune's study name (`reduced_overrides`)
    assert len(migrated) == 100
    for name in (f"{longest}-trial123456", f"{migrated}-trial123456", "g4-trial1", "s.1_x-trial0"):
        path = replace(make_recipe(), name=name).save(tmp_path / "r.yaml")
        assert Recipe.load(path).name == name


def test_verify_refuses_it_in_one_line_before_any_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    replace(make_recipe(), name="../../../tmp/evil").save(tmp_path / "r.yaml")
    line = one_line_error(invoke("verify", "r.yaml"), "r.yaml: name: ", "'../../../tmp/evil'")
    assert "recipe ../../../tmp/evil" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "something was made"
