"""A `better` chosen among several verified configurations is judged again with fresh seeds
(`autotune.study.confirmed`, `confirm`): when it is asked for, what the summary says before and
after, and that a gain seen only on the seeds it was chosen on gives way to the defaults. A real
SQLite Optuna study with made-up verification results (no Ray, no probe process);
`tests/study/test_confirm_study.py` runs it end to end."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from test_verdicts import N, recorded, result, space_of, verified

from autotune import study as st
from autotune.recipe import paired as pd
from autotune.study import attrs as ua
from autotune.study.confirm import to_confirm
from autotune.study.confirmed import fresh_seeds, verified_among

BASE = [2.0, 2.1, 1.9]
BEST = N - 1  # the lowest loss_cv of the recorded trials: the balanced pick
OTHER = N - 2
# log ratios to the baseline of -0.2 +- 0.0385 over 3 seeds (t = 9.0), 3 metrics compared (the
# final loss and the space's two objectives): `better` at the error of one configuration fixed
# in advance (t 7.65 at 98.3%), not with it shared over two (10.9 at 99.2%: `among=2`)
MARGINAL = [b * math.exp(-0.2 + e) for b, e in zip(BASE, (-0.0385, 0.0, 0.0385), strict=True)]
METRICS = pd.compared_metrics([o.model_dump() for o in space_of().objectives])


def study_with(tmp_path: Path, pick: list[float], others: int = 1) -> tuple[Any, Any, Path]:
    """A study whose baseline, balanced pick and `others` more searched configurations were
    verified over seeds 1-3 at 30 steps."""
    space = space_of(verify_top_k=1 + others)
    study, study_dir = recorded(tmp_path, space, [2.0] * N)
    study.set_user_attr(ua.verified_key(0), verified(result(BASE)))
    study.set_user_attr(ua.verified_key(BEST), verified(result(pick)))
    for n in range(1, others + 1):
        study.set_user_attr(ua.verified_key(OTHER - n + 1), verified(result([2.05, 2.12, 1.93])))
    return study, space, study_dir


def test_the_marginal_case_is_better_fixed_in_advance_and_not_among_two() -> None:
    mine, base = result(MARGINAL), result(BASE)
    assert pd.compare(mine, base, METRICS)["verdict"] == "better"
    assert pd.compare(mine, base, METRICS, among=2)["verdict"] == "no detectable difference"
    assert pd.family_level(["a", "b"], among=3) == 1 - 0.05 / 6


def test_a_marginal_better_among_two_awaits_its_confirmation(tmp_path: Path) -> None:
    study, space, study_dir = study_with(tmp_path, MARGINAL)
    assert verified_among(study, 30) == 2
    todo = to_confirm(study, space)
    assert todo is not None
    first, base, among = todo
    assert (first.number, base.number, among) == (BEST, 0, 2)
    assert fresh_seeds(space) == [4, 5, 6]  # after the verification's 1, 2, 3
    summary = st.summarize(study, space, study_dir)
    vs = summary["vs_baseline"]
    assert summary["pick"]["number"] == BEST and vs["verdict"] == "better"
    assert vs["confirmation"] == {"among": 2, "pending": True}
    text = st.format_summary(summary)
    assert "chosen among 2 verified configurations on these seeds, it is not yet confirmed" in text


def test_no_confirmation_where_no_choice_explains_the_win(tmp_path: Path) -> None:
    # one searched configuration verified: nothing was chosen among others on these seeds
    study, space, _ = study_with(tmp_path, MARGINAL, others=0)
    assert verified_among(study, 30) == 1 and to_confirm(study, space) is None
    # a win better even with the error shared over the two: no confirmation either
    large = [b * math.exp(-0.5 + e) for b, e in zip(BASE, (-0.01, 0.0, 0.01), strict=True)]
    study, space, study_dir = study_with(tmp_path / "large", large)
    assert pd.compare(result(large), result(BASE), METRICS, among=2)["verdict"] == "better"
    assert to_confirm(study, space) is None
    assert "confirmation" not in st.summarize(study, space, study_dir)["vs_baseline"]
    # verify.top_k 1: one candidate verified by design
    study, _, _ = study_with(tmp_path / "one", MARGINAL)
    assert to_confirm(study, space_of(verify_top_k=1)) is None


def confirm(study: Any, pick_fresh: list[float], base_fresh: list[float]) -> None:
    """Store a confirmation of BEST over seeds 4-6 as `confirm.confirm_phase` does."""
    study.set_user_attr(
        ua.CONFIRMED,
        {
            "number": BEST,
            "baseline": 0,
            "steps": 30,
            "among": 2,
            "chosen_on": [1, 2, 3],
            "seeds": [4, 5, 6],
            "first_verdict": "better",
            "pick": verified(result([*MARGINAL, *pick_fresh])),
            "baseline_result": verified(result([*BASE, *base_fresh])),
        },
    )


def test_a_gain_only_on_the_seeds_it_was_chosen_on_gives_way_to_the_defaults(
    tmp_path: Path,
) -> None:
    study, space, study_dir = study_with(tmp_path, MARGINAL)
    confirm(study, [2.0, 2.2, 1.8], [2.0, 2.2, 1.8])  # the fresh seeds: no gain at all
    assert to_confirm(study, space) is None  # confirmed: not asked for again
    summary = st.summarize(study, space, study_dir)
    pick, vs = summary["pick"], summary["vs_baseline"]
    assert (pick["number"], pick["first_choice"], pick["defaults_preferred"]) == (0, BEST, True)
    assert vs["verdict"] == "no detectable difference" and vs["seeds"] == [1, 2, 3, 4, 5, 6]
    conf = vs["confirmation"]
    assert conf["chosen_on"] == [1, 2, 3] and conf["seeds"] == [4, 5, 6] and conf["among"] == 2
    text = st.format_summary(summary)
    assert f"trial {BEST} vs baseline (paired over seeds [1, 2, 3, 4, 5, 6])" in text
    assert "chosen among 2 verified configurations on seeds [1, 2, 3], where it read better" in text
    assert "pick: the defaults (trial 0)" in text


def test_a_gain_that_holds_on_fresh_seeds_stays_better(tmp_path: Path) -> None:
    study, space, study_dir = study_with(tmp_path, MARGINAL)
    fresh = [2.0, 2.2, 1.8]
    kept = [b * math.exp(-0.2 + e) for b, e in zip(fresh, (0.05, -0.03, 0.0), strict=True)]
    confirm(study, kept, fresh)
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] == BEST and summary["vs_baseline"]["verdict"] == "better"
    assert summary["vs_baseline"]["metrics"]["final_loss"]["difference"]["n"] == 6
    assert "pending" not in summary["vs_baseline"]["confirmation"]
