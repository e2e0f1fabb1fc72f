"""A recipe with a knob line deleted runs PyTorch's default for it: that is said, not silent (a
black-box review: a recipe without its clip_norm line verified "as promised" with no clipping).
An exported recipe lists every knob."""

from __future__ import annotations

from pathlib import Path

import pytest
from assets.recipes import make_recipe

from autotune import Recipe
from autotune import space as sp


def exported(tmp_path: Path) -> Path:
    r = make_recipe(lr=0.3, clip_norm=0.63)
    return r.save(tmp_path / "r.yaml")


def test_an_exported_recipe_loads_without_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert Recipe.load(exported(tmp_path)).knobs["clip_norm"] == 0.63
    assert capsys.readouterr().err == ""


def test_a_deleted_knob_line_is_named_with_the_default_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = exported(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(x for x in lines if not x.strip().startswith("clip_norm:")) + "\n")
    r = Recipe.load(path)
    assert r.knobs["clip_norm"] == sp.KNOBS["clip_norm"].default
    err = capsys.readouterr().err
    assert f"{path}: knobs: clip_norm (0.0) missing: PyTorch's default used" in err, err
    assert "was this one edited?" in err
