"""What the study says of a verification seed that failed (its error's one line in `failures`,
the summary, `show --json`'s verified runs, the advice when no candidate held and export's
refusal), of trials whose knobs differ but whose loss series are the same (one warning line),
and the grammar of export's warning on an explicit trial. A real SQLite Optuna study with
made-up records (no Ray, no probe process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from assets import studies as h

from autotune import space as sp
from autotune import study as st
from autotune.errors import RecipeError
from autotune.recipe.seeds import summarize_seeds
from autotune.study import attrs as ua
from autotune.study import export as ex
from autotune.study import identical as ident

N = 6
BOOM = "RuntimeError: boom on seed 2 at step 30"
RAW = BOOM + "\n  File \x1b[31m'train.py'\x1b[0m, line 54\nsecond line"


def recorded(tmp_path: Path) -> tuple[Any, sp.Space, Path]:
    import optuna

    text = h.mlp_space("v", trials=N, verify_top_k=1, verify_seeds=3)
    space = sp.loads(text, source="v")
    made_up = [
        {"loss_cv": 0.5 - 0.05 * i, "throughput": 100.0, "loss_drop": 0.5, "final_loss": 2.0}
        for i in range(N)
    ]
    study_dir = h.recorded_study(tmp_path, "v", trials=N, finished=N, metrics=made_up)
    study = optuna.load_study(study_name="v", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    return study, space, study_dir


def seed_run(seed: int, failed: bool = False) -> dict[str, Any]:
    m = {"loss_cv": 0.1, "throughput": 100.0, "loss_drop": 0.5, "final_loss": 2.0 + seed / 10}
    if failed:  # as the probe's process reports an exception: no summary, the raw error
        return {"seed": seed, "outcome": "failed", "cause": "exception", "error": RAW}
    return {
        "seed": seed,
        "outcome": "complete",
        "cause": None,
        "summary": {"metrics": m, "steps_run": 30, "steps_planned": 30},
    }


def verified(fail_seed: int | None = None) -> dict[str, Any]:
    runs = [seed_run(s, s == fail_seed) for s in (1, 2, 3)]
    res = summarize_seeds(runs, ["loss_cv", "throughput", "final_loss", "loss_drop"])
    res.update(steps=30, all_feasible=fail_seed is None)
    for row in res["runs"]:
        row["feasible"] = row["outcome"] == "complete"
    return res


def test_a_failed_verification_seed_says_its_error_everywhere(tmp_path: Path) -> None:
    study, space, study_dir = recorded(tmp_path)
    best = N - 1
    study.set_user_attr(ua.verified_key(0), verified())
    study.set_user_attr(ua.verified_key(best), verified(fail_seed=2))
    summary = st.summarize(study, space, study_dir)
    assert summary["failures"] == [
        {
            "number": best,
            "baseline": False,
            "cause": "exception",
            "error": BOOM,
            "seed": 2,
            "steps": 30,
        }
    ]
    row = next(v for v in summary["verified"] if v["number"] == best)
    assert [r["error"] for r in row["runs"]] == [None, BOOM, None]  # show --json
    assert row["why_not_picked"] == f"trial {best} failed on seed 2 (exception): {BOOM}"
    text = st.format_summary(summary)
    assert f"  trial {best} failed on verification seed 2 (exception): {BOOM}" in text
    assert "second line" not in text and "\x1b" not in text and "File" not in text

    # the baseline fails on a seed too: no candidate held, and the advice and export's refusal
    # name each error
    study.set_user_attr(ua.verified_key(0), verified(fail_seed=2))
    summary = st.summarize(study, space, study_dir)
    assert [(f["number"], f["baseline"], f["error"]) for f in summary["failures"]] == [
        (0, True, BOOM),
        (best, False, BOOM),
    ]
    assert f"baseline (trial 0) failed on verification seed 2 (exception): {BOOM}" in (
        st.format_summary(summary)
    )
    message = summary["pick"]["message"]
    assert f"trial 0 failed on seed 2 (exception): {BOOM}" in message
    assert f"trial {best} failed on seed 2 (exception): {BOOM}" in message
    with pytest.raises(RecipeError) as refused:
        ex.recipe_from_study(str(study_dir))
    assert f"trial {best} failed on seed 2 (exception): {BOOM}" in str(refused.value)
    assert "second line" not in str(refused.value)


def test_an_explicit_trial_no_better_than_the_defaults_is_said_in_english(
    tmp_path: Path,
) -> None:
    study, _space, study_dir = recorded(tmp_path)
    best = N - 1
    study.set_user_attr(ua.verified_key(0), verified())
    study.set_user_attr(ua.verified_key(best), verified())  # the same numbers: no difference
    recipe = ex.recipe_from_study(str(study_dir), f"trial {best}")
    note = ex.verdict_note(recipe) or ""
    assert note.startswith(f"trial {best} shows no detectable difference against the defaults")
    worse = {**recipe.source, "vs_baseline": {**recipe.source["vs_baseline"], "verdict": "worse"}}
    assert ex._verdict_note(worse).startswith(f"trial {best} shows worse results than the")


def told(tmp_path: Path, losses: list[list[float]], knobs: list[dict[str, Any]]) -> Any:
    """A study whose trial i completed with loss series `losses[i]` and knobs `knobs[i]`, told
    through the study's own code (`records.tell`)."""
    import optuna

    study_dir = h.recorded_study(tmp_path, "i", trials=len(losses), finished=0)
    study = optuna.load_study(study_name="i", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(h.mlp_space("i", trials=len(losses)), source="i")
    for loss, k in zip(losses, knobs, strict=True):
        frozen = study._storage.get_trial(study.ask()._trial_id)
        m = {"loss_cv": 0.1, "throughput": 100.0, "loss_drop": 0.5}
        summary = {"metrics": m, "knobs": k, "series": {"loss": loss, "lr": [0.1] * len(loss)}}
        result = {"outcome": "complete", "summary": summary}
        st.tell(study, frozen, st.complete_outcome(space, frozen, result))
    return study, space, study_dir


def test_trials_with_other_knobs_and_the_same_loss_series_are_warned_of(tmp_path: Path) -> None:
    same = [2.0, 1.5, 1.2, float("nan")]
    losses = [same, list(same), [2.0, 1.4, 1.1, 1.0], list(same), [2.0, 1.4, 1.1, 1.0]]
    knobs = [{"lr": 0.1, "clip_norm": c} for c in (0.0, 0.5, 0.7, 0.9, 0.7)]
    study, space, study_dir = told(tmp_path, losses, knobs)
    t = study.get_trials()[1]
    assert t.user_attrs[ua.LOSS_HASH] == ident.loss_hash({"series": {"loss": same}})
    summary = st.summarize(study, space, study_dir)
    # 2 and 4 ran the same knobs: training alike is no sign of anything
    # a built-in workload applies every knob: no advice to fix a script it does not have
    assert summary["identical_losses"] == [
        {"trials": [0, 1, 3], "knobs": ["clip_norm"], "script": False}
    ]
    lines = [ln for ln in st.format_summary(summary).splitlines() if ln.startswith("warning:")]
    assert lines == [
        "warning: trials 0, 1 and 3 (clip_norm) ran with different knobs and produced identical "
        "loss series: those knobs did not change the training in these runs"
    ]


def test_trials_that_trained_apart_get_no_warning(tmp_path: Path) -> None:
    losses = [[2.0, 1.5 - i / 10] for i in range(3)]
    study, space, study_dir = told(tmp_path, losses, [{"lr": 0.1 * (i + 1)} for i in range(3)])
    summary = st.summarize(study, space, study_dir)
    assert summary["identical_losses"] == []
    assert "identical loss series" not in st.format_summary(summary)
    assert ident.warning_line([]) is None and ident.loss_hash({"series": {}}) is None
