"""Black-box finding bb4 F23 (continued): `export --pick 'trial 7'` took the trial's 150-step
screen although the trial had also run its 340-step rung (trials/0007.json and 0007-r1.json),
and the study decided at 750. An explicit `trial N` short of the decided length is now exported
from its longest complete run, the one closest to the decided length (its record there gives the
recipe's numbers, probe length and recorded curve), and `source.short_of_decided` says how far
short it is. A run that diverged there is not taken. A real SQLite Optuna study told through the
study's own code, its rung rows and rung records as the rung phase writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from assets import studies as h

from autotune.study import attrs as ua
from autotune.study import folder, pick
from autotune.study.export import recipe_from_study, verdict_note

SCREEN = h.SHARED_STEPS  # 30
MID, TOP = 60, 90


def rung_run(
    study: optuna.Study,
    study_dir: Path,
    number: int,
    rung: int,
    steps: int,
    values: list[float],
    outcome: str = "complete",
) -> None:
    """Trial `number`'s run at `rung` (`steps`): its slim row in the study and its record in
    the study folder (with a loss curve), as `rung_phase` keeps them."""
    metrics = {"loss_cv": values[0], "throughput": values[1], "loss_drop": 0.5}
    feasible = outcome == "complete"
    row: dict[str, Any] = {
        "number": number, "rung": rung, "steps": steps, "baseline": number == 0,
        "outcome": outcome, "cause": None if feasible else "nan_loss", "metrics": metrics,
        "steps_run": steps, "steps_planned": steps, "values": values,
        "constraints": [0.0 if feasible else 1.0, -0.45], "feasible": feasible,
    }  # fmt: skip
    study.set_user_attr(ua.rung_key(number, steps), row)
    summary = {
        "metrics": metrics,
        "seed": 0,
        "steps_run": steps,
        "steps_planned": steps,
        "series": {"loss": [2.0 - i / steps for i in range(steps)]},
    }
    record = {**row, "summary": summary}
    folder.write_json(folder.rung_path(study_dir, number, rung), record)


def made(tmp_path: Path) -> tuple[optuna.Study, Path]:
    study_dir = h.recorded_study(
        tmp_path, "lg", trials=4, finished=4, overrides=[f"budget.target_steps={TOP}"]
    )
    study = optuna.load_study(study_name="lg", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    study.set_user_attr(ua.DECIDED, {"steps": TOP, "rung": 2, "reason": "target"})
    for number in (0, 1):  # promoted to the top
        rung_run(study, study_dir, number, 1, MID, [0.08, 100.0])
        rung_run(study, study_dir, number, 2, TOP, [0.07, 100.0])
    rung_run(study, study_dir, 2, 1, MID, [0.05, 120.0])  # stopped at the middle rung
    rung_run(study, study_dir, 3, 1, MID, [0.5, 90.0], outcome="diverged")
    return study, study_dir


def test_a_trial_short_of_the_decided_length_is_exported_from_its_longest_run(
    tmp_path: Path,
) -> None:
    _, study_dir = made(tmp_path)
    recipe = recipe_from_study(str(study_dir), "trial 2")
    src = recipe.source
    assert src["trial"] == 2
    assert recipe.probe["steps"] == MID, "its 60-step run, not its 30-step screen"
    assert src["short_of_decided"] == {"steps": MID, "decided_steps": TOP}
    assert recipe.achieved["loss_cv"]["value"] == 0.05
    assert recipe.achieved["throughput"]["value"] == 120.0
    curve = recipe.recorded["curve"]
    assert curve["steps_run"] == MID and len(curve["value"]) == MID
    assert src["vs_baseline"]["steps"] == MID
    assert src["vs_baseline"]["baseline"] is None, "no baseline at another length beside it"
    note = verdict_note(recipe)
    assert note is not None and f"trial 2 ran {MID} steps, short of the {TOP}" in note


def test_a_run_that_diverged_is_not_taken(tmp_path: Path) -> None:
    _, study_dir = made(tmp_path)
    recipe = recipe_from_study(str(study_dir), "trial 3")
    assert recipe.probe["steps"] == SCREEN, "its screen: the 60-step run diverged"
    assert recipe.source["short_of_decided"] == {"steps": SCREEN, "decided_steps": TOP}
    assert recipe.achieved["loss_cv"]["value"] != 0.5


def test_a_trial_at_the_decided_length_is_exported_from_it(tmp_path: Path) -> None:
    _, study_dir = made(tmp_path)
    recipe = recipe_from_study(str(study_dir), "trial 1")
    assert recipe.probe["steps"] == TOP
    assert "short_of_decided" not in recipe.source
    assert recipe.achieved["loss_cv"]["value"] == 0.07
    assert recipe.recorded["curve"]["steps_run"] == TOP


def test_longest_runs_below_a_length_and_whatever_the_outcome(tmp_path: Path) -> None:
    """`pick.longest_runs`, the one walk of the rung records: shorter than `below` or of any
    length, complete runs only or each trial's longest whatever its outcome (`short_of`'s)."""
    study, _ = made(tmp_path)
    steps = {n: row["steps"] for n, row in pick.longest_runs(study, below=TOP).items()}
    assert steps == {0: MID, 1: MID, 2: MID}, "trial 3's 60-step run diverged: not taken"
    steps = {n: row["steps"] for n, row in pick.longest_runs(study).items()}
    assert steps == {0: TOP, 1: TOP, 2: MID}
    every = pick.longest_runs(study, complete=False)
    assert {n: row["steps"] for n, row in every.items()} == {0: TOP, 1: TOP, 2: MID, 3: MID}
    assert every[3]["outcome"] == "diverged"
    assert pick.longest_runs(study, below=MID, complete=False) == {}
