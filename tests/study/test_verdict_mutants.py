"""`autotune.study.verdict` field by field: the summary's `verified` rows, its `pick` and its
`vs_baseline` as `show --json` prints them, the preference for the defaults and its refusals,
and why each verified candidate is not the pick. A real SQLite Optuna study with made-up
records (the helpers of tests/study/test_verdicts.py); every expected value is built from the
records the test wrote, so a wrong field, a wrong branch or a wrong reason fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from assets import studies as h
from test_verdicts import N, metrics, recorded, result, space_of, verified

from autotune import study as st
from autotune.recipe import paired as pd
from autotune.study import export as ex
from autotune.study import pick as pk
from autotune.study import verdict as vd
from autotune.study.summary_text import _pick_lines

OBJ = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]
BEST = N - 1  # the lowest loss_cv of the recorded study: the balanced pick
# what a verified configuration not picked says the pick is (not the printed front's knee)
KNEE = "the knee of the verified configurations that held"


def expected_row(ver: dict[str, Any], number: int, baseline: bool, why: str | None) -> dict:
    return {
        "number": number,
        "baseline": baseline,
        "diverged_share": ver["diverged_share"],
        "causes": {},
        "held": True,
        "why_not_picked": why,
        "seeds": [1, 2, 3],
        "final_loss": ver["metrics"]["final_loss"],
        "metrics": {m: ver["metrics"][m] for m in ("loss_cv", "throughput")},
        "runs": [
            {
                "seed": s,
                "outcome": "complete",
                "cause": None,
                "feasible": True,
                "steps_run": 30,
                "error": None,  # a failed seed's error, one line
            }
            for s in (1, 2, 3)
        ],
        "vacuous": ver.get("vacuous", []),
        "run_id": ver.get("run_id"),
        "steps": 30,
    }


def test_the_summary_of_a_better_pick_field_by_field(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    base = verified(result([2.0, 2.1, 1.9]))
    mine = verified(result([1.50, 1.61, 1.42], cvs=[0.05, 0.06, 0.055]))
    # its verification's MLflow run, and a relative constraint it could not be held to
    mine.update(run_id="run5", vacuous=["final_loss <= 1.05 x baseline"])
    study.set_user_attr("autotune.verified.0", base)
    study.set_user_attr(f"autotune.verified.{BEST}", mine)
    out = vd.pick_part(study, OBJ)
    assert set(out) == {"verified", "pick", "vs_baseline", "throughput_noise"}
    assert out["throughput_noise"] == pk.noise_note(pk.candidates(study), OBJ)
    # ranked: the pick first; the baseline says why it is not the pick
    assert out["verified"] == [
        expected_row(mine, BEST, False, None),
        expected_row(base, 0, True, f"held, but the balanced pick ({KNEE}) is trial {BEST}"),
    ]
    trial = study.trials[BEST]
    assert out["pick"] == {
        "how": "balanced",
        "number": BEST,
        "verified": True,
        "holds": True,
        "steps": None,  # the study decided at its screen: no rung length
        "values": [mine["metrics"]["loss_cv"]["mean"], mine["metrics"]["throughput"]["mean"]],
        "params": trial.params,
        "knobs": trial.user_attrs["autotune.knobs"],
        "baseline": False,
        "verdict": "better",
        "defaults_preferred": False,
        "first_choice": BEST,
    }
    vs = out["vs_baseline"]
    metrics = pd.compared_metrics(OBJ)
    assert {k: v for k, v in vs.items() if k not in ("steps", "pick", "baseline")} == pd.compare(
        mine, base, metrics
    )
    assert vs["steps"] == 30  # the verification's length, the decision carrying none
    assert vs["pick"] == {
        "number": BEST,
        "source": "verified",
        "final_loss": mine["metrics"]["final_loss"],
        "diverged_share": 0.0,
        "causes": {},
    }
    assert vs["baseline"] == {
        "number": 0,
        "source": "verified",
        "final_loss": base["metrics"]["final_loss"],
        "diverged_share": 0.0,
        "causes": {},
    }


def test_when_no_candidate_held_the_summary_names_the_best_and_why(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    base = verified(result([2.0, 9.0, 1.9], ["complete", "diverged", "complete"]))
    gone = verified(result([1.5, 1.6, 9.0], ["complete", "complete", "diverged"], cv=0.05))
    study.set_user_attr("autotune.verified.0", base)
    study.set_user_attr(f"autotune.verified.{BEST}", gone)
    out = vd.pick_part(study, OBJ)
    tried = [c for c in pk.candidates(study) if c.verified is not None]
    best = pk.ranked(tried, OBJ)[0]
    with pytest.raises(pk.NoCandidateHolds) as e:
        pk.pick(pk.candidates(study), OBJ)
    assert out["pick"] == {
        "how": "balanced",
        "number": None,
        "holds": False,
        "best": best.number,
        "best_diverged_share": pytest.approx(1 / 3),
        "steps": None,  # decided at the screen: no rung length
        "why": "trial 0 diverged on seed 2 (loss_explosion); "
        f"trial {BEST} diverged on seed 3 (loss_explosion)",
        "message": str(e.value),
    }
    assert out["vs_baseline"] is None
    rows = {r["number"]: r for r in out["verified"]}
    assert rows[BEST]["causes"] == {"loss_explosion": 1} and rows[BEST]["held"] is False
    assert rows[BEST]["why_not_picked"] == f"trial {BEST} diverged on seed 3 (loss_explosion)"
    assert [r["outcome"] for r in rows[BEST]["runs"]] == ["complete", "complete", "diverged"]
    assert rows[BEST]["runs"][2]["cause"] == "loss_explosion"
    assert rows[BEST]["runs"][2]["feasible"] is False


def test_when_only_the_defaults_were_verified_and_broke_they_are_the_pick_as_such(
    tmp_path: Path,
) -> None:
    """Nothing searched reached verification (none was feasible: the baseline alone went on),
    and the defaults diverged on one seed: they are all there is, so they are the pick, said to
    be the defaults and said not to hold, never a promise that they meet the constraints."""
    space = space_of()
    study, study_dir = recorded(tmp_path, space, [2.0] * N)
    base = verified(result([2.0, 9.0, 1.9], ["complete", "diverged", "complete"]))
    study.set_user_attr("autotune.verified.0", base)
    cands = pk.candidates(study)
    with pytest.raises(pk.NoCandidateHolds):  # the pick alone still refuses
        pk.pick(cands, OBJ)
    d = vd.decide(study, cands, OBJ, "balanced")
    assert d.chosen.number == 0 and d.chosen.baseline and d.defaults_preferred
    assert d.verdict["defaults_hold"] is False
    assert "no searched configuration reached verification" in d.verdict["why"]
    assert "trial 0 diverged on seed 2 (loss_explosion)" in d.verdict["why"]
    assert "diverged on 33% of its seeds" in d.verdict["why"]
    out = vd.pick_part(study, OBJ)
    assert out["pick"]["number"] == 0 and out["pick"]["holds"] is False
    assert out["pick"]["defaults_preferred"] is True
    # the summary, `show --json` and the export say so, with why; of a study whose verification
    # is over (no searched trial left to verify: with one left, it was cut short, and the pick
    # is by the trials' own runs, `autotune.study.unfinished`)
    over = space_of(verify_top_k=0)
    text = st.format_summary(st.summarize(study, over, study_dir))
    assert "pick: the defaults (trial 0): no searched configuration reached verification" in text
    recipe = ex.recipe_from_study(str(study_dir))
    assert recipe.source["trial"] == 0 and recipe.source["defaults"] is True
    note = ex.verdict_note(recipe) or ""
    assert note.startswith("exporting PyTorch's defaults (trial 0): no searched configuration")
    assert "nothing says they meet the constraints" in note
    # an explicit trial is the user's: not replaced by this rule
    mine = vd.decide(study, cands, OBJ, f"trial {BEST}")
    assert mine.chosen.number == BEST and not mine.defaults_preferred
    # once a searched configuration was verified (and broke too), no pick: the user chooses
    gone = verified(result([1.5, 1.6, 9.0], ["complete", "complete", "diverged"], cv=0.05))
    study.set_user_attr(f"autotune.verified.{BEST}", gone)
    with pytest.raises(pk.NoCandidateHolds):
        vd.decide(study, pk.candidates(study), OBJ, "balanced")


def test_a_baseline_that_is_no_candidate_is_still_shown_and_can_be_preferred(
    tmp_path: Path,
) -> None:
    # the baseline did not learn by the screen (loss_drop 0 < 0.05): no candidate, but verified
    study2 = with_infeasible_baseline(tmp_path)
    assert study2.trials[0].user_attrs.get("autotune.baseline")
    base = verified(result([2.0, 2.4, 1.8], cvs=[0.3, 0.25, 0.33]))
    mine = verified(result([2.1, 2.2, 1.9], cvs=[0.27, 0.28, 0.31]))  # within the noise
    study2.set_user_attr("autotune.verified.0", base)
    study2.set_user_attr(f"autotune.verified.{BEST}", mine)
    cands = pk.candidates(study2)
    assert 0 not in [c.number for c in cands]
    out = vd.pick_part(study2, OBJ)
    rows = out["verified"]
    assert [r["number"] for r in rows][-1] == 0
    assert rows[-1]["why_not_picked"] is None  # it is the pick (below)
    assert rows[-1]["baseline"] is True and rows[-1]["seeds"] == [1, 2, 3]
    # no detectable difference: the defaults are the pick, built from the baseline's trial
    pick = out["pick"]
    t = study2.trials[0]
    assert (pick["number"], pick["first_choice"], pick["verdict"]) == (
        0,
        BEST,
        "no detectable difference",
    )
    assert pick["defaults_preferred"] is True and pick["baseline"] is True
    assert pick["holds"] is True and pick["verified"] is True
    assert pick["params"] == t.params and pick["knobs"] == t.user_attrs["autotune.knobs"]
    assert pick["values"] == [
        base["metrics"]["loss_cv"]["mean"],
        base["metrics"]["throughput"]["mean"],
    ]
    assert out["vs_baseline"]["baseline"]["number"] == 0
    assert out["vs_baseline"]["pick"]["number"] == BEST
    # the baseline as a configuration: every field from its trial
    choice = vd.baseline_choice(study2, cands, 30)
    assert choice is not None
    assert (choice.number, choice.baseline, choice.steps) == (0, True, 30)
    assert choice.values == [float(v) for v in t.values]
    assert choice.metrics == t.user_attrs["autotune.metrics"]
    assert choice.knobs == t.user_attrs["autotune.knobs"]
    assert choice.env == dict(t.user_attrs.get("autotune.env") or {})
    assert choice.params == t.params
    assert choice.fp_hash == t.user_attrs.get("autotune.fp_hash")
    assert choice.verified == base
    # at another length it has no verified numbers there
    assert vd.baseline_choice(study2, cands, 90).verified is None  # type: ignore[union-attr]


def with_infeasible_baseline(folder: Path, how_many: int = 1) -> Any:
    ms = [metrics(0.5 - 0.05 * i, 2.0) for i in range(N)]
    for m in ms[:how_many]:
        m["loss_drop"] = 0.0  # did not learn by the screen
    study_dir = h.recorded_study(folder, "v", trials=N, finished=N, metrics=ms)
    return optuna.load_study(study_name="v", storage=f"sqlite:///{study_dir / 'optuna.db'}")


def test_the_baseline_is_verified_only_at_its_own_length(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    assert vd.baseline_verified(study, 30) == (0, None)  # not verified yet
    base = verified(result([2.0, 2.1, 1.9]))
    study.set_user_attr("autotune.verified.0", base)
    assert vd.baseline_verified(study, 30) == (0, base)
    assert vd.baseline_verified(study, None) == (0, base)  # any length
    assert vd.baseline_verified(study, 90) == (0, None)  # verified at 30, not at 90


def candidate(number: int, ver: dict[str, Any] | None, baseline: bool = False) -> pk.Candidate:
    return pk.Candidate(
        number=number,
        values=[0.1, 100.0],
        metrics={"loss_cv": 0.1, "throughput": 100.0, "final_loss": 2.5},
        knobs={},
        env={},
        params={},
        baseline=baseline,
        verified=ver,
        steps=30,
    )


def test_against_the_baseline_itself_or_unverified_is_not_compared(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    base = verified(result([2.0, 2.1, 1.9]))
    study.set_user_attr("autotune.verified.0", base)
    metrics = pd.compared_metrics(OBJ)
    same = pd.compare(None, None, metrics, same=True)
    assert vd.against_baseline(study, candidate(0, base), OBJ) == same  # its number
    assert vd.against_baseline(study, candidate(7, base, baseline=True), OBJ) == same
    unverified = vd.against_baseline(study, candidate(BEST, None), OBJ)
    assert unverified == {
        **pd.compare(None, None, metrics),
        "why": "not verified over seeds: no paired comparison",
    }
    mine = verified(result([1.5, 1.6, 1.4]))
    assert vd.against_baseline(study, candidate(BEST, mine), OBJ) == pd.compare(mine, base, metrics)


def test_decide_keeps_an_explicit_trial_and_a_baseline_that_did_not_hold(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    base = verified(result([2.0, 2.4, 1.8], cvs=[0.3, 0.25, 0.33]))
    mine = verified(result([2.1, 2.2, 1.9], cvs=[0.27, 0.28, 0.31]))  # within the noise
    study.set_user_attr("autotune.verified.0", base)
    study.set_user_attr(f"autotune.verified.{BEST}", mine)
    cands = pk.candidates(study)
    named = vd.decide(study, cands, OBJ, "balanced")
    assert (named.chosen.number, named.first.number, named.defaults_preferred) == (0, BEST, True)
    assert named.verdict["verdict"] == "no detectable difference"
    assert "defaults_not_taken" not in named.verdict
    other = vd.decide(study, cands, OBJ, "trial 2")  # an explicit trial: that one
    assert (other.chosen.number, other.first.number) == (2, 2)
    explicit = vd.decide(study, cands, OBJ, f"trial {BEST}")
    assert (explicit.chosen.number, explicit.first.number) == (BEST, BEST)
    assert explicit.defaults_preferred is False
    assert explicit.verdict["verdict"] == "no detectable difference"
    # the baseline broke a constraint on a seed: the defaults are not taken, said so, with
    # the constraint the seed broke (`verification.judge_seeds` records it)
    runs = [dict(r, feasible=r["seed"] != 2) for r in base["runs"]]
    runs[1]["broken"] = ["loss_drop >= 0.05 (got -1.7)"]
    broke = dict(base, all_feasible=False, runs=runs)
    study.set_user_attr("autotune.verified.0", broke)
    held_only = [c for c in pk.candidates(study) if c.number != 0]
    kept = vd.decide(study, held_only, OBJ, "balanced")
    assert (kept.chosen.number, kept.first.number, kept.defaults_preferred) == (BEST, BEST, False)
    assert kept.verdict["defaults_not_taken"] == (
        f"the defaults break loss_drop >= 0.05 (got -1.7) on seed 2 at 30 steps: the pick "
        f"stays trial {BEST}"
    )
    # the summary says it under the pick, not only `show --json`
    part = vd.pick_part(study, OBJ)
    assert part["pick"]["number"] == BEST and not part["pick"]["defaults_preferred"]
    assert f"  not the defaults: {kept.verdict['defaults_not_taken']}" in _pick_lines(part)
    # a record from before the constraint was named: why it did not hold, as the pick says it
    del runs[1]["broken"]
    study.set_user_attr("autotune.verified.0", dict(broke, runs=runs))
    older = vd.decide(study, held_only, OBJ, "balanced")
    assert older.verdict["defaults_not_taken"] == (
        "the defaults did not hold on every seed (trial 0 broke a constraint on seed 2) at 30 "
        f"steps: the pick stays trial {BEST}"
    )


def test_why_a_verified_candidate_is_not_the_pick() -> None:
    ok = verified(result([2.0, 2.1, 1.9]))
    gone = verified(result([2.0, 9.0, 1.9], ["complete", "diverged", "complete"]))
    first, base, other = candidate(5, ok), candidate(0, ok, baseline=True), candidate(3, ok)
    verdict = {"verdict": "no detectable difference"}
    preferred = vd.Decision(base, first, verdict, defaults_preferred=True)
    assert vd.why_not_picked(base, preferred) is None
    assert vd.why_not_picked(first, preferred) == (
        "no detectable difference against the defaults over the same seeds: the defaults are "
        "preferred"
    )
    assert vd.why_not_picked(other, preferred) == f"held, but the balanced pick ({KNEE}) is trial 5"
    assert vd.why_not_picked(other, None) == "no pick"
    diverged = candidate(4, gone)
    assert vd.why_not_picked(diverged, preferred) == "trial 4 diverged on seed 2 (loss_explosion)"
    assert vd.why_not_picked(diverged, None) == "trial 4 diverged on seed 2 (loss_explosion)"


def test_standing_from_the_seeds_or_from_the_one_run() -> None:
    runs = result([2.0, 9.0, 1.9, 2.2], ["complete", "diverged", "failed", "diverged"])
    runs["runs"][2]["cause"] = None  # a failure without a named cause counts by its outcome
    ver = verified(runs)
    got = vd.standing(candidate(2, ver))
    assert got == {
        "number": 2,
        "source": "verified",
        "final_loss": ver["metrics"]["final_loss"],
        "diverged_share": ver["diverged_share"],
        "causes": {"loss_explosion": 2, "failed": 1},
    }
    # verified, but no final loss recorded: an empty interval row, not an error
    bare = {"runs": [], "metrics": {}, "diverged_share": 0.0}
    assert vd.standing(candidate(2, bare))["final_loss"] == {
        "mean": None,
        "low": None,
        "high": None,
        "n": 0,
    }
    # not verified: its one run's final loss, as a one-seed row
    assert vd.standing(candidate(3, None)) == {
        "number": 3,
        "source": "run",
        "final_loss": {"mean": 2.5, "low": None, "high": None, "n": 1},
        "diverged_share": None,
        "causes": {},
    }
    no_loss = candidate(4, None)
    no_loss.metrics = {}
    assert vd.standing(no_loss)["final_loss"] == {"mean": None, "low": None, "high": None, "n": 0}


def test_the_baseline_as_a_configuration_from_its_trial_records() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    study.add_trial(
        optuna.trial.create_trial(
            values=[0.3, 90.0],
            params={"clip_norm": 1.0},
            distributions={"clip_norm": optuna.distributions.FloatDistribution(0.1, 10.0)},
            user_attrs={
                "autotune.baseline": True,
                "autotune.metrics": {"loss_cv": 0.3},
                "autotune.knobs": {"clip_norm": None},
                "autotune.env": {"NCCL_ALGO": "Ring"},
                "autotune.fp_hash": "fp0",
            },
        )
    )
    choice = vd.baseline_choice(study, [], 30)
    assert choice is not None
    assert (choice.env, choice.fp_hash, choice.knobs) == (
        {"NCCL_ALGO": "Ring"},
        "fp0",
        {"clip_norm": None},
    )
    assert choice.values == [0.3, 90.0] and choice.verified is None and choice.baseline
    # a candidate that is the baseline is taken as it is
    mine = candidate(0, None, baseline=True)
    assert vd.baseline_choice(study, [candidate(3, None), mine], 30) is mine
    # no baseline in the study: none
    assert vd.baseline_choice(optuna.create_study(), [candidate(3, None)], 30) is None
    assert vd.baseline_verified(optuna.create_study(), 30) == (None, None)


def test_a_study_decided_at_a_length_reads_the_baseline_at_that_length(tmp_path: Path) -> None:
    study = with_infeasible_baseline(tmp_path)
    study.set_user_attr("autotune.decided", {"steps": 30})
    study.set_user_attr("autotune.verified.0", verified(result([2.0, 2.1, 1.9]), steps=90))
    mine = verified(result([1.5, 1.6, 1.4]), steps=30)
    study.set_user_attr(f"autotune.verified.{BEST}", mine)
    out = vd.pick_part(study, OBJ)
    # the baseline was verified at 90 steps only: no row, and no verified numbers at 30
    assert [r["number"] for r in out["verified"]] == [BEST]
    assert out["pick"]["steps"] == 30 and out["vs_baseline"]["steps"] == 30
    assert out["vs_baseline"]["baseline"]["source"] == "run"
    assert out["vs_baseline"]["verdict"] == "not compared"
    # verified at 30 too: its row, its seeds
    study.set_user_attr("autotune.verified.0", verified(result([2.0, 2.1, 1.9]), steps=30))
    out = vd.pick_part(study, OBJ)
    assert [r["number"] for r in out["verified"]] == [BEST, 0]
    assert out["vs_baseline"]["baseline"]["source"] == "verified"
    assert out["vs_baseline"]["verdict"] == "better"
    # within the noise of the defaults: they are the pick, at the decided length
    near = verified(result([2.1, 2.2, 1.9], cvs=[0.1, 0.1, 0.1]), steps=30)
    study.set_user_attr(f"autotune.verified.{BEST}", near)
    study.set_user_attr("autotune.verified.0", verified(result([2.0, 2.4, 1.8]), steps=30))
    pick = vd.pick_part(study, OBJ)["pick"]
    assert (pick["number"], pick["defaults_preferred"], pick["steps"]) == (0, True, 30)


def test_when_the_one_verified_candidate_did_not_hold(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    study.set_user_attr("autotune.decided", {"steps": 30})
    gone = verified(result([1.5, 9.0, 1.4], ["complete", "diverged", "complete"]), steps=30)
    study.set_user_attr(f"autotune.verified.{BEST}", gone)
    pick = vd.pick_part(study, OBJ)["pick"]
    assert (pick["number"], pick["best"], pick["steps"]) == (None, BEST, 30)


def test_an_unverified_pick_holds_nothing_either_way(tmp_path: Path) -> None:
    study, _ = recorded(tmp_path, space_of(), [2.0] * N)
    out = vd.pick_part(study, OBJ)
    pick = out["pick"]
    assert (pick["number"], pick["verified"], pick["holds"]) == (BEST, False, None)
    assert pick["verdict"] == "not compared" and out["verified"] == []
    assert out["vs_baseline"]["pick"]["source"] == "run"


def test_a_study_without_a_candidate_has_no_pick(tmp_path: Path) -> None:
    study = with_infeasible_baseline(tmp_path, how_many=N)
    assert pk.candidates(study) == []
    out = vd.pick_part(study, OBJ)
    assert out == {"verified": [], "pick": None, "vs_baseline": None, "throughput_noise": None}


def test_a_study_without_a_baseline_has_no_baseline_row() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    for cv, tp in [(0.2, 100.0), (0.1, 90.0)]:
        study.add_trial(
            optuna.trial.create_trial(
                values=[cv, tp],
                user_attrs={"autotune.feasible": True, "autotune.metrics": {"final_loss": 2.0}},
            )
        )
    out = vd.pick_part(study, OBJ)
    assert out["pick"]["number"] in (0, 1) and out["pick"]["verdict"] == "not compared"
    assert out["vs_baseline"]["baseline"] is None
