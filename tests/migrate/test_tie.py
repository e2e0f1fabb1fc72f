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


def _neighbour(trial: int, **knobs: Any) -> dict[str, Any]:
    return {"trial": trial, "knobs": {**make_recipe().knobs, **knobs}, "env": {}}


def test_a_tied_recipe_that_holds_after_a_rerun_is_re_tuned_from_its_first_choice() -> None:
    recipe = _defaults_by_tie(
        neighbours=[_neighbour(4, clip_norm=0.7), _neighbour(9, clip_norm=4.9)]
    )
    rerun = {"path": "rerun", "problems": []}
    plan = tie.retune_plan(recipe, "transfers", rerun, ["clip_norm", "accum_steps"])
    assert plan is not None and plan["tie"]["first_choice"] == 9
    # the hardware-bound knobs (the recipe's NCCL variable among them), not the portable ones:
    # those are chosen among the neighbours' values
    assert plan["knobs"] == ["accum_steps", "NCCL_ALGO"] and "oom_micro_batch" not in plan
    # twice the tie's 5 seeds: the same 5 again would measure the same tie
    assert (
        plan["verify_seeds"] == 10
        and "trial 9" in plan["note"]
        and "10 verification" in (plan["note"])
    )
    # out of memory at its own layout, held at another: only the layouts that fit are searched
    oom = {**rerun, "oom": {"micro_batch": 64}}
    plan = tie.retune_plan(
        recipe, "transfers with these changes: accum_steps 1 -> 2", oom, ["clip_norm"]
    )
    assert plan is not None and plan["knobs"] == ["NCCL_ALGO", "accum_steps"]
    assert plan["oom_micro_batch"] == 64
    assert "micro-batch 64 ran out of memory" in plan["why"]["accum_steps"]


def test_no_re_tune_where_the_tie_stands_or_there_is_nothing_to_try() -> None:
    recipe = _defaults_by_tie(neighbours=[_neighbour(9, clip_norm=4.9)])
    for path in ("reproduced", "within_spread"):  # the study's own numbers: its tie stands
        assert tie.retune_plan(recipe, "transfers", {"path": path}, ["clip_norm"]) is None
    rerun = {"path": "rerun"}
    assert tie.retune_plan(recipe, "transfers with these changes: use trial 9 (clip_norm)",
                           rerun, ["clip_norm"]) is None  # fmt: skip
    assert tie.retune_plan(recipe, "does not transfer: re-tune clip_norm", rerun, []) is None
    same = _defaults_by_tie(neighbours=[_neighbour(9)])  # no neighbour differs from the recipe
    assert tie.retune_plan(same, "transfers", rerun, ["clip_norm"]) is None
    chosen = _defaults_by_tie(first_choice=0, neighbours=[_neighbour(9, clip_norm=4.9)])
    assert tie.retune_plan(chosen, "transfers", rerun, ["clip_norm"]) is None


def _retuned(**over: Any) -> dict[str, Any]:
    return {
        "trials": 5, "source_trials": 10, "searched": ["accum_steps", "clip_norm"],
        "recipe": "out/recipe-retuned.yaml", "failed": None, "trial": 3, "first_choice": 3,
        "defaults": False, "vs_baseline": {"verdict": "better", "seeds": [1, 2, 3]}, **over,
    }  # fmt: skip


def test_after_the_re_tune_only_a_pick_that_beat_the_defaults_replaces_the_verdict() -> None:
    verdict, why = tie.after_retune("transfers", "It holds.", _retuned())
    assert verdict == "re-tuned: accum_steps, clip_norm"
    assert "its pick, trial 3, paired against the defaults over seeds [1, 2, 3]: better" in why
    assert why.startswith("It holds. Given the space, that study ran here: 5 trial(s) (10 in")
    kept = _retuned(defaults=True, trial=0, vs_baseline={"verdict": "no detectable difference",
                                                         "seeds": [1, 2]})  # fmt: skip
    verdict, why = tie.after_retune("transfers", "It holds.", kept)
    assert verdict == "transfers"
    assert (
        "kept PyTorch's defaults too; its first choice, trial 3, paired against them over "
        "seeds [1, 2]: no detectable difference" in why
    )
    unverified = _retuned(vs_baseline={"verdict": None, "seeds": []})  # no paired verdict
    verdict, why = tie.after_retune("transfers", "", unverified)
    assert verdict == "transfers"
    assert "its pick, trial 3, paired against the defaults: not compared, not better" in why
    none = _retuned(recipe=None, failed="every trial diverged")
    layout = "transfers with these changes: accum_steps 1 -> 2"
    verdict, why = tie.after_retune(layout, "It fits and holds. No re-tune is needed.", none)
    assert verdict == layout and "every trial diverged" in why
    assert "No re-tune is needed" not in why  # one ran
