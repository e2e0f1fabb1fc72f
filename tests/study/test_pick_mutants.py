"""`autotune.study.pick` at its edges: when a verified candidate holds, which value a candidate
shows, the pick's spellings, who is a candidate at a rung, the picks' refusals and their
messages, `fastest` and `stablest` on their own, why none held, why there is nothing to pick,
and a warm start's match. Each case is worked by hand from the inputs; a wrong branch, bound
or message fails here."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import optuna
import pytest

from autotune.errors import RecipeError
from autotune.study import pick as pk

OBJ = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]


def cand(
    number: int,
    cv: float,
    tp: float,
    ver: dict[str, Any] | None = None,
    *,
    steps: int | None = None,
    metrics: dict[str, Any] | None = None,
) -> pk.Candidate:
    return pk.Candidate(
        number=number,
        values=[cv, tp],
        metrics={"loss_cv": cv, "throughput": tp} if metrics is None else metrics,
        knobs={},
        env={},
        params={},
        verified=ver,
        steps=steps,
    )


def ver(
    cv: float | None = 0.1,
    tp: float | None = 100.0,
    *,
    diverged: float | None = 0.0,
    runs: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    m: dict[str, Any] = {}
    if cv is not None:
        m["loss_cv"] = {"mean": cv, "low": cv, "high": cv, "n": 3}
    if tp is not None:
        m["throughput"] = {"mean": tp, "low": tp, "high": tp, "n": 3}
    return {"diverged_share": diverged, "metrics": m, "runs": runs or [], **extra}


def test_holds_only_when_verified_with_no_divergence_failure_or_broken_constraint() -> None:
    assert not cand(1, 0.1, 1.0).holds  # not verified
    assert cand(1, 0.1, 1.0, ver()).holds
    assert cand(1, 0.1, 1.0, ver(diverged=None)).holds  # no share recorded: none diverged
    assert not cand(1, 0.1, 1.0, ver(diverged=0.25)).holds
    assert not cand(1, 0.1, 1.0, ver(failed=1)).holds
    assert cand(1, 0.1, 1.0, ver(failed=0)).holds
    assert not cand(1, 0.1, 1.0, ver(all_feasible=False)).holds
    assert cand(1, 0.1, 1.0, ver(all_feasible=True)).holds


def test_stable_when_verified() -> None:
    assert cand(1, 0.1, 1.0).stable_when_verified  # not verified: nothing says otherwise
    assert cand(1, 0.1, 1.0, ver()).stable_when_verified
    assert not cand(1, 0.1, 1.0, ver(diverged=0.5)).stable_when_verified
    assert cand(1, 0.1, 1.0, {"metrics": {}}).stable_when_verified  # no share: 0


def test_a_candidates_value_is_its_verified_mean_else_its_own() -> None:
    c = cand(1, 0.1, 50.0, metrics={"loss_cv": 0.2, "final_loss": 2.5})
    assert c.value("loss_cv", 0) == 0.1  # by index: its objective value
    assert c.value("loss_cv") == 0.2  # by name: its metrics
    assert c.value("final_loss") == 2.5
    assert math.isnan(c.value("grad_norm"))  # not measured
    c.verified = ver(cv=0.3, tp=None)
    assert c.value("loss_cv", 0) == 0.3 and c.value("loss_cv") == 0.3
    assert c.value("throughput", 1) == 50.0  # not verified: its own
    c.verified["metrics"]["throughput"] = {"mean": None, "low": None, "high": None, "n": 0}
    assert c.value("throughput", 1) == 50.0  # verified without a mean: its own
    c.verified = {"diverged_share": 0.0}  # no metrics recorded at all
    assert c.value("loss_cv", 0) == 0.1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fastest", ("fastest", None)),
        ("  Stablest ", ("stablest", None)),
        ("BALANCED", ("balanced", None)),
        ("12", ("trial", 12)),
        ("trial=4", ("trial", 4)),
        ("trial #5", ("trial", 5)),
        ("trial  06", ("trial", 6)),
    ],
)
def test_every_spelling_of_a_pick(text: str, expected: tuple[str, int | None]) -> None:
    assert pk.parse_pick(text) == expected


@pytest.mark.parametrize("text", ["trial", "trial x", "7 trial", "best", "trial 3 4", "-1"])
def test_a_pick_that_is_none_of_them_says_what_to_choose(text: str) -> None:
    with pytest.raises(RecipeError) as e:
        pk.parse_pick(text)
    assert str(e.value) == (
        f"--pick {text!r}: choose balanced, fastest, stablest or 'trial N' (e.g. --pick 'trial 7')"
    )


def test_who_is_a_candidate_at_the_screen_and_at_a_rung() -> None:
    ok = {"feasible": True, "values": [0.1, 100.0]}
    # decided at the screen: the screen's feasibility, whatever the row
    assert pk.is_candidate(True, None, above_screen=False)
    assert not pk.is_candidate(False, ok, above_screen=False)
    # at a rung: its record there, whatever the screen said
    assert pk.is_candidate(False, ok, above_screen=True)
    assert not pk.is_candidate(True, None, above_screen=True)
    assert not pk.is_candidate(True, {"feasible": False, "values": [0.1]}, above_screen=True)
    assert not pk.is_candidate(True, {"feasible": True, "values": []}, above_screen=True)
    assert not pk.is_candidate(True, {"feasible": True}, above_screen=True)
    # an explicit trial N: one not run at the rung counts by its screen
    assert pk.is_candidate(True, None, above_screen=True, every=True)
    assert not pk.is_candidate(False, None, above_screen=True, every=True)
    assert not pk.is_candidate(
        True, {"feasible": False, "values": [1]}, above_screen=True, every=True
    )


def study_with(attrs: dict[str, Any]) -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])
    for k, v in attrs.items():
        study.set_user_attr(k, v)
    return study


def test_rung_rows_and_verified_results_are_read_by_their_keys() -> None:
    study = study_with(
        {
            "autotune.rung.3.340": {"number": 3, "steps": 340},
            "autotune.rung.12.340": {"number": 12, "steps": 340},
            "autotune.rung.3.1340": {"number": 3, "steps": 1340},  # ends in 340, another rung
            "autotune.rung.4.750": {"number": 4, "steps": 750},
            "autotune.verified.3": {"steps": 340},
            "autotune.verified.12": {"steps": 750},
            "autotune.decided": {"steps": 340},
        }
    )
    assert pk.rung_rows(study, 340) == {
        3: {"number": 3, "steps": 340},
        12: {"number": 12, "steps": 340},
    }
    assert pk.rung_rows(study, 750) == {4: {"number": 4, "steps": 750}}
    assert pk.rung_rows(study, 150) == {}
    assert pk.verified_results(study) == {3: {"steps": 340}, 12: {"steps": 750}}


def test_dominance_by_direction() -> None:
    dirs = ["minimize", "maximize"]
    assert pk.dominates([0.1, 10.0], [0.2, 10.0], dirs)
    assert pk.dominates([0.1, 11.0], [0.1, 10.0], dirs)
    assert pk.dominates([0.1, 10.0], [0.1, 10.0], dirs) is False  # equal: neither
    assert not pk.dominates([0.1, 9.0], [0.2, 10.0], dirs)  # a trade-off
    assert not pk.dominates([0.3, 10.0], [0.2, 10.0], dirs)
    with pytest.raises(ValueError):
        pk.dominates([0.1], [0.2, 1.0], dirs)


def test_a_trial_that_is_not_a_candidate_names_the_decided_length() -> None:
    cands = [cand(1, 0.1, 10.0), cand(2, 0.2, 20.0, steps=340)]
    with pytest.raises(RecipeError) as e:
        pk.pick(cands, OBJ, "trial 9")
    assert str(e.value) == (
        "trial 9 is not a candidate (not a feasible, complete trial at 340 steps, the length "
        "the study decided at)"
    )
    with pytest.raises(RecipeError) as e:
        pk.pick([cand(1, 0.1, 10.0)], OBJ, "trial 9")
    assert str(e.value) == "trial 9 is not a candidate (not a feasible, complete trial)"
    assert pk.pick(cands, OBJ, "trial 2") is cands[1]
    with pytest.raises(RecipeError) as e:
        pk.pick([], OBJ, "fastest")
    assert str(e.value) == "the study has no feasible trial to pick from"


def diverged_run(seed: int, cause: str | None = "loss_explosion") -> dict[str, Any]:
    return {"seed": seed, "outcome": "diverged", "cause": cause}


def test_when_none_held_the_message_names_the_best_and_how_far_it_diverged() -> None:
    runs = [{"seed": 1, "outcome": "complete"}, diverged_run(2)]
    a = cand(1, 0.1, 10.0, ver(0.1, 10.0, diverged=0.5, runs=runs), steps=340)
    b = cand(2, 0.2, 10.0, ver(0.2, 10.0, diverged=0.5, runs=runs), steps=340)
    c = cand(3, 0.05, 10.0)  # not verified: not among those tried
    with pytest.raises(pk.NoCandidateHolds) as e:
        pk.pick([b, a, c], OBJ, "balanced")
    assert isinstance(e.value, RecipeError)
    assert str(e.value) == (
        "no candidate held on every seed at 340 steps: trial 1 diverged on seed 2 "
        "(loss_explosion); trial 2 diverged on seed 2 (loss_explosion); choose one explicitly "
        "with --pick 'trial 1' (the best of those verified; it diverged on 50% of its seeds)"
    )
    # broke a constraint only, at the screen's length: no share, no length
    broke = [{"seed": 1, "outcome": "complete", "feasible": True}]
    broke.append({"seed": 2, "outcome": "complete", "feasible": False})
    d = cand(4, 0.1, 10.0, ver(all_feasible=False, runs=broke))
    with pytest.raises(pk.NoCandidateHolds) as e:
        pk.pick([d], OBJ, "stablest")
    assert str(e.value) == (
        "no candidate held on every seed: trial 4 broke a constraint on seed 2; choose one "
        "explicitly with --pick 'trial 4' (the best of those verified)"
    )
    # the best verified is the baseline: the message says it is PyTorch's defaults
    base = replace(d, baseline=True)
    with pytest.raises(pk.NoCandidateHolds, match=r"--pick 'trial 4' \(PyTorch's defaults, the"):
        pk.pick([base], OBJ, "stablest")


def test_why_not_held_each_way() -> None:
    failed = {"seed": 3, "outcome": "failed", "cause": None}
    cands = [
        cand(5, 0.1, 1.0, ver(runs=[{"seed": 1, "outcome": "complete"}, failed], failed=1)),
        cand(2, 0.1, 1.0, ver(diverged=0.5, runs=[diverged_run(7)])),
        cand(9, 0.1, 1.0, ver(all_feasible=False, runs=[{"seed": 1, "outcome": "complete"}])),
        cand(1, 0.1, 1.0, ver()),  # held: says nothing
    ]
    assert pk.why_not_held(cands) == (
        "trial 2 diverged on seed 7 (loss_explosion); trial 5 failed on seed 3; "
        "trial 9 broke a constraint on a seed"
    )
    assert pk.why_not_held([cands[3]]) == "no verified candidate"
    assert pk.why_not_held([]) == "no verified candidate"


def test_fastest_is_the_highest_throughput_verified_first() -> None:
    cands = [cand(1, 0.1, 100.0), cand(2, 0.3, 300.0), cand(3, 0.2, 200.0)]
    assert pk.pick(cands, OBJ, "fastest").number == 2
    # verified means count first: 3 is verified at 400
    cands[2].verified = ver(0.2, 400.0)
    cands[1].verified = ver(0.3, 300.0)
    cands[0].verified = ver(0.1, 100.0)
    assert pk.pick(cands, OBJ, "fastest").number == 3
    # throughput not an objective: its metric, by name
    only_cv = [{"metric": "loss_cv", "direction": "minimize"}]
    plain = [cand(1, 0.1, 100.0), cand(2, 0.3, 300.0)]
    assert pk.pick(plain, only_cv, "fastest").number == 2


def test_stablest_is_the_lowest_of_the_first_minimised_objective() -> None:
    objs = [
        {"metric": "throughput", "direction": "maximize"},
        {"metric": "final_loss", "direction": "minimize"},
        {"metric": "loss_cv", "direction": "minimize"},
    ]

    def c(n: int, tp: float, fl: float, cv: float) -> pk.Candidate:
        return pk.Candidate(
            n, [tp, fl, cv], {"throughput": tp, "final_loss": fl, "loss_cv": cv}, {}, {}, {}
        )

    cands = [c(1, 100.0, 2.0, 0.1), c(2, 200.0, 1.5, 0.3), c(3, 50.0, 1.9, 0.05)]
    assert pk.pick(cands, objs, "stablest").number == 2  # final_loss, the first minimised
    # no minimised objective: loss_cv by name
    speed = [{"metric": "throughput", "direction": "maximize"}]
    assert pk.pick(cands, speed, "stablest").number == 3
    # a NaN is never the stablest; equal values go to the lower number
    nan = [c(4, 1.0, math.nan, 0.1), c(6, 1.0, 1.7, 0.1), c(5, 1.0, 1.7, 0.1)]
    assert pk.pick(nan, objs, "stablest").number == 5


def finished(study: optuna.Study, outcome: str, cons: list[float], **attrs: Any) -> None:
    state = (
        optuna.trial.TrialState.COMPLETE if outcome == "complete" else optuna.trial.TrialState.FAIL
    )
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            values=[0.1, 10.0] if outcome == "complete" else None,
            user_attrs={"autotune.outcome": outcome, "autotune.constraints": cons, **attrs},
        )
    )


def test_why_none_in_full() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"])
    names = {"autotune.constraint_names": ["not diverged"]}  # shorter than the constraints
    finished(study, "complete", [0.0, 0.5], **names)  # 0: the unnamed second, by 0.5
    finished(study, "complete", [0.0, 0.0])  # 1: infeasible, no constraint broken
    finished(study, "diverged", [], **{"autotune.cause": "nan_loss"})  # 2
    finished(study, "complete", [0.25, 0.125], **names)  # 3: both, by 0.375 in all
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))  # 4
    assert pk.why_none(study, limit=10) == (
        "trial 1: infeasible; trial 3: broke not diverged (by 0.25), constraint 1 (by 0.125); "
        "trial 0: broke constraint 1 (by 0.5); trial 2: diverged (nan_loss); trial 4: failed"
    )
    assert pk.why_none(study) == (
        "trial 1: infeasible; trial 3: broke not diverged (by 0.25), constraint 1 (by 0.125); "
        "trial 0: broke constraint 1 (by 0.5)"
    )
    running = optuna.create_study(directions=["minimize", "maximize"])
    running.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING))
    running.ask()  # RUNNING: not finished, not listed
    assert pk.why_none(running) == "no finished trial"
    finished(running, "diverged", [])  # after the running one: listed
    assert pk.why_none(running) == "trial 1: diverged"


def test_a_warm_starts_match_within_tolerance_or_better() -> None:
    objs = [
        {"metric": "loss_cv", "direction": "minimize"},
        {"metric": "final_loss", "direction": "maximize"},
        {"metric": "throughput", "direction": "maximize"},
    ]
    src = [0.1, 2.0, 900.0]
    trials = [
        (0, None),  # not finished
        (1, [0.106, 2.0, 1.0]),  # loss_cv 6% worse
        (2, [0.1, 1.89, 1.0]),  # final_loss 5.5% worse (maximised)
        (3, [math.nan, 2.0, 1.0]),  # no value
        (4, [0.105, 1.9, 1.0]),  # both exactly at the 5% edge: a match
        (5, [0.01, 3.0, 1.0]),
    ]
    assert pk.matched_at(trials, src, objs) == 4
    assert pk.matched_at(trials[:4], src, objs) is None
    assert pk.matched_at(trials[:3], src, objs, tolerance=0.06) == 1
    assert pk.matched_at([(7, [0.1, 2.0, 1.0])], [0.1, math.inf, 1.0], objs) is None
    # exactly at the edge (binary fractions: no rounding), each way
    edge = [(8, [2.5, 2.0, 1.0]), (9, [2.0, 1.5, 1.0])]
    assert pk.matched_at(edge, [2.0, 2.0, 1.0], objs, tolerance=0.25) == 8
    assert pk.matched_at(edge[1:], [2.0, 2.0, 1.0], objs, tolerance=0.25) == 9
    assert pk.matched_at(edge, [2.0, 2.0, 1.0], objs, tolerance=0.125) is None
    # a speed space: throughput counts when it is the only objective
    speed = [{"metric": "throughput", "direction": "maximize"}]
    assert pk.matched_at([(1, [800.0]), (2, [860.0])], [900.0], speed) == 2


def screened(study: optuna.Study, values: list[float] | None, feasible: bool, **attrs: Any) -> None:
    state = optuna.trial.TrialState.COMPLETE if values else optuna.trial.TrialState.FAIL
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            values=values,
            params={"clip_norm": 1.0},
            distributions={"clip_norm": optuna.distributions.FloatDistribution(0.1, 10.0)},
            user_attrs={"autotune.feasible": feasible, **attrs},
        )
    )


def screened_study() -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])
    screened(study, [0.3, 90.0], True, **{"autotune.baseline": True})  # 0: the baseline
    screened(
        study,
        [0.1, 100.0],
        True,
        **{
            "autotune.metrics": {"loss_cv": 0.1, "final_loss": 2.0},
            "autotune.knobs": {"clip_norm": 1.0},
            "autotune.env": {"NCCL_ALGO": "Ring"},
            "autotune.fp_hash": "fp1",
        },
    )  # 1
    screened(study, [0.05, 120.0], False)  # 2: infeasible at the screen
    screened(study, None, True)  # 3: failed, no values
    return study


def test_the_candidates_of_a_study_decided_at_its_screen() -> None:
    study = screened_study()
    study.set_user_attr("autotune.decided", {"steps": 30})
    study.set_user_attr("autotune.verified.1", {"steps": 30, "diverged_share": 0.0})
    study.set_user_attr("autotune.verified.0", {"steps": 90, "diverged_share": 0.0})
    cands = pk.candidates(study)
    assert [c.number for c in cands] == [0, 1]
    base, one = cands
    assert base.baseline and not one.baseline
    assert base.verified is None  # verified at 90 steps: no evidence at 30
    assert one.verified == {"steps": 30, "diverged_share": 0.0}
    assert (one.values, one.steps, one.fp_hash) == ([0.1, 100.0], 30, "fp1")
    assert one.metrics == {"loss_cv": 0.1, "final_loss": 2.0}
    assert (one.knobs, one.env, one.params) == (
        {"clip_norm": 1.0},
        {"NCCL_ALGO": "Ring"},
        {"clip_norm": 1.0},
    )
    assert (base.metrics, base.knobs, base.env, base.fp_hash) == ({}, {}, {}, None)
    # a verification that records no length counts at the decided one
    study.set_user_attr("autotune.verified.0", {"diverged_share": 0.0})
    assert pk.candidates(study)[0].verified == {"diverged_share": 0.0}
    # the screen re-judged after the screen: 2 is feasible after all, 1 is not
    study.set_user_attr("autotune.screen_feasible", {"1": False, "2": True})
    assert [c.number for c in pk.candidates(study)] == [0, 2]
    # no decision recorded: the screen, any verification length
    fresh = screened_study()
    fresh.set_user_attr("autotune.verified.0", {"steps": 90})
    got = pk.candidates(fresh)
    assert [c.number for c in got] == [0, 1] and got[0].verified == {"steps": 90}
    assert got[0].steps is None


def test_the_candidates_of_a_study_decided_at_a_rung() -> None:
    study = screened_study()
    study.set_user_attr("autotune.decided", {"steps": 90, "rung": 1})
    row = {"number": 2, "steps": 90, "feasible": True, "values": [0.04, 110.0]}
    study.set_user_attr("autotune.rung.2.90", {**row, "metrics": {"loss_cv": 0.04}})
    base_row = {"number": 0, "steps": 90, "feasible": False, "values": [0.5, 80.0]}
    study.set_user_attr("autotune.rung.0.90", {**base_row, "metrics": {}})
    study.set_user_attr("autotune.verified.2", {"steps": 90})
    study.set_user_attr("autotune.verified.1", {"diverged_share": 0.0})  # no length
    # a trial still waiting (a study stopped mid-rung) is no candidate, whatever its row says
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING))
    row4 = {"number": 4, "steps": 90, "feasible": True, "values": [0.01, 200.0], "metrics": {}}
    study.set_user_attr("autotune.rung.4.90", row4)
    cands = pk.candidates(study)
    # 2 was infeasible at the screen, feasible at the rung; 0 is not feasible there; 1 never ran
    assert [c.number for c in cands] == [2]
    assert cands[0].values == [0.04, 110.0] and cands[0].metrics == {"loss_cv": 0.04}
    assert cands[0].steps == 90 and cands[0].verified == {"steps": 90}
    # every: 1, not run at the rung, counts by its screen, without a length or a verification
    every = {c.number: c for c in pk.candidates(study, every=True)}
    assert sorted(every) == [1, 2]
    assert every[1].steps is None and every[1].verified is None
    assert every[1].values == [0.1, 100.0]


def test_the_throughput_noise_note_is_over_the_candidates_a_named_pick_chooses_among() -> None:
    def timed(n: int, tp: float, v: dict[str, Any] | None = None) -> pk.Candidate:
        m = {
            "loss_cv": 0.1 * n,
            "throughput": tp,
            "throughput_low": tp - 1,
            "throughput_high": tp + 1,
        }
        return cand(n, 0.1 * n, tp, v, metrics=m)

    def tp_ver(tp: float, **extra: Any) -> dict[str, Any]:
        iv = {"mean": tp, "low": tp - 1, "high": tp + 1, "n": 3}
        return {"diverged_share": 0.0, "metrics": {"throughput": iv}, **extra}

    held, gone = timed(1, 100.0, tp_ver(100.0)), timed(2, 300.0, tp_ver(300.0, failed=1))
    plain = timed(3, 200.0)
    # verified ones exist: the note is over those that held (one: nothing to compare)
    assert pk.noise_note([held, gone, plain], OBJ) is None
    other = timed(4, 150.0, tp_ver(150.0))
    note = pk.noise_note([held, gone, plain, other], OBJ)
    assert note is not None and note["candidates"] == 2 and note["range"] == [100.0, 150.0]
    # none verified: all of them
    note = pk.noise_note([timed(1, 100.0), timed(3, 200.0), timed(5, 100.5)], OBJ)
    assert note is not None and note["candidates"] == 3 and note["range"] == [100.0, 200.0]


def test_fastest_and_stablest_read_the_objectives_values_and_intervals() -> None:
    # each candidate's objective values are its own (at the length decided at); its metrics
    # hold the screen's: the picks read the objective's
    a = cand(1, 0.2, 300.0, metrics={"loss_cv": 0.01, "throughput": 10.0})
    b = cand(2, 0.1, 200.0, metrics={"loss_cv": 0.02, "throughput": 900.0})
    assert pk.pick([a, b], OBJ, "fastest").number == 1
    assert pk.pick([a, b], OBJ, "stablest").number == 2


def test_fastest_among_throughputs_within_noise_is_the_stablest() -> None:
    def timed(n: int, cv: float, tp: float, half: float) -> pk.Candidate:
        m = {
            "loss_cv": cv,
            "throughput": tp,
            "throughput_low": tp - half,
            "throughput_high": tp + half,
        }
        return cand(n, cv, tp, metrics=m)

    fast, steady = timed(1, 0.3, 210.0, 10.0), timed(2, 0.1, 200.0, 10.0)
    assert pk.pick([fast, steady], OBJ, "fastest").number == 2  # overlapping: the stabler
    apart = timed(3, 0.1, 150.0, 10.0)
    assert pk.pick([fast, apart], OBJ, "fastest").number == 1  # beyond noise: the faster
    # verified: the interval over its seeds, not its one run's
    fast.verified = ver(0.3, 210.0)
    fast.verified["metrics"]["throughput"].update(low=140.0, high=280.0)
    apart.verified = ver(0.1, 150.0)
    assert pk.pick([fast, apart], OBJ, "fastest").number == 3


def timed_cand(
    n: int, cv: float, tp: float, low: float, high: float, **metrics: float
) -> pk.Candidate:
    m = {"loss_cv": cv, "throughput": tp, "throughput_low": low, "throughput_high": high, **metrics}
    return cand(n, cv, tp, metrics=m)


def test_the_front_leaves_out_an_objective_within_noise_over_all_of_them() -> None:
    # throughput: a and b miss each other's interval, but both overlap the best's (c): within
    # noise as a whole, it decides nothing, and a (the stablest) alone is the front. Judged
    # pair by pair, b's speed would keep it beside a.
    a = timed_cand(1, 0.1, 95.0, 92.0, 108.0)
    b = timed_cand(2, 0.2, 118.0, 110.0, 125.0)
    c = timed_cand(3, 0.3, 120.0, 105.0, 135.0)
    assert [x.number for x in pk.front([a, b, c], OBJ)] == [1]
    # c faster, apart from both: throughput decides again, each is best at something
    c2 = timed_cand(3, 0.3, 140.0, 130.0, 150.0)
    assert [x.number for x in pk.front([a, b, c2], OBJ)] == [1, 2, 3]


def test_the_ranking_reads_verified_means_and_intervals_and_breaks_ties() -> None:
    # the balanced pick reads the verified means: b's probe looked worse, its seeds better
    a, b = cand(1, 0.1, 100.0), cand(2, 0.3, 100.0)
    a.verified, b.verified = ver(0.2, 100.0), ver(0.05, 100.0)
    assert [c.number for c in pk.ranked([a, b], OBJ)] == [2, 1]
    # ...and the objective's own value, not the screen's metric, when not verified
    x = cand(1, 0.1, 100.0, metrics={"loss_cv": 0.9, "throughput": 100.0})
    y = cand(2, 0.2, 100.0, metrics={"loss_cv": 0.01, "throughput": 100.0})
    assert [c.number for c in pk.ranked([x, y], OBJ)] == [1, 2]
    # identical values: the lower final loss first, whatever the number
    p = cand(1, 0.1, 100.0, metrics={"loss_cv": 0.1, "throughput": 100.0, "final_loss": 2.0})
    q = cand(2, 0.1, 100.0, metrics={"loss_cv": 0.1, "throughput": 100.0, "final_loss": 1.5})
    assert [c.number for c in pk.ranked([p, q], OBJ)] == [2, 1]
    # throughput intervals over the seeds: overlapping there, a tie left to stability
    s = timed_cand(1, 0.2, 200.0, 195.0, 205.0)
    t = timed_cand(2, 0.1, 150.0, 145.0, 155.0)
    s.verified, t.verified = ver(0.2, 200.0), ver(0.1, 150.0)
    s.verified["metrics"]["throughput"].update(low=140.0, high=260.0)
    assert pk.ranked([s, t], OBJ)[0].number == 2  # within noise: the stabler
    assert len(pk.front([s, t], OBJ)) == 1


def test_a_minimised_objective_within_noise_is_judged_against_its_lowest() -> None:
    # loss_cv over seeds: every interval overlaps the lowest's (a), so it decides nothing and
    # the fastest alone is the front; judged against the highest (c), b would miss it and its
    # stability would keep it on the front
    def seeded(n: int, cv: float, low: float, high: float, tp: float) -> pk.Candidate:
        v = ver(cv, tp)
        v["metrics"]["loss_cv"].update(low=low, high=high)
        return cand(n, cv, tp, v)

    a = seeded(1, 0.10, 0.08, 0.15, 100.0)
    b = seeded(2, 0.105, 0.09, 0.11, 110.0)
    c = seeded(3, 0.2, 0.13, 0.4, 120.0)
    assert [x.number for x in pk.front([a, b, c], OBJ)] == [3]
