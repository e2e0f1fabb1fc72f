"""Rank fidelity (`autotune.study.fidelity`) and `compute_saved`, read back from a real SQLite
Optuna study and its folder as `autotune show --json`, the summary and the recipe carry them.
Made-up probe results (no Ray, no probe process); tau-b is checked against scipy's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from assets import studies as h
from scipy import stats

from autotune import space as sp
from autotune import study as st
from autotune.study import attrs as ua
from autotune.study import fidelity as fd
from autotune.study import rung_phase as rp
from autotune.study import rungs as rg
from autotune.study.export import recipe_from_study
from autotune.study.verification import to_verify

# trial i's loss_cv at the screen (30 steps), and at the target (90 steps): ten, as many as
# the bootstrap interval needs (`fidelity.INTERVAL_MIN_N`)
SCREEN_CV = [0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0]
TARGET_CV = [0.45, 0.12, 0.30, 0.20, 0.50, 0.40, 0.85, 0.65, 0.95, 0.75]
N = len(SCREEN_CV)


def rung_study(
    tmp_path: Path,
    target_cv: list[float],
    decided_steps: int = 90,
    screen_cv: list[float] = SCREEN_CV,
) -> Any:
    """The trials screened, all of them run at the target (90 steps, rung 1), decided there."""
    import optuna

    n = len(screen_cv)
    metrics = [{"loss_cv": v, "throughput": 100.0, "loss_drop": 0.5} for v in screen_cv]
    study_dir = h.recorded_study(
        tmp_path,
        "f",
        trials=n,
        finished=n,
        metrics=metrics,
        overrides=["budget.target_steps=90", "verify.top_k=1"],
    )
    study = optuna.load_study(study_name="f", storage=f"sqlite:///{study_dir / 'optuna.db'}")
    space = sp.loads(
        h.mlp_space("f", trials=n, verify_top_k=1),
        source="f",
        overrides=["budget.target_steps=90"],
    )
    for t in study.get_trials():
        m = {"loss_cv": target_cv[t.number], "throughput": 100.0, "loss_drop": 0.5}
        out = {"outcome": "complete", "summary": {"metrics": m, "samples_seen": 32 * 90}}
        rp.record_rung(space, study, study_dir, t, 1, 90, out)
    study.set_user_attr(ua.RUNGS, [{"rung": 1, "steps": 90, "numbers": list(range(n))}])
    rung = 1 if decided_steps == 90 else 0
    decided = {"steps": decided_steps, "rung": rung, "target_steps": 90, "reason": "target"}
    study.set_user_attr(ua.DECIDED, {**decided, "tau": None})
    return study, space, study_dir


def test_the_rank_fidelity_is_kendall_tau_b_with_a_bootstrap_interval(tmp_path: Path) -> None:
    study, space, study_dir = rung_study(tmp_path, TARGET_CV)
    for c in to_verify(study, space):  # its verification over: a finished study's saving
        study.set_user_attr(ua.verified_key(c.number), h.verified_result({"loss_cv": 0.1}, 90))
    summary = st.summarize(study, space, study_dir)
    fid = summary["rank_fidelity"]
    want = stats.kendalltau(SCREEN_CV, TARGET_CV).statistic
    assert fid["tau"] == pytest.approx(want) and fid["n"] == N
    assert (fid["from_steps"], fid["to_steps"], fid["metric"]) == (30, 90, "loss_cv")
    assert -1.0 <= fid["low"] < fid["tau"] < fid["high"] <= 1.0
    # the same study gives the same interval (a fixed seed)
    assert st.summarize(study, space, study_dir)["rank_fidelity"] == fid
    assert fd.format_line(fid) in st.format_summary(summary).splitlines()
    assert f"tau-b {want:+.2f} [{fid['low']:+.2f}, {fid['high']:+.2f}] (n {N}" in (
        fd.format_line(fid) or ""
    )
    # from fewer configurations than can show an order, no tau is printed as if it could
    few = {**fid, "n": 3, "tau": 1.0, "low": 1.0, "high": 1.0}
    assert fd.format_line(few) == (
        "rank fidelity 30 -> 90 steps: too few configurations to tell (n=3, at least 4)"
    )
    # compute_saved: against every trial and the same verification at the target
    c = summary["compute"]
    assert summary["compute_saved"] == pytest.approx(1 - c["total"] / c["full_length"])
    assert c["full_length"] == 32 * 90 * (N + 1 * 2)


def test_a_perfect_ranking_claims_no_degenerate_interval(tmp_path: Path) -> None:
    # every resample of a perfect order is in perfect order: [+1.00, +1.00] would read as
    # certainty; the chance p says how often it happens at random instead
    same = [v * 2 for v in SCREEN_CV]  # same order, other values
    study, space, study_dir = rung_study(tmp_path, same)
    fid = st.summarize(study, space, study_dir)["rank_fidelity"]
    assert (fid["tau"], fid["low"], fid["high"], fid["n"]) == (1.0, None, None, N)
    assert fid["p"] == pytest.approx(rg.chance(SCREEN_CV, same)) and fid["p"] < 0.001
    assert "every resample ranks alike" in (fd.format_line(fid) or "")
    assert "[+1.00, +1.00]" not in (fd.format_line(fid) or "")


def test_four_in_order_carry_their_chance_and_no_interval(tmp_path: Path) -> None:
    # four configurations in perfect order happen by chance one time in 24: no interval from
    # them (a bootstrap of four always gives [1, 1]), the chance p as the rung line gives it
    four = [0.1, 0.2, 0.3, 0.4]
    study, space, study_dir = rung_study(tmp_path, [v * 2 for v in four], screen_cv=four)
    summary = st.summarize(study, space, study_dir)
    fid = summary["rank_fidelity"]
    assert (fid["tau"], fid["low"], fid["high"], fid["n"]) == (1.0, None, None, 4)
    assert fd.format_line(fid) == (
        "rank fidelity 30 -> 90 steps: tau-b +1.00 (n 4, loss_cv, chance p 0.042; too few "
        f"configurations for an interval (at least {fd.INTERVAL_MIN_N}))"
    )
    assert fd.format_line(fid) in st.format_summary(summary).splitlines()


def test_decided_below_the_target_there_is_no_fidelity_to_claim(tmp_path: Path) -> None:
    study, space, study_dir = rung_study(tmp_path, TARGET_CV, decided_steps=30)
    study.set_user_attr(ua.RUNGS, [])
    summary = st.summarize(study, space, study_dir)
    fid = summary["rank_fidelity"]
    assert fid["tau"] is None and fid["n"] == 0 and "no configuration ran the target" in fid["note"]
    assert fd.format_line(fid) is None
    assert "rank fidelity" not in st.format_summary(summary)


def test_the_recipe_carries_compute_saved_and_the_rank_fidelity(tmp_path: Path) -> None:
    study, space, study_dir = rung_study(tmp_path, TARGET_CV)
    summary = st.summarize(study, space, study_dir)
    recipe = recipe_from_study(str(study_dir))
    assert recipe.source["rank_fidelity"] == summary["rank_fidelity"]
    assert recipe.source["compute_saved"] == pytest.approx(summary["compute_saved"])


def test_too_tied_to_tell_is_said_as_the_rungs_agreement_says_it(tmp_path: Path) -> None:
    tied = [0.2] * (N - 1) + [0.9]  # two distinct ranks: no order can show agreement
    study, space, study_dir = rung_study(tmp_path, tied)
    fid = st.summarize(study, space, study_dir)["rank_fidelity"]
    objectives = [o.model_dump() for o in space.objectives]
    screen, target = fd._screen(study, space, range(N)), fd._rung(study, range(N), 90)
    agreed = rg.agreement(screen, target, objectives)
    assert agreed["tau"] is None and agreed["note"] == fid["note"]
    assert fid["note"] == f"too few configurations to tell (n={N}, too many tied)"
    assert fd.format_line(fid) == (
        f"rank fidelity 30 -> 90 steps: too few configurations to tell (n={N}, too many tied)"
    )
