"""`autotune export`'s core: from a real recorded study (SQLite, told through the study's own
code) to a recipe — the pick, the knobs of the picked trial, what it achieved, its source — and
the file written atomically in each format."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from assets import studies as h

from autotune.errors import RecipeError
from autotune.recipe import Recipe
from autotune.study import export as ex

# Trial 0 is the baseline. Trial 1 is the stablest, trial 3 the fastest, trial 2 in between
# (the knee); trial 4 is dominated by trial 2.
METRICS = [
    {"loss_cv": 0.50, "throughput": 50.0, "loss_drop": 0.5},
    {"loss_cv": 0.01, "throughput": 60.0, "loss_drop": 0.5},
    {"loss_cv": 0.03, "throughput": 190.0, "loss_drop": 0.5},
    {"loss_cv": 0.30, "throughput": 200.0, "loss_drop": 0.5},
    {"loss_cv": 0.05, "throughput": 150.0, "loss_drop": 0.5},
]


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    return h.recorded_study(tmp_path, "exp", trials=5, finished=5, metrics=METRICS)


def _params(study_dir: Path, number: int) -> dict:
    study = optuna.load_study(study_name="exp", storage=f"sqlite:///{study_dir}/optuna.db")
    return study.trials[number].params


@pytest.mark.parametrize(("how", "number"), [("balanced", 2), ("stablest", 1), ("fastest", 3)])
def test_the_pick_is_the_trial_its_rule_names(study_dir: Path, how: str, number: int) -> None:
    r = ex.recipe_from_study(str(study_dir), how)
    assert r.source["trial"] == number and r.source["pick"] == how
    assert r.name == f"exp-trial{number}"
    # The picked trial's searched values, the space's fixed ones, and what it achieved.
    for knob, value in _params(study_dir, number).items():
        assert r.knobs[knob] == pytest.approx(value)
    assert r.achieved["loss_cv"]["value"] == pytest.approx(METRICS[number]["loss_cv"])
    assert r.achieved["throughput"]["value"] == pytest.approx(METRICS[number]["throughput"])
    assert r.achieved["loss_cv"]["verified"] is None  # this study verified nothing
    assert set(r.source["searched"]) == {"clip_norm", "warmup_steps"}


def test_a_trial_picked_by_number_and_one_that_is_no_candidate(study_dir: Path) -> None:
    assert ex.recipe_from_study(str(study_dir), "trial 4").source["trial"] == 4
    with pytest.raises(RecipeError, match="trial 9 is not a candidate"):
        ex.recipe_from_study(str(study_dir), "trial 9")


def test_a_study_with_no_feasible_trial_names_the_closest(tmp_path: Path) -> None:
    flat = [{"loss_cv": 0.01, "throughput": 100.0, "loss_drop": d} for d in (0.0, 0.04)]
    folder = h.recorded_study(tmp_path, "flat", trials=2, finished=2, metrics=flat)
    with pytest.raises(RecipeError, match=r"no feasible trial.*Closest: trial 1: broke loss_drop"):
        ex.recipe_from_study(str(folder))


@pytest.mark.parametrize("fmt", ["yaml", "env", "python", "hf", "lightning"])
def test_write_is_atomic_and_the_yaml_loads_back(study_dir: Path, fmt: str) -> None:
    r = ex.recipe_from_study(str(study_dir))
    out = study_dir / f"recipe.{fmt}"
    ex.write(r, fmt, str(out))
    assert out.is_file() and out.read_text()
    assert not list(study_dir.glob("*.tmp*"))  # no temporary file left beside it
    if fmt == "yaml":
        back = Recipe.load(out)
        assert back.knobs == r.knobs and back.source["trial"] == r.source["trial"]
    assert ex.write(r, fmt, None) == out.read_text()  # stdout gets the same text
