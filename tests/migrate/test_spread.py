"""The second cheap check of `autotune migrate` (`autotune.migrate.spread`): a run here that did
not reproduce the recorded one is judged against the spread of the recipe's verified seeds."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import yaml

from autotune import Recipe
from autotune import space as sp
from autotune.migrate.spread import MIN_SEEDS, bound, within_spread


def recipe(runs: list[dict[str, Any]], steps: int = 100) -> Recipe:
    knobs = {k: v.default for k, v in sp.KNOBS.items()}
    knobs.update(lr=0.01, batch=None, accum_steps=1)
    return Recipe(
        name="r",
        workload={"name": "mlp", "size": "tiny"},
        precision="fp32",
        micro_batch=8,
        knobs=knobs,
        probe={"steps": steps},  # a recipe file without probe.steps is refused
        achieved={
            "loss_cv": {"direction": "minimize", "value": 0.1, "verified": None},
            "throughput": {"direction": "maximize", "value": 900.0, "verified": None},
        },
        recorded={"verified": {"steps": steps, "runs": runs}},
    )


def seed_run(seed: int, final_loss: float, loss_cv: float, outcome: str = "complete") -> Any:
    metrics = {"final_loss": final_loss, "loss_cv": loss_cv, "throughput": 1000.0 + seed}
    return {"seed": seed, "outcome": outcome, "metrics": metrics}


def here(final_loss: float, loss_cv: float, throughput: float = 5.0) -> dict[str, Any]:
    m = {"final_loss": final_loss, "loss_cv": loss_cv, "throughput": throughput}
    return {"outcome": "complete", "summary": {"metrics": m}}


RECORDED = [seed_run(0, 0.30, 0.10), seed_run(1, 0.32, 0.12), seed_run(2, 0.29, 0.11)]


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize(("direction", "log"), [("minimize", False), ("maximize", True)])
def test_one_more_seed_passes_the_bound_about_2_5_percent_of_the_time(
    n: int, direction: str, log: bool
) -> None:
    # The bound is a prediction bound for ONE more draw: simulated seeds from one distribution,
    # the new one past the bound about 2.5% of the time (a confidence bound of the mean, without
    # sqrt(1 + 1/n), or a two-sided 95% quantile, would be passed far more often or less).
    rng = random.Random(7)
    trials, past = 20000, 0
    metric = "final_loss" if log else "loss_drop"
    for _ in range(trials):
        draw = [rng.gauss(0.0, 0.3) for _ in range(n + 1)]
        xs = [math.exp(x) if log else x for x in draw]
        b = bound(xs[:n], direction, metric)
        past += xs[n] > b if direction == "minimize" else xs[n] < b
    assert 0.018 < past / trials < 0.032, past / trials


def test_a_run_within_the_recorded_spread_holds() -> None:
    got = within_spread(recipe(RECORDED), here(0.33, 0.12), 100)
    assert got["within"], got
    assert set(got["rows"]) == {"final_loss", "loss_cv"}  # throughput is the machine's
    assert got["rows"]["final_loss"]["recorded"] == [0.30, 0.32, 0.29]
    assert "3 verified seeds [0, 1, 2]" in got["why"]


def test_a_run_past_the_bound_is_named() -> None:
    b = bound([0.30, 0.32, 0.29], "minimize", "final_loss")
    got = within_spread(recipe(RECORDED), here(b * 1.01, 0.11), 100)
    assert not got["within"]
    assert got["why"].startswith("final_loss") and "past the bound" in got["why"]
    assert got["rows"]["loss_cv"]["within"]
    assert within_spread(recipe(RECORDED), here(b * 0.99, 0.11), 100)["within"]


def test_the_spread_is_judged_only_where_it_says_something() -> None:
    two = within_spread(recipe(RECORDED[:2]), here(0.30, 0.1), 100)
    assert not two["within"] and f"fewer than {MIN_SEEDS}" in two["why"]
    failed = [*RECORDED[:2], seed_run(2, 0.3, 0.1, outcome="diverged")]
    assert not within_spread(recipe(failed), here(0.30, 0.1), 100)["within"]
    other = within_spread(recipe(RECORDED, steps=50), here(0.30, 0.1), 100)
    assert not other["within"] and "ran 50 steps, not the 100" in other["why"]
    diverged = {"outcome": "diverged", "summary": {"metrics": {"final_loss": 0.3}}}
    assert "ended diverged" in within_spread(recipe(RECORDED), diverged, 100)["why"]
    missing = within_spread(recipe(RECORDED), here(float("nan"), 0.1), 100)
    assert not missing["within"] and "final_loss could not be compared" in missing["why"]
    none = Recipe(name="p", workload={"name": "mlp"}, precision="fp32", micro_batch=8, knobs={})
    assert "records no verified seeds" in within_spread(none, here(0.3, 0.1), 100)["why"]


def with_recorded(tmp_path: Any, key: str, value: Any) -> Any:
    """A saved recipe whose `recorded.KEY` is set to `value`; its path."""
    path = recipe(RECORDED).save(tmp_path / "r.yaml")
    data = yaml.safe_load(path.read_text())
    data["recorded"][key] = value
    path.write_text(yaml.safe_dump(data))
    return path


def refused(path: Any, key: str) -> str:
    """The message `Recipe.load` refuses `path` with, naming `recorded.KEY` and the file."""
    from autotune.errors import RecipeError

    with pytest.raises(RecipeError, match=rf"recorded\.{key}") as e:
        Recipe.load(path)
    assert str(path) in str(e.value)
    return str(e.value)


@pytest.mark.parametrize(
    ("verified", "said"),
    [
        ({"steps": 100, "runs": "all"}, "a list of runs"),
        ({"steps": "100", "runs": []}, "steps must be an integer"),
        ({"steps": 100, "runs": [7]}, "runs[0] must be a mapping"),
        ({"steps": 100, "runs": [{"metrics": {"final_loss": "low"}}]}, "metrics are numbers"),
    ],
)
def test_a_malformed_verified_record_is_refused_at_load(
    tmp_path: Any, verified: Any, said: str
) -> None:
    assert said in refused(with_recorded(tmp_path, "verified", verified), "verified")
    assert Recipe.load(recipe(RECORDED).save(tmp_path / "ok.yaml")).recorded["verified"]


@pytest.mark.parametrize(
    ("curve", "said"),
    [
        ([1, 2], "a mapping of step and value lists"),
        ({"step": "0-9", "value": []}, "step must be a list of step numbers"),
        ({"step": [0, -1], "value": [1.0, 1.0]}, "step must be a list of step numbers"),
        ({"step": [0, 5, 5], "value": [1.0, 1.0, 1.0]}, "step must rise"),
        ({"step": [0, 1], "value": [1.0]}, "value must be a list as long as step (2)"),
        ({"step": [0, 1], "value": [1.0, "x"]}, "value must hold numbers"),
        ({"step": [0], "value": [1.0], "seed": "zero"}, "seed must be an integer"),
        ({"step": [0], "value": [1.0], "steps_run": 1.5}, "steps_run must be an integer"),
    ],
)
def test_a_malformed_recorded_curve_is_refused_at_load(
    tmp_path: Any, curve: Any, said: str
) -> None:
    # migrate compares a run with it (zip, step lookups): refused where it is read, file named
    assert said in refused(with_recorded(tmp_path, "curve", curve), "curve")
    good = {"step": [0, 3], "value": [2.0, None], "seed": 0, "steps_run": 4}
    assert Recipe.load(with_recorded(tmp_path, "curve", good)).recorded["curve"]["value"] == [
        2.0,
        None,
    ]
