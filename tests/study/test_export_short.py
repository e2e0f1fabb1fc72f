"""`export --pick 'trial N'` of a trial that stopped short of the length the study decided at
says so, and puts no baseline measured at another length beside it (a black-box review: the
60-step screen's final loss was recorded beside the baseline's verified 240-step one, with no
word)."""

from __future__ import annotations

from pathlib import Path

from assets import studies as h

from autotune.study import attrs as ua
from autotune.study.export import recipe_from_study, verdict_note


def test_a_trial_short_of_the_decided_length_is_exported_with_a_warning(tmp_path: Path) -> None:
    import optuna

    study_dir = h.recorded_study(
        tmp_path, "s", trials=4, finished=4, overrides=["budget.target_steps=90"]
    )
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr(ua.DECIDED, {"steps": 90, "rung": 2, "reason": "target"})

    recipe = recipe_from_study(str(study_dir), "trial 2")
    src = recipe.source
    assert src["trial"] == 2
    assert src["short_of_decided"] == {"steps": h.SHARED_STEPS, "decided_steps": 90}
    assert src["vs_baseline"]["baseline"] is None, "no baseline at another length beside it"
    note = verdict_note(recipe)
    assert note is not None
    assert f"trial 2 ran {h.SHARED_STEPS} steps, short of the 90 the study decided at" in note
    assert "autotune verify RECIPE --steps 90" in note


def test_a_study_decided_at_the_screen_exports_without_the_warning(tmp_path: Path) -> None:
    study_dir = h.recorded_study(tmp_path, "t", trials=4, finished=4)
    recipe = recipe_from_study(str(study_dir), "trial 2")
    assert "short_of_decided" not in recipe.source
