"""A study cut short in any phase (its screen, its rungs, its verification) or whose driver runs
now is unfinished, and show, the summary, `studies` and export all say so alike
(`autotune.study.unfinished`). A black-box review: a study killed in its verification, with
only the baseline's seeds run, was shown and exported as finished with the defaults as the
"verified" pick; one killed mid-rung exported the screen's pick with no warning; an unfinished
study's compute claimed as saved the trials that never ran. Recorded studies (no Ray, no kill)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.study import attrs as ua
from autotune.study import driver, listing, session
from autotune.study import export as ex
from autotune.study.compute import format_line
from autotune.study.find import find_study

N = 4
VERIFY = ["verify.top_k=2", "verify.seeds=2"]


def made_up(i: int) -> dict[str, float]:
    """Trial i's made-up screen: each trial steadier and faster than the one before."""
    return {"loss_cv": 0.5 - 0.1 * i, "throughput": 100.0 + i, "loss_drop": 0.5, "final_loss": 2.0}


def recorded(tmp_path: Path, name: str, overrides: list[str], finished: int = N) -> Any:
    """The study `name` with `finished` of its N trials told, as `find_study` reads it back."""
    metrics = [made_up(i) for i in range(N)]
    h.recorded_study(
        tmp_path, name, trials=N, finished=finished, metrics=metrics, overrides=overrides
    )
    return find_study(str(st.study_dir_for(name, tmp_path)))


def test_a_verification_cut_short_is_no_verified_pick(tmp_path: Path) -> None:
    study, space, study_dir, _ = recorded(tmp_path, "v", VERIFY)
    # killed in the verification: the baseline's seeds ran, neither top candidate's
    study.set_user_attr(ua.verified_key(0), h.verified_result(made_up(0), h.SHARED_STEPS))
    summary = st.summarize(study, space, study_dir)
    left = summary["unfinished"]
    assert left["phase"] == "verification" and left["unverified"] == [2, 3], left
    pick = summary["pick"]
    assert pick["number"] == 3 and pick["verified"] is False, pick
    assert "has not finished" in summary["vs_baseline"]["why"]
    text = st.format_summary(summary)
    assert "study v was stopped before it finished: in its verification, with trial(s) 2, 3 " in (
        text
    )
    assert "verified)" not in text.split("study v was stopped")[1], text

    recipe = ex.recipe_from_study(str(study_dir))
    assert recipe.source["trial"] == 3 and recipe.source["unfinished"]["phase"] == "verification"
    assert recipe.source["compute_saved"] is None
    note = ex.verdict_note(recipe) or ""
    assert note.startswith("study v was stopped before it finished: in its verification"), note

    row = listing.describe(listing.Found("v", _url(study_dir), study_dir))
    assert row["pick"]["verified"] is False and row["unfinished"]["phase"] == "verification"
    assert "4/4 (stopped in its verification)" in listing.format_table([row])

    # the verification finished: the study is finished, its pick verified again
    for n in (2, 3):
        study.set_user_attr(ua.verified_key(n), h.verified_result(made_up(0), h.SHARED_STEPS))
    summary = st.summarize(study, space, study_dir)
    assert summary["unfinished"] is None and summary["pick"]["verified"] is True
    assert "unfinished" not in ex.recipe_from_study(str(study_dir)).source


def _url(study_dir: Path) -> str:
    return f"sqlite:///{study_dir / 'optuna.db'}"


def test_rungs_cut_short_after_a_rung_probe_ran_are_said_and_warned_of(tmp_path: Path) -> None:
    study, space, study_dir, _ = recorded(tmp_path, "r", ["budget.target_steps=90"])
    row = {"number": 0, "rung": 1, "steps": 90, "outcome": "complete", "feasible": True}
    study.set_user_attr(ua.rung_key(0, 90), {**row, "values": [0.5, 100.0], "metrics": {}})
    summary = st.summarize(study, space, study_dir)
    assert summary["unfinished"]["phase"] == "rungs" and summary["unfinished"]["rung_probes"] == 1
    assert summary["decided"]["reason"] == "rungs interrupted: 1 rung probe ran, none decided yet"
    text = st.format_summary(summary)
    assert "study r was stopped before it finished: in its rungs (1 rung probe ran" in text, text
    assert "autotune verify recipe.yaml" not in text, "finishing the study is the check"
    recipe = ex.recipe_from_study(str(study_dir))
    assert recipe.source["unfinished"]["phase"] == "rungs"
    note = ex.verdict_note(recipe) or ""
    assert f"the pick is the screen's at {h.SHARED_STEPS} steps, not decided toward 90" in note

    # exported while its driver runs: the same warning, of a study in progress
    with session.driver_lock(study_dir):
        running = ex.recipe_from_study(str(study_dir))
    assert running.source["unfinished"]["driver"], running.source["unfinished"]
    assert "is running now" in (ex.verdict_note(running) or "")


def test_an_unfinished_study_claims_no_saving(tmp_path: Path) -> None:
    study, space, study_dir, _ = recorded(tmp_path, "c", ["budget.target_steps=90"], finished=2)
    summary = st.summarize(study, space, study_dir)
    assert summary["unfinished"]["phase"] == "screen"
    assert summary["compute_saved"] is None and summary["compute"]["cut_short"] == "screen"
    assert ex.recipe_from_study(str(study_dir)).source["compute_saved"] is None
    spent = {**summary["compute"], "total": 6400, "screen": 6400, "rungs": 0}
    line = format_line(spent) or ""
    assert "less than every trial" not in line and "cut short (screen)" in line, line
    assert "screen-only study" not in line, line  # its ratio counted the probes never run
    # shown while its driver runs: not finished, but not cut short either (a review)
    running = st.summarize(study, space, study_dir, running="pid 1 on here")["compute"]
    assert "cut_short" not in running and running["running"] == "screen", running
    line = format_line({**running, "total": 6400, "screen": 6400, "rungs": 0}) or ""
    assert "cut short" not in line and "still running (screen), no saving figure" in line, line


def test_a_budget_lowered_below_the_trials_done_is_said_plainly(tmp_path: Path) -> None:
    study, _, study_dir, _ = recorded(tmp_path, "b", [])
    lowered = sp.loads(h.mlp_space("b", trials=2), source="b")  # a resume with trials: 2
    said: list[str] = []
    driver._announce(said.append, lowered, 4, 0, 0, "sqlite://", "sqlite://")
    assert said == ["study b: 4 trials done, the budget is 2"], said
    text = st.format_summary(st.summarize(study, lowered, study_dir))
    assert "study b: 4 trials (budget 2) — " in text and "4/2" not in text, text


def test_a_study_whose_baseline_failed_is_not_told_to_run_again(tmp_path: Path) -> None:
    """A review: a study with budget.trials 2 whose baseline failed said "stopped before it
    finished: 1 of 2 trials ran ... (run the same `autotune study` command again to finish
    it)" above the error's "Fix the job, then start the study afresh"; run again, it stopped at
    the same baseline. The summary gives the error's advice, not "run it again"."""
    h.recorded_study(tmp_path, "f", trials=2, finished=0)
    study, space, study_dir, _ = find_study(str(st.study_dir_for("f", tmp_path)))
    trial = study.ask()
    assert trial.user_attrs.get(ua.BASELINE)
    frozen = study._storage.get_trial(trial._trial_id)
    failed = {"outcome": "failed", "cause": "exception", "error": "RuntimeError: boom"}
    st.tell(study, frozen, st.complete_outcome(space, frozen, failed))
    left = st.summarize(study, space, study_dir)["unfinished"]
    assert left["phase"] == "screen" and left["baseline_failed"] is True, left
    text = st.format_summary(st.summarize(study, space, study_dir))
    said = text.split("study f was stopped before it finished: ")[1].split("\n")[0]
    assert said.startswith("1 of 2 trials ran, and its baseline failed"), said
    assert "start the study afresh" in said and "again to finish it" not in text, text


def test_a_trial_whose_driver_died_is_counted_interrupted_as_the_text_says(tmp_path: Path) -> None:
    """`show --json` of a study killed under a trial had it `running` where the text said
    `1 interrupted` (a review)."""
    study, space, study_dir, _ = recorded(tmp_path, "k", [], finished=2)
    study.ask()  # Optuna holds it as running; no driver holds the study's lock
    counts = st.summarize(study, space, study_dir)["counts"]
    assert (counts["interrupted"], counts["running"]) == (1, 0), counts
    assert ", 1 interrupted" in st.format_summary(st.summarize(study, space, study_dir))
    counts = st.summarize(study, space, study_dir, running="pid 1 on here")["counts"]
    assert (counts["interrupted"], counts["running"]) == (0, 1), counts


def test_a_misspelt_nccl_variable_is_warned_of_when_the_study_starts(tmp_path: Path) -> None:
    """`check` warned of it; the study, which is what runs, said nothing (a review)."""
    space = sp.loads(h.mlp_space("e", trials=2) + "env: {NCCL_ALOG: Ring}\n", source="e")
    said: list[str] = []
    driver._announce(said.append, space, 0, 2, 0, "sqlite://", "sqlite://")
    assert any("NCCL_ALOG" in line and "did you mean NCCL_ALGO" in line for line in said), said
