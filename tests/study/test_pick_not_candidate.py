"""`export --pick 'trial N'` of a trial that is no candidate says why from the trial's own record
(a blind user check: a failed trial was only "not a candidate (not a feasible, complete trial)",
its error left to `show`). A real SQLite Optuna study told through the study's own code."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from assets import studies as h

from autotune.errors import RecipeError
from autotune.study import attrs as ua
from autotune.study.export import recipe_from_study


def _told(study: optuna.Study, attrs: dict[str, str], state: optuna.trial.TrialState) -> int:
    trial = study.ask()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    study.tell(
        trial, [1.0, 1.0] if state == optuna.trial.TrialState.COMPLETE else None, state=state
    )
    return trial.number


def test_an_explicit_pick_of_no_candidate_says_what_became_of_that_trial(tmp_path: Path) -> None:
    study_dir = h.recorded_study(tmp_path, "nc", trials=6, finished=3)
    study = optuna.load_study(study_name="nc", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    fail = optuna.trial.TrialState.FAIL
    failed = _told(
        study,
        {ua.OUTCOME: "failed", ua.CAUSE: "exception", ua.ERROR: "ValueError: bad batch"},
        fail,
    )
    diverged = _told(study, {ua.OUTCOME: "diverged", ua.CAUSE: "loss_nonfinite"}, fail)
    running = study.ask().number  # the study stopped while it ran

    def refused(number: int) -> str:
        with pytest.raises(RecipeError, match=f"trial {number} is not a candidate") as e:
            recipe_from_study(str(study_dir), f"trial {number}")
        return str(e.value)

    assert refused(failed).endswith(f": trial {failed} failed (exception): ValueError: bad batch")
    assert refused(diverged).endswith(f": trial {diverged} diverged (loss_nonfinite)")
    assert "has not finished (the study stopped while it ran; --resume runs it)" in refused(running)
    with pytest.raises(RecipeError, match=rf"no trial 40 \(its trials are 0 to {running}\)"):
        recipe_from_study(str(study_dir), "trial 40")
    assert recipe_from_study(str(study_dir), "trial 1").source["trial"] == 1  # a candidate
