"""A workload that ignores its seed (a script that seeds torch itself with a constant) replays
one run on every verification seed: zero-width intervals, and a paired verdict that read them
as a certain difference (a black-box review: `MIXED ... final_loss x1.15 the baseline's [x1.15,
x1.15]` in a study, `[x1.12, x1.12]` from `autotune verify`, with no warning, where
`autotune repro --seeds 0,1` says "the workload ignores its seed"). Such seeds give no verdict,
said in repro's words."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from assets.recipes import make_recipe

from autotune.recipe import paired
from autotune.recipe import verify as vf
from autotune.recipe.seeds import summarize_seeds

COMPARED = [("final_loss", "minimize"), ("noise_per_drop", "minimize")]


def result(final: float, losses: dict[int, list[float]]) -> dict[str, Any]:
    """One configuration's seeds: each complete, with its loss series and `final` loss (the
    same on every seed when the series are)."""
    return summarize_seeds(
        [
            {
                "seed": seed,
                "outcome": "complete",
                "summary": {
                    "steps_run": len(loss),
                    "steps_planned": len(loss),
                    "metrics": {"final_loss": final * loss[-1], "noise_per_drop": 0.1},
                    "series": {"loss": loss},
                },
            }
            for seed, loss in losses.items()
        ],
        [m for m, _ in COMPARED],
    )


SAME = {1: [2.0, 1.0], 2: [2.0, 1.0], 3: [2.0, 1.0]}
VARIED = {1: [2.0, 1.0], 2: [2.0, 1.1], 3: [2.0, 0.9]}


def test_identical_runs_over_seeds_give_no_verdict_in_repros_words() -> None:
    mine, base = result(1.15, SAME), result(1.0, SAME)
    assert mine["seed_ignored"] == [1, 2, 3]
    vs = paired.compare(mine, base, COMPARED)
    assert vs["verdict"] == "not compared" and vs["seed_ignored"] == [1, 2, 3], vs
    line = paired.format_line(vs, label="trial 1")
    assert line.startswith("trial 1 vs baseline (paired over seeds [1, 2, 3]): NOT COMPARED: "), (
        line
    )
    assert (
        "no verdict: the runs on seeds 1, 2, 3 are identical: the workload ignores its seed" in line
    )
    assert "x1.15" not in line, "no ratio read off zero-width intervals"
    assert "NOT COMPARED" not in paired.PREFER_DEFAULTS  # the pick is not handed to the defaults
    # `autotune verify`: not as promised, and why
    problems = paired.verify_problems({"recipe_result": mine, "vs_baseline": vs})
    assert any("the workload ignores its seed" in p for p in problems), problems


def test_the_baselines_identical_seeds_are_no_yardstick_either() -> None:
    vs = paired.compare(result(0.5, VARIED), result(1.0, SAME), COMPARED)
    assert vs["verdict"] == "not compared" and "ignores its seed" in vs["why"]


def test_seeds_that_vary_are_judged() -> None:
    mine, base = result(0.5, VARIED), result(1.0, VARIED)
    assert mine["seed_ignored"] == []
    vs = paired.compare(mine, base, COMPARED)
    assert vs["verdict"] == "better" and "seed_ignored" not in vs, vs
    assert paired.verify_problems({"recipe_result": mine, "vs_baseline": vs}) == []


def test_one_seed_or_a_study_seed_stored_without_its_series_says_nothing() -> None:
    assert result(1.0, {1: [2.0, 1.0]})["seed_ignored"] == []
    runs = [{"seed": s, "outcome": "complete", "summary": {"metrics": {}}} for s in (1, 2)]
    assert summarize_seeds(runs)["seed_ignored"] == []
    # a study's verification seed keeps its loss as `loss_series` beside a slimmed summary
    slim = [{**r, "loss_series": [2.0, 1.0]} for r in runs]
    assert summarize_seeds(slim)["seed_ignored"] == [1, 2]


# A user's script that seeds torch itself, as many do: every seed replays one run.
OWN_SEED = """
import torch
import autotune

trial = autotune.trial(steps=10, micro_batch=8, lr=3e-2)
torch.manual_seed(1234)
x = torch.randn(256, 4)
y = x.sum(1, keepdim=True) + 0.1 * torch.randn(256, 1)
model = torch.nn.Linear(4, 1)
opt = trial.recipe.optimizer(model.parameters())
for step in range(trial.steps):
    i = torch.randint(0, 256, (trial.micro_batch,))
    loss = torch.nn.functional.mse_loss(model(x[i]), y[i])
    loss.backward()
    trial.report(step, loss=loss, grad_norm=trial.recipe.clip_and_step(opt, None))
"""


@pytest.mark.integration
def test_verify_of_a_script_that_ignores_its_seed_gives_no_verdict(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(OWN_SEED)
    recipe = replace(
        make_recipe(clip_norm=0.5),
        workload={"script": str(tmp_path / "train.py")},
        micro_batch=8,
        probe={"steps": 10, "seed": 0},
    )
    report = vf.verify_recipe(recipe, seeds=2, timeout_s=120, threads=1, quiet=True)
    assert report["recipe_result"]["seed_ignored"] == [1, 2], report["recipe_result"]
    vs = report["vs_baseline"]
    assert vs["verdict"] == "not compared" and vs["seed_ignored"] == [1, 2], vs
    assert "the workload ignores its seed" in vf.format_report(report)
    assert any("ignores its seed" in p for p in paired.verify_problems(report))
