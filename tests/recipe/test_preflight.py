"""A recipe's `env:` checked by a space file's rules before `verify`, `repro` or `migrate` runs
it (black-box review: `env: {NCCL_ALGOO: Ring}` or `NCCL_ALGO: 5` in a recipe ran every probe
without a word, while `autotune check` of a space with them warns): one warning line each on
stderr, and the command goes on, as a study does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from assets.cli import invoke
from assets.recipes import make_recipe

from autotune.recipe.preflight import load_checked

BAD_ENV = {"NCCL_ALGOO": "Ring", "NCCL_ALGO": "5", "NCCL_PROTO": "Simple", "HSA_X": "1"}


def _written(folder: Path, env: dict[str, str]) -> Path:
    path = folder / "r.yaml"
    replace(make_recipe(), env=env).save(path)
    return path


def test_a_recipes_misspelt_or_invalid_env_is_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _written(tmp_path, BAD_ENV)
    assert load_checked(path).env == BAD_ENV  # warned of, not refused or changed
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"autotune: warning: {path}: env.NCCL_ALGOO: not a known NCCL/RCCL variable (did you "
        "mean NCCL_ALGO?); the library ignores a name it does not know",
        f"autotune: warning: {path}: env.NCCL_ALGO: '5' is not one of its values Ring, Tree, "
        "CollNet, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT",
    ]


def test_a_recipes_known_env_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load_checked(_written(tmp_path, {"NCCL_ALGO": "^Tree", "NCCL_PROTO": "LL128"}))
    assert capsys.readouterr().err == ""


def test_verify_warns_before_it_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # It goes on: to the tracking store, here one refused (a missing folder) before any probe.
    monkeypatch.chdir(tmp_path)
    _written(tmp_path, {"NCCL_ALGOO": "Ring"})
    uri = f"sqlite:///{tmp_path / 'no' / 'm.db'}"
    result = invoke("verify", "r.yaml", "--seeds", "2", "--tracking-uri", uri)
    assert result.exit_code == 2, result.output
    warning, error = result.stderr.splitlines()
    assert warning.startswith("autotune: warning: r.yaml: env.NCCL_ALGOO: not a known NCCL")
    assert error.startswith("autotune: error: ") and uri in error
