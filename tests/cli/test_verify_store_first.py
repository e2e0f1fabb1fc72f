"""`autotune verify` opens its MLflow store before any probe: an unreachable store it was given
is refused in one line, with nothing run (a black-box review: it ran every probe, then exited 2
and threw the results away); a recipe's own store that does not answer from here falls back to
this folder's, as documented."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from assets.cli import invoke, one_line_error
from assets.recipes import make_recipe

from autotune import Recipe
from autotune.recipe import verify_log as vf


def recipe(**source: Any) -> Recipe:
    r = make_recipe()
    return replace(r, source={**r.source, **source})


def test_an_unreachable_store_is_refused_before_any_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    recipe().save(tmp_path / "r.yaml")
    result = invoke("verify", "r.yaml", "--tracking-uri", "http://127.0.0.1:9")
    one_line_error(result, "http://127.0.0.1:9")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"], "nothing run or written"


def test_the_recipes_own_store_that_does_not_answer_falls_back_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    away = recipe(mlflow={"tracking_uri": "http://127.0.0.1:9", "experiment_id": "1"})
    uri, client = vf.open_store(away, None)
    assert uri.startswith("sqlite:///") and uri.endswith("mlflow.db"), uri
    assert (tmp_path / "mlflow.db").is_file()
    assert client.search_experiments() is not None
