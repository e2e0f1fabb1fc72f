"""autotune.study.objectives: a trial's constraints, relative ones against the baseline's
metrics at the same length."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import space as sp
from autotune import study as at
from autotune.study.improvement import broken
from autotune.study.objectives import feasible

SPACE = sp.loads(
    """\
name: rel
workload: mlp
constraints:
  - {metric: loss_drop, op: '>=', value: 0.05}
  - {metric: final_loss, op: '<=', value: 1.05, relative_to: baseline}
  - {metric: throughput, op: '>=', value: 0.5, relative_to: baseline}
"""
)
BASE = {"loss_drop": 0.4, "final_loss": 2.0, "throughput": 1000.0}


def test_names_read_as_the_constraints() -> None:
    assert at.constraint_names(SPACE) == [
        "not_diverged",
        "loss_drop >= 0.05",
        "final_loss <= 1.05 x baseline",
        "throughput >= 0.5 x baseline",
    ]


def test_relative_constraints_scale_the_baselines_metric() -> None:
    worse = {"loss_drop": 0.3, "final_loss": 2.4, "throughput": 400.0}
    assert at.constraints_of(SPACE, "complete", worse, BASE) == pytest.approx(
        [0.0, -0.25, 2.4 - 2.1, 500.0 - 400.0]
    )
    within = {"loss_drop": 0.3, "final_loss": 2.09, "throughput": 600.0}
    assert all(c <= 0 for c in at.constraints_of(SPACE, "complete", within, BASE))


def test_a_negative_baseline_loss_allows_its_factor_worse_not_better() -> None:
    # A loss that is legitimately negative (NLL-style, the fifth black-box review): the
    # baseline ends at -2.5, so `final_loss <= 1.05 x baseline` allows 5% of its size worse,
    # -2.375; a factor times -2.5 (-2.625) would have asked for 5% better than the baseline,
    # and the baseline itself would have broken it.
    base = {**BASE, "final_loss": -2.5}
    slightly_worse = {**BASE, "final_loss": -2.4}
    cons = at.constraints_of(SPACE, "complete", slightly_worse, base)
    assert cons[2] == pytest.approx(-2.4 - (-2.375))
    assert all(c <= 0 for c in at.constraints_of(SPACE, "complete", base, base))
    much_worse = {**BASE, "final_loss": -2.0}
    assert at.constraints_of(SPACE, "complete", much_worse, base)[2] > 0


def test_the_baseline_against_itself_is_feasible() -> None:
    cons = at.constraints_of(SPACE, "complete", BASE, BASE)
    assert all(c <= 0 for c in cons), cons


@pytest.mark.parametrize(
    "baseline",
    [
        None,  # no baseline measured at this length (yet)
        {},  # it failed: no metrics
        {"final_loss": math.nan, "throughput": math.inf},  # it diverged
        {"final_loss": None, "throughput": "n/a"},
    ],
    ids=["none", "failed", "diverged", "missing"],
)
def test_without_a_baseline_value_a_relative_constraint_is_vacuous(baseline: object) -> None:
    metrics = {"loss_drop": 0.01, "final_loss": 50.0, "throughput": 1.0}
    cons = at.constraints_of(SPACE, "complete", metrics, baseline)  # type: ignore[arg-type]
    assert cons == [0.0, 0.04, 0.0, 0.0], "absolute ones still judged, relative ones vacuous"
    assert at.vacuous(SPACE, baseline) == [  # type: ignore[arg-type]
        "final_loss <= 1.05 x baseline",
        "throughput >= 0.5 x baseline",
    ]
    assert at.vacuous(SPACE, BASE) == []


def test_a_trial_without_the_metric_breaks_a_relative_constraint() -> None:
    cons = at.constraints_of(SPACE, "complete", {"loss_drop": 0.3}, BASE)
    assert cons[2:] == [1.0, 1.0]


@given(
    ratio=st.floats(min_value=0.01, max_value=100.0),
    base=st.floats(min_value=1e-3, max_value=1e3),
)
@settings(max_examples=80, deadline=None)
def test_feasible_exactly_when_the_ratio_is_within_the_factor(ratio: float, base: float) -> None:
    metrics = {"loss_drop": 0.3, "final_loss": ratio * base, "throughput": 1000.0}
    c = at.constraints_of(SPACE, "complete", metrics, {**BASE, "final_loss": base})[2]
    if not math.isclose(ratio, 1.05, rel_tol=1e-9):
        assert (c <= 0) == (ratio < 1.05), (ratio, c)


def test_a_stand_in_objective_is_infeasible_where_it_is_told() -> None:
    # the training loss did not drop (noise_per_drop NaN), the held-out one did (loss_drop
    # 0.46): every space constraint holds, yet Optuna would be told a stand-in value
    learnt = {"loss_drop": 0.46, "final_loss": 2.0, "throughput": 1000.0}
    stood_in = {**learnt, "noise_per_drop": math.nan}
    told = at.constraints_of(SPACE, "complete", stood_in, BASE, objectives=True)
    assert told[0] == 1.0 and max(told[1:]) <= 0
    assert not feasible(SPACE, "complete", stood_in, BASE, objectives=True)
    # a verification seed tells no stand-in: only the constraints count there
    assert feasible(SPACE, "complete", stood_in, BASE)
    measured = {**learnt, "noise_per_drop": 0.1}
    assert at.constraints_of(SPACE, "complete", measured, BASE, objectives=True)[0] == 0.0
    # the summary's baseline line names it (`improvement.broken`)
    assert broken(SPACE, stood_in, BASE) == ["noise_per_drop (no finite value)"]
    assert broken(SPACE, stood_in, BASE, objectives=False) == []
