"""`autotune verify` opens its MLflow store before any probe: an unreachable store it was given
is refused in one line, with nothing run (a black-box review: it ran every probe, then exited 2
and threw the results away); a recipe's own store that does not answer from here falls back to
this folder's, as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from assets.cli import invoke, one_line_error

from autotune import Recipe
from autotune import space as sp
from autotune.recipe import verify as vf


def recipe(**source: Any) -> Recipe:
    return Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=16,
        knobs={**{n: info.default for n, info in sp.KNOBS.items()}, "lr": 0.01},
        env={},
        probe={"steps": 20, "seed": 0},
        achieved={},
        source={"study": "s", "trial": 1, "searched": ["clip_norm"], **source},
    )


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
