"""A recipe's `env:` warned of in a user's own training code (black-box review: `verify`,
`repro` and `migrate` warned of `NCCL_ALGOO: Ring` or `NCCL_ALGO: 5` on stderr, but
`Recipe.load("recipe.yaml")` and `apply_env()` in the user's script set them without a word):
`Recipe.load` and `Recipe.loads` warn of each one (`autotune.RecipeEnvWarning`, a UserWarning)
in the text the commands print, naming the file and the key; the commands still say each once."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from assets.cli import invoke
from assets.recipes import make_recipe

import autotune
from autotune import Recipe

MISSPELT = (
    "env.NCCL_ALGOO: not a known NCCL/RCCL variable (did you mean NCCL_ALGO?); the library "
    "ignores a name it does not know"
)
INVALID = "env.NCCL_PROTO: 'Fast' is not one of its values LL, LL128, Simple"


def _written(folder: Path, env: dict[str, str]) -> Path:
    path = folder / "r.yaml"
    replace(make_recipe(), env=env).save(path)
    return path


def test_load_warns_of_a_misspelt_name_and_an_invalid_value(tmp_path: Path) -> None:
    path = _written(tmp_path, {"NCCL_ALGOO": "Ring", "NCCL_PROTO": "Fast", "HSA_X": "1"})
    with pytest.warns(autotune.RecipeEnvWarning) as said:
        recipe = Recipe.load(path)
    assert [str(w.message) for w in said] == [f"{path}: {MISSPELT}", f"{path}: {INVALID}"]
    assert all(issubclass(w.category, UserWarning) for w in said)
    assert {w.filename for w in said} == {__file__}, "at the user's call, not autotune's"
    environ: dict[str, str] = {}
    recipe.apply_env(environ)  # warned of, not refused or changed: it is the user's to fix
    assert environ == {"NCCL_ALGOO": "Ring", "NCCL_PROTO": "Fast", "HSA_X": "1"}


def test_loads_names_its_source(tmp_path: Path) -> None:
    text = _written(tmp_path, {"NCCL_ALGOO": "Ring"}).read_text()
    with pytest.warns(autotune.RecipeEnvWarning) as said:
        Recipe.loads(text, source="mine.yaml")
    assert [str(w.message) for w in said] == [f"mine.yaml: {MISSPELT}"]


def test_a_clean_recipe_says_nothing(tmp_path: Path) -> None:
    path = _written(tmp_path, {"NCCL_ALGO": "^Tree", "NCCL_PROTO": "LL128", "HSA_X": "1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Recipe.load(path).apply_env({})
        Recipe.loads(path.read_text())


def test_export_does_not_warn_of_its_own_read_back() -> None:
    # `with_digests` reads the recipe back as a file would be: not a file the user gave.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replace(make_recipe(), env={"NCCL_ALGOO": "Ring"}).with_digests()


def test_verify_says_each_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It goes on: to the tracking store, here one refused (a missing folder) before any probe.
    monkeypatch.chdir(tmp_path)
    _written(tmp_path, {"NCCL_ALGOO": "Ring", "NCCL_PROTO": "Fast"})
    uri = f"sqlite:///{tmp_path / 'no' / 'm.db'}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke("verify", "r.yaml", "--seeds", "2", "--tracking-uri", uri)
    assert result.exit_code == 2, result.output
    *said, error = result.stderr.splitlines()
    assert said == [
        f"autotune: warning: r.yaml: {MISSPELT}",
        f"autotune: warning: r.yaml: {INVALID}",
    ]
    assert error.startswith("autotune: error: ") and uri in error
    assert not [w for w in caught if issubclass(w.category, autotune.RecipeEnvWarning)]
