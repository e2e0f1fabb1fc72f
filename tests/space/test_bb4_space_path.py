"""Black-box finding bb4 (extra minor items): a space path that is there but is no regular file
(a FIFO, a link to /dev/zero, a folder) was reported as `no such file`, where the same path
given as a recipe says what it is. The space loader now says why, as the recipe's reader does,
before it opens the path (a FIFO would block the read), and a file too large to be a space says
that. Real files, FIFOs and links; the CLI through typer's CliRunner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from assets.cli import invoke, one_line_error

from autotune import space as sp
from autotune.errors import RecipeError, SpaceError
from autotune.recipe import Recipe
from autotune.space.yaml_reader import MAX_BYTES


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def special(here: Path, kind: str) -> Path:
    path = here / f"{kind}.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    return path


WHAT = {"fifo": "a FIFO", "zero": "a character device", "folder": "a folder"}


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_space_path_that_is_no_regular_file_says_what_it_is(here: Path, kind: str) -> None:
    path = special(here, kind)
    with pytest.raises(SpaceError) as info:
        sp.load(path)
    assert str(info.value) == f"{path}: not a regular file ({WHAT[kind]}): not a space file"
    # The recipe's reader says the same of the same path.
    with pytest.raises(RecipeError) as recipe:
        Recipe.load(path)
    assert str(recipe.value).startswith(f"{path}: not a regular file ({WHAT[kind]})")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_study_and_check_name_a_space_path_that_is_no_regular_file(here: Path, kind: str) -> None:
    """By the path as given (relative, as in the finding), in one line, and nothing made."""
    special(here, kind)
    name = f"{kind}.yaml"
    before = sorted(os.listdir(here))
    for args in (("study", "--space", name), ("check", name), ("probe", "--space", name)):
        line = one_line_error(invoke(*args), f"{name}: not a regular file ({WHAT[kind]})")
        assert "no such file" not in line
    assert sorted(os.listdir(here)) == before


def test_a_space_file_too_large_says_so(here: Path) -> None:
    big = here / "big.yaml"
    big.write_text("#" * (MAX_BYTES + 1))
    link = here / "link.yaml"
    link.symlink_to(big)
    for path in (big, link):
        with pytest.raises(SpaceError, match=r"larger than 1024 KiB: refused"):
            sp.load(path)


def test_a_missing_space_is_still_no_such_file(here: Path) -> None:
    (here / "sub").mkdir()
    with pytest.raises(SpaceError, match=r"^sub/nope\.yaml: no such file$"):
        sp.load("sub/nope.yaml")
    (here / "dangling.yaml").symlink_to(here / "nothing.yaml")
    with pytest.raises(SpaceError, match=r"dangling\.yaml: no such file"):
        sp.load("dangling.yaml")
