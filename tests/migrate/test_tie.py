"""A recipe that is PyTorch's defaults by a tie (`autotune/migrate/tie.py`): `transfers` says
the defaults still run, not that nothing beats them."""

from __future__ import annotations

import dataclasses
from typing import Any

from assets.recipes import make_recipe

from autotune.migrate import tie


def _ratio(mean: float, low: float, high: float, direction: str = "minimize") -> dict[str, Any]:
    return {"direction": direction, "ratio": {"mean": mean, "low": low, "high": high}}


def _defaults_by_tie(**source: Any) -> Any:
    vs = {
        "verdict": "no detectable difference",
        "seeds": [1, 2, 3, 4, 5],
        "metrics": {
            "final_loss": _ratio(0.658, 0.101, 4.31),
            "noise_per_drop": _ratio(0.374, 0.122, 1.14),
            "throughput": _ratio(0.98, 0.9, 1.05, "maximize"),
        },
    }
    recipe = make_recipe()
    return dataclasses.replace(
        recipe,
        source={
            **(recipe.source or {}),
            "trial": 0,
            "defaults": True,
            "baseline": True,
            "first_choice": 9,
            "vs_baseline": vs,
            **source,
        },
    )


def test_a_defaults_recipe_kept_by_a_tie_names_its_first_choice_and_how_close_it_came() -> None:
    recipe = _defaults_by_tie()
    found = tie.source_tie(recipe)
    assert found is not None
    assert found["first_choice"] == 9 and found["seeds"] == [1, 2, 3, 4, 5]
    # the metric that leaned furthest toward the first choice, not the first listed
    assert found["closest"] == {"metric": "noise_per_drop", "ratio": 0.374, "low": 0.122,
                                "high": 1.14}  # fmt: skip
    text = tie.note(recipe, "transfers with these changes: accum_steps 1 -> 2")
    assert "PyTorch's defaults by a tie" in text and "trial 9" in text
    assert (
        "over its 5 verification seeds (noise_per_drop x0.374 the defaults' [x0.122, x1.14])"
        in (text)
    )
    assert "not that nothing beats them" in text
    assert tie.note(recipe, "transfers") == text


def test_no_tie_note_where_there_was_no_tie_or_the_verdict_is_not_transfers() -> None:
    chosen = _defaults_by_tie(first_choice=0)  # the study chose the defaults outright
    assert tie.source_tie(chosen) is None and tie.note(chosen, "transfers") == ""
    tuned = _defaults_by_tie(defaults=False, trial=9)  # a tuned recipe
    assert tie.source_tie(tuned) is None and tie.note(tuned, "transfers") == ""
    hand = dataclasses.replace(make_recipe(), source={})  # written by hand: no source
    assert tie.source_tie(hand) is None
    recipe = _defaults_by_tie()
    assert tie.note(recipe, "re-tuned: clip_norm") == ""
    assert tie.note(recipe, "transfers with these changes: use trial 4 (clip_norm)") == ""


def test_no_metric_leaning_the_first_choices_way_names_none() -> None:
    recipe = _defaults_by_tie()
    recipe.source["vs_baseline"]["metrics"] = {"final_loss": _ratio(1.2, 0.5, 3.0)}
    found = tie.source_tie(recipe)
    assert found is not None and found["closest"] is None
    text = tie.note(recipe, "transfers")
    assert "over its 5 verification seeds, and a tie goes to the defaults" in text
