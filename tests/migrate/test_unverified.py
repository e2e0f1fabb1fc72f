"""A recipe its study never verified (e.g. `export --pick 'trial N'` of a screened trial): when
its recorded run reproduces here, migrate says that nothing more is known, not that "the
study's verification stands" (a black-box review)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from assets.recipes import make_recipe

from autotune import Recipe
from autotune.migrate import holds
from autotune.migrate.run import verdict_of


def recipe(**recorded: Any) -> Recipe:
    r = make_recipe(lr=0.3)
    return replace(
        r, probe={"steps": 60, "seed": 0}, source={**r.source, "trial": 2}, recorded=recorded
    )


HOLDS = {
    "path": "reproduced",
    "reproduced": "seed 0, 60 steps",
    "vs_baseline": {"verdict": "not compared"},
    "problems": [],
}


def test_an_unverified_recipe_that_reproduces_claims_no_verification() -> None:
    verdict, why, plan = verdict_of(recipe(), "r.yaml", dict(HOLDS), [], ["clip_norm"])
    assert verdict == "transfers" and plan is None
    assert "was not verified in its study (trial 2" in why
    assert "verification stands" not in why


def test_a_verified_recipe_that_reproduces_keeps_its_studys_verdict() -> None:
    verified = recipe(verified={"steps": 60, "runs": [{"seed": 1, "metrics": {}}]})
    holds = {**HOLDS, "vs_baseline": {"verdict": "better"}}
    _, why, _ = verdict_of(verified, "r.yaml", holds, [], ["clip_norm"])
    assert (
        "the study's verification stands (its paired verdict against the baseline: better)" in why
    )


def test_a_recipe_that_lost_where_tuned_does_not_transfer_by_reproducing() -> None:
    """A black-box review: the exported pick lost to the baseline in its study's verification
    (`worse` on the final loss); its run reproduced here and migrate said `transfers` (exit 0)
    while `autotune verify` said WORSE. The same run carries the study's verdict over."""
    lost = {"verdict": "worse", "worse_on": ["final_loss"], "better_on": []}
    r = recipe(verified={"steps": 60, "runs": [{"seed": 1, "metrics": {}}]})
    r = replace(r, source={**r.source, "vs_baseline": lost})
    fast = {"runs": [], "why": "seed 0, 60 steps", "steps": 60, "curve": {}}
    held = holds.reproduced(r, fast, threads=1)
    assert held["problems"] == [
        "where it was tuned, it loses to the baseline over the same seeds on final_loss "
        "(the study's verdict: worse)"
    ]
    verdict, why, plan = verdict_of(r, "r.yaml", held, [], ["clip_norm"])
    assert verdict.startswith("does not transfer: re-tune") and plan is not None
    assert "clip_norm" in plan["knobs"]  # implicated: worse on the final loss
    assert why.startswith("The recorded run reproduces here (seed 0, 60 steps), so the recipe")
