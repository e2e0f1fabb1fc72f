"""`autotune migrate`'s full check runs the recipe and the baseline interleaved by seed (the
recipe's seed, the baseline's, the next seed, ...), the recipe's first seed not run again when
the cheap check ran it: a change in the machine's load is not read as a paired difference. No
probe runs: the launcher is stubbed and records the order it is asked in."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from assets.recipes import make_recipe

from autotune import Recipe
from autotune import space as sp
from autotune.migrate import holds


def recipe(**knobs: Any) -> Recipe:
    return replace(make_recipe(**knobs), env={}, probe={"steps": 50, "seed": 7})


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    from autotune.process import launcher as ln

    seen: list[tuple[int, str]] = []
    default = sp.KNOBS["clip_norm"].default

    def fake(probe: dict[str, Any], _env: Any, **_kw: Any) -> dict[str, Any]:
        arm = "baseline" if probe["knobs"]["clip_norm"] == default else "recipe"
        seen.append((probe["seed"], arm))
        metrics = {"loss_cv": 0.1, "final_loss": 1.0, "throughput": 100.0}
        summary = {"metrics": metrics, "steps_run": 50, "steps_planned": 50, "seed": probe["seed"]}
        return {"outcome": "complete", "summary": summary}

    monkeypatch.setattr(ln, "run_trial_process", fake)
    return seen


def test_the_full_check_interleaves_the_recipe_and_the_baseline_by_seed(
    calls: list[tuple[int, str]],
) -> None:
    r = recipe(clip_norm=0.5)
    out = holds.rerun(r, seeds=3, steps=None, threads=1, timeout_s=60.0, say=lambda _t: None)
    assert calls == [(s, arm) for s in (7, 8, 9) for arm in ("recipe", "baseline")]
    assert out["seeds"] == [7, 8, 9]
    assert out["recipe_result"]["seeds"] == out["baseline_result"]["seeds"] == [7, 8, 9]
    assert out["vs_baseline"]["seeds"] == [7, 8, 9]


def test_the_recipes_seed_the_cheap_check_ran_is_not_run_again(
    calls: list[tuple[int, str]],
) -> None:
    r = recipe(clip_norm=0.5)
    done = [{"seed": 7, "outcome": "complete", "summary": {"metrics": {}, "seed": 7}}]
    out = holds.rerun(
        r, seeds=3, steps=None, threads=1, timeout_s=60.0, say=lambda _t: None, done=done
    )
    assert calls == [
        (7, "baseline"),
        (8, "recipe"),
        (8, "baseline"),
        (9, "recipe"),
        (9, "baseline"),
    ]
    assert out["recipe_result"]["seeds"] == [7, 8, 9]  # in seed order, the reused one first


def test_a_recipe_that_is_the_defaults_runs_alone(calls: list[tuple[int, str]]) -> None:
    out = holds.rerun(recipe(), seeds=2, steps=None, threads=1, timeout_s=60.0, say=print)
    assert calls == [(7, "baseline"), (8, "baseline")]  # its knobs are the defaults' knobs
    assert out["baseline_result"] is None
