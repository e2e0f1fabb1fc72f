"""Choosing one configuration: dominance, the Pareto front, the knee, the ranking, the picks and
the explanation when there is nothing to pick — as properties over arbitrary fronts
(hypothesis) and on real Optuna studies."""

from __future__ import annotations

import itertools
import math

import optuna
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autotune.errors import RecipeError
from autotune.study import noise
from autotune.study import pick as pk

OBJECTIVES = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]
DIRS = [o["direction"] for o in OBJECTIVES]

values = st.floats(min_value=0.0, max_value=100.0, allow_nan=False, allow_infinity=False)
points = st.lists(st.tuples(values, values), min_size=1, max_size=12)


def candidates(pts: list[tuple[float, float]]) -> list[pk.Candidate]:
    return [
        pk.Candidate(
            number=i,
            values=list(p),
            metrics={"loss_cv": p[0], "throughput": p[1]},
            knobs={},
            env={},
            params={},
        )
        for i, p in enumerate(pts)
    ]


@given(values, values, values, values)
def test_dominance_is_irreflexive_and_asymmetric(a: float, b: float, c: float, d: float) -> None:
    x, y = (a, b), (c, d)
    assert not pk.dominates(x, x, DIRS)
    assert not (pk.dominates(x, y, DIRS) and pk.dominates(y, x, DIRS))
    # Better on the minimised objective and not worse on the maximised one: dominates.
    assert pk.dominates((a, b + 1), (a + 1, b), DIRS)


@settings(max_examples=200)
@given(points)
def test_the_front_is_exactly_the_non_dominated_set(pts: list[tuple[float, float]]) -> None:
    cands = candidates(pts)
    front = {c.number for c in pk.front(cands, OBJECTIVES)}
    assert front, "a non-empty set always has a non-dominated member"
    for c in cands:
        beaten = any(pk.dominates(o.values, c.values, DIRS) for o in cands if o is not c)
        assert (c.number in front) == (not beaten)


@settings(max_examples=200)
@given(points)
def test_optuna_agrees_on_the_front(pts: list[tuple[float, float]]) -> None:
    # Optuna compares floats exactly; ours takes values within floating-point noise as ties
    # (`noise.same`): they agree where no two different values are that close.
    for i in range(2):
        column = sorted({p[i] for p in pts})
        assume(not any(noise.same(x, y) for x, y in itertools.pairwise(column)))
    study = optuna.create_study(directions=DIRS)
    for p in pts:
        study.add_trial(optuna.trial.create_trial(values=list(p), params={}, distributions={}))
    ours = {c.number for c in pk.front(candidates(pts), OBJECTIVES)}
    theirs = {t.number for t in study.best_trials}
    assert ours == theirs


@settings(max_examples=200)
@given(points)
def test_knee_distances_are_scaled_and_the_ideal_member_is_at_zero(
    pts: list[tuple[float, float]],
) -> None:
    cands = candidates(pts)
    dist = pk.knee_distances(cands, OBJECTIVES)
    assert all(0.0 <= d <= math.sqrt(len(OBJECTIVES)) + 1e-12 for d in dist.values())
    best_cv = min(p[0] for p in pts)
    best_thr = max(p[1] for p in pts)
    for c in cands:
        if c.values == [best_cv, best_thr]:
            assert dist[c.number] == 0.0


@settings(max_examples=200)
@given(points)
def test_ranking_is_a_permutation_by_layer_and_balanced_is_its_first(
    pts: list[tuple[float, float]],
) -> None:
    cands = candidates(pts)
    order = pk.ranked(cands, OBJECTIVES)
    assert sorted(c.number for c in order) == list(range(len(pts)))
    # No candidate is ranked after one that it dominates.
    position = {c.number: i for i, c in enumerate(order)}
    for a in cands:
        for b in cands:
            if pk.dominates(a.values, b.values, DIRS):
                assert position[a.number] < position[b.number]
    assert pk.pick(cands, OBJECTIVES, "balanced").number == order[0].number
    # values within floating-point noise of the best are ties (`noise.same`): one of them
    assert noise.same(pk.pick(cands, OBJECTIVES, "fastest").values[1], max(p[1] for p in pts))
    assert noise.same(pk.pick(cands, OBJECTIVES, "stablest").values[0], min(p[0] for p in pts))


def test_verified_numbers_replace_the_probes_and_an_unstable_one_is_set_aside() -> None:
    a, b, c = candidates([(0.01, 100.0), (0.02, 100.0), (0.03, 100.0)])
    # The probe's best (a) diverged on a seed; b held on every seed with a worse mean than a's
    # probe value; c was not verified: the pick is b.
    a.verified = {"diverged_share": 1 / 3, "metrics": {"loss_cv": {"mean": 0.015}}}
    b.verified = {"diverged_share": 0.0, "metrics": {"loss_cv": {"mean": 0.025}}}
    assert pk.pick([a, b, c], OBJECTIVES, "stablest").number == 1
    assert pk.pick([a, b, c], OBJECTIVES, "balanced").number == 1
    assert b.value("loss_cv", 0) == 0.025 and c.value("loss_cv", 0) == 0.03


@pytest.mark.parametrize(
    ("text", "expected"),
    [("balanced", ("balanced", None)), ("Trial 7", ("trial", 7)), ("trial:3", ("trial", 3))],
)
def test_parse_pick(text: str, expected: tuple[str, int | None]) -> None:
    assert pk.parse_pick(text) == expected


def test_a_bad_pick_and_a_missing_trial_are_named() -> None:
    with pytest.raises(RecipeError, match="--pick 'best'"):
        pk.parse_pick("best")
    with pytest.raises(RecipeError, match="trial 9 is not a candidate"):
        pk.pick(candidates([(0.1, 1.0)]), OBJECTIVES, "trial 9")
    with pytest.raises(RecipeError, match="no feasible trial"):
        pk.pick([], OBJECTIVES)


def test_why_none_names_the_closest_trials_and_their_causes() -> None:
    study = optuna.create_study(directions=DIRS)
    attrs = {
        "autotune.constraint_names": ["not diverged", "loss_drop >= 0.05"],
    }
    study.add_trial(
        optuna.trial.create_trial(
            values=[0.1, 10.0],
            user_attrs={**attrs, "autotune.outcome": "complete", "autotune.constraints": [0, 0.2]},
        )
    )
    study.add_trial(
        optuna.trial.create_trial(
            values=[0.1, 10.0],
            user_attrs={**attrs, "autotune.outcome": "complete", "autotune.constraints": [0, 0.01]},
        )
    )
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL,
            user_attrs={"autotune.outcome": "failed", "autotune.cause": "timeout"},
        )
    )
    text = pk.why_none(study)
    # Closest first: the trial that broke loss_drop by the least, then the other, then the failure.
    assert text.index("trial 1: broke loss_drop >= 0.05 (by 0.01)") < text.index("trial 0")
    assert text.endswith("trial 2: failed (timeout)")
    assert pk.why_none(optuna.create_study(directions=DIRS)) == "no finished trial"


def test_why_none_says_a_complete_trial_that_broke_not_diverged_did_not_diverge() -> None:
    # A trial that completed without a finite noise_per_drop (it did not learn on its training
    # loss) is told not_diverged = 1: the bare name read as if it had diverged.
    study = optuna.create_study(directions=DIRS)
    objectives = [{"metric": "noise_per_drop", "direction": "minimize"}, OBJECTIVES[1]]
    study.set_user_attr("autotune.objectives", objectives)
    study.add_trial(
        optuna.trial.create_trial(
            values=[0.1, 10.0],
            user_attrs={
                "autotune.outcome": "complete",
                "autotune.constraint_names": ["not_diverged", "loss_drop >= 0.05"],
                "autotune.constraints": [1.0, 0.0],
                "autotune.metrics": {"noise_per_drop": math.nan, "throughput": 10.0},
            },
        )
    )
    assert pk.why_none(study) == (
        "trial 0: broke not_diverged (by 1): did not diverge, no finite noise_per_drop (did not "
        "learn on its training loss)"
    )
