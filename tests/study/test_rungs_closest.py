"""When nothing at a rung is feasible, not even the defaults, the configurations closest to
feasible go on (`rungs.closest`): a screen too short for anything to learn yet must not end
the search."""

from __future__ import annotations

import math

from autotune.study import rungs as rg


def result(
    number: int,
    violation: float | None,
    *,
    outcome: str = "complete",
    baseline: bool = False,
    feasible: bool = False,
) -> rg.RungResult:
    return rg.RungResult(
        number=number,
        steps=100,
        baseline=baseline,
        outcome=outcome,
        values=None if outcome == "failed" else [1.0],
        feasible=feasible,
        violation=violation,
    )


def test_the_least_violation_goes_on_and_never_a_diverged_failed_or_baseline_run() -> None:
    results = [
        result(0, 0.01, baseline=True),  # the defaults are never "closest": they go on anyway
        result(1, 0.30),
        result(2, 0.02),
        result(3, 0.02),  # tied with 2: the lower number first
        result(4, 0.00, outcome="diverged"),
        result(5, None, outcome="failed"),
        result(6, math.inf),
        result(7, 0.05),
    ]
    # 8 results, eta 4: ceil(8 / 4) = 2, min_promote 1
    assert rg.closest(results, eta=4, min_promote=1) == [2, 3]
    assert rg.closest(results, eta=2, min_promote=1) == [2, 3, 7, 1]  # ceil(8/2) = 4
    assert rg.closest(results, eta=8, min_promote=3) == [2, 3, 7]
    # more asked than there are candidates: every candidate, nothing else
    assert rg.closest(results, eta=1, min_promote=10) == [2, 3, 7, 1]


def test_nothing_is_closest_when_anything_is_feasible() -> None:
    some = [result(1, 0.3), result(2, 0.0, feasible=True)]
    assert rg.closest(some, eta=2, min_promote=2) == []
    # a feasible baseline is enough: the defaults are then the answer (the baseline alone
    # goes on to the target, rung_phase)
    base = [result(0, 0.0, baseline=True, feasible=True), result(1, 0.3), result(2, 0.1)]
    assert rg.closest(base, eta=2, min_promote=2) == []
    assert rg.closest([], eta=2, min_promote=2) == []


def test_violation_is_the_sum_of_the_broken_constraints() -> None:
    assert rg.violation(None) is None
    assert rg.violation([]) == 0.0
    assert rg.violation([-1.0, 0.0, -0.5]) == 0.0  # all met
    assert rg.violation([0.25, -3.0, 0.5]) == 0.75  # a met constraint does not offset
    assert rg.violation([1]) == 1.0 and isinstance(rg.violation([1]), float)
