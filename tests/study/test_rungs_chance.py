"""The rung-agreement p-value checked against first principles: `chance` (exact up to 7
configurations) against a brute-force count over every permutation, its normal approximation
against the permutation variance of S computed by enumeration, and `best_chance` against the best
arrangement the ties allow. The growth rule stops on these numbers, so an arithmetic slip in them
is a wrong verdict."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from autotune import space as sp
from autotune.study import rungs as rg


def s_of(x: tuple[float, ...] | list[float], y: tuple[float, ...] | list[float]) -> int:
    """Kendall's S written out: sign agreements over all pairs (ties count 0)."""
    n = len(x)
    return sum(sign(x[a] - x[b]) * sign(y[a] - y[b]) for a in range(n) for b in range(a + 1, n))


def sign(v: float) -> int:
    return (v > 0) - (v < 0)


def brute_p(x: list[float], y: list[float]) -> float:
    """The share of all n! dealings of y whose S is at least the observed one."""
    s = all_s(x, y)
    return float((s >= s_of(x, y)).sum()) / len(s)


def all_s(x: list[float], y: list[float]) -> np.ndarray:
    """S of every dealing of y to x (numpy: 8! = 40320 of them in well under a second)."""
    n = len(x)
    ia, ib = np.triu_indices(n, 1)
    xs = np.asarray(x, dtype=float)
    sx = np.sign(xs[ia] - xs[ib])
    perms = np.array(list(itertools.permutations(range(n))))
    ys = np.asarray(y, dtype=float)[perms]
    return np.sign(ys[:, ia] - ys[:, ib]) @ sx


# (x, y) pairs: no ties, ties in one, ties in both (pairs and triples), reversed, constant
EXACT_CASES = [
    ([0.0], [0.0]),
    ([0.0, 1.0], [1.0, 0.0]),
    ([0.0, 1.0, 2.0], [0.0, 2.0, 1.0]),
    ([0.0, 1.0, 2.0, 3.0], [1.0, 0.0, 3.0, 2.0]),
    ([0.0, 1.0, 1.0, 3.0], [0.0, 2.0, 1.0, 3.0]),
    ([0.0, 1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0, 0.0]),
    ([0.0, 0.0, 2.0, 3.0, 3.0], [1.0, 0.0, 1.0, 4.0, 3.0]),
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 2.0, 1.0, 3.0, 5.0, 4.0]),
    ([0.0, 0.0, 0.0, 3.0, 4.0, 4.0], [1.0, 0.0, 2.0, 2.0, 5.0, 5.0]),
    ([2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 0.0, 2.0, 4.0, 3.0, 6.0, 5.0]),
    ([0.0, 1.0, 1.0, 3.0, 4.0, 4.0, 4.0], [0.0, 2.0, 1.0, 1.0, 5.0, 3.0, 6.0]),
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [6.0, 5.0, 4.0, 0.0, 2.0, 1.0, 3.0]),
]


@pytest.mark.parametrize(("x", "y"), EXACT_CASES)
def test_chance_is_the_exact_permutation_p_value_up_to_seven(
    x: list[float], y: list[float]
) -> None:
    assert len(x) <= rg.EXACT_MAX_N == 7
    assert rg.chance(x, y) == pytest.approx(brute_p(x, y), abs=1e-12)


def test_chance_at_seven_is_exact_not_the_normal_approximation() -> None:
    # 7 distinct configurations in the same order: exactly 1/7!; the normal approximation
    # (0.5 erfc((21 - 1) / sqrt(2 * 7*6*19/18))) would say about 1.1e-3
    ranks = [float(k) for k in range(7)]
    assert rg.chance(ranks, ranks) == pytest.approx(1 / 5040, rel=1e-12)
    assert rg.chance(ranks, ranks[::-1]) == pytest.approx(1.0)


def kendall_p(x: list[float], y: list[float]) -> float:
    """The continuity-corrected normal tail of S, its variance taken from the enumeration."""
    s = all_s(x, y)
    assert abs(float(s.mean())) < 1e-9  # S is centred under random dealing
    var = float((s**2).mean())
    return 0.5 * math.erfc((s_of(x, y) - 1) / math.sqrt(2 * var))


# 8 configurations: past the exact limit. Ties in neither, in one, in both (pairs and triples
# in both, so every term of Kendall's tie-corrected variance counts).
NORMAL_CASES = [
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [1.0, 0.0, 2.0, 3.0, 5.0, 4.0, 7.0, 6.0]),
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]),
    ([0.0, 0.0, 2.0, 3.0, 3.0, 5.0, 6.0, 7.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]),
    ([0.0, 0.0, 0.0, 3.0, 3.0, 5.0, 6.0, 6.0], [0.0, 1.0, 1.0, 1.0, 4.0, 4.0, 6.0, 7.0]),
    ([0.0, 0.0, 0.0, 0.0, 4.0, 4.0, 4.0, 7.0], [1.0, 0.0, 2.0, 2.0, 2.0, 5.0, 5.0, 5.0]),
    ([5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 3.0, 3.0, 3.0, 6.0, 6.0]),
]


@pytest.mark.parametrize(("x", "y"), NORMAL_CASES)
def test_chance_beyond_seven_uses_the_exact_variance_of_s(x: list[float], y: list[float]) -> None:
    # Kendall's tie-corrected variance is the exact permutation variance of S: the
    # approximation must equal the normal tail computed from the enumerated variance
    assert rg.chance(x, y) == pytest.approx(kendall_p(x, y), rel=1e-9, abs=1e-15)


def test_chance_beyond_seven_is_one_when_a_ranking_is_constant() -> None:
    # every configuration tied: S is 0 under every dealing, its variance 0, nothing to tell
    flat = [3.0] * 9
    assert rg.chance(flat, [float(k) for k in range(9)]) == 1.0
    assert rg.chance([float(k) for k in range(9)], flat) == 1.0


@pytest.mark.parametrize(
    ("x", "y"), [*EXACT_CASES[1:], ([0.0, 1.0, 2.0, 2.0], [3.0, 1.0, 1.0, 0.0])]
)
def test_best_chance_is_the_chance_of_the_best_arrangement_the_ties_allow(
    x: list[float], y: list[float]
) -> None:
    s = all_s(x, y)
    expected = float((s >= s.max()).sum()) / len(s)
    assert rg.best_chance(x, y) == pytest.approx(expected, abs=1e-12)
    # and it never depends on the order y came in
    assert rg.best_chance(x, y[::-1]) == pytest.approx(expected, abs=1e-12)


def test_best_chance_with_unsorted_x() -> None:
    # x out of order: y must be dealt by x's order, not by position
    x = [3.0, 0.0, 2.0, 1.0]
    y = [0.0, 1.0, 2.0, 3.0]
    assert rg.best_chance(x, y) == pytest.approx(1 / 24)
    # ties in x: the best is y sorted into x's order, ties kept (2 of 24 reach it)
    assert rg.best_chance([1.0, 0.0, 1.0, 2.0], y) == pytest.approx(2 / 24)


def test_best_chance_of_rankings_of_different_lengths_is_an_error() -> None:
    # two rungs' rankings are of the same configurations: a length mismatch is a bug, not a
    # p-value of the first few
    with pytest.raises(ValueError):
        rg.best_chance([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError) as e:
        rg.kendall_tau_b([0.0, 1.0], [0.0])
    assert str(e.value) == "kendall_tau_b: x and y differ in length"


def at(number: int, cv: float, steps: int) -> rg.RungResult:
    return rg.RungResult(number, steps, False, "complete", [cv, 100.0], True)


OBJ = [
    {"metric": "loss_cv", "direction": "minimize"},
    {"metric": "throughput", "direction": "maximize"},
]


def test_ties_whose_best_agreement_reaches_exactly_alpha_can_show_agreement() -> None:
    # three tied best, then two: perfect agreement happens by chance 3! 1 1 / 5! = 6/120 = 0.05
    # exactly, which is "at most ALPHA": the agreement is measured, not "too many tied"
    cvs = [0.1, 0.1, 0.1, 0.2, 0.3]
    prev = [at(n, cv, 150) for n, cv in enumerate(cvs, 1)]
    cur = [at(n, cv / 10, 340) for n, cv in enumerate(cvs, 1)]
    assert rg.best_chance([0.0, 0.0, 0.0, 3.0, 4.0], [0.0, 0.0, 0.0, 3.0, 4.0]) == rg.ALPHA
    ag = rg.agreement(prev, cur, OBJ)
    assert ag["note"] is None and ag["tau"] == pytest.approx(1.0)
    assert ag["p"] == pytest.approx(0.05) and ag["n"] == 5
    assert ag["metric"] == "loss_cv" and ag["vs_steps"] == 150


def test_the_agreement_of_one_or_no_configuration_names_its_rung() -> None:
    one = rg.agreement([at(1, 0.1, 150)], [at(1, 0.01, 340)], OBJ)
    assert one == {
        "tau": None,
        "n": 1,
        "p": None,
        "note": "too few configurations to tell (n=1, at least 4)",
        "metric": "loss_cv",
        "vs_steps": 150,
    }
    none = rg.agreement([], [], OBJ)
    assert none["n"] == 0 and none["vs_steps"] is None and none["tau"] is None
    assert none["note"] == "too few configurations to tell (n=0, at least 4)"


def test_an_agreement_without_a_count_is_too_few_to_tell_with_n_zero() -> None:
    grow, why = rg.should_grow([{"tau": 1.0}], threshold=0.7, min_n=4, grow="auto", at_target=False)
    assert grow and why == "too few configurations to tell (n=0, at least 4)"
    grow, why = rg.should_grow(
        [{"tau": 1.0, "n": None}], threshold=0.7, min_n=6, grow="auto", at_target=False
    )
    assert grow and why == "too few configurations to tell (n=0, at least 6)"


def test_the_stability_objective_is_the_first_that_is_no_hardware_number() -> None:
    assert rg.stability_objective(OBJ) == 0
    assert rg.stability_objective(OBJ[::-1]) == 1  # throughput first: loss_cv is the second
    assert rg.stability_objective([{"metric": "throughput", "direction": "maximize"}]) == 0


def test_the_minimum_n_for_other_alphas() -> None:
    # the least n with 1/n! <= alpha, boundaries included
    assert rg.min_agreement_n(1.0) == 1  # 1/1! = 1 <= 1
    assert rg.min_agreement_n(0.5) == 2  # 1/2! = 0.5 <= 0.5
    assert rg.min_agreement_n(1 / 6) == 3  # 1/3! exactly
    assert rg.min_agreement_n(0.4) == 3
    assert rg.min_agreement_n(1 / 24) == 4


def test_rung_lengths_are_at_least_ten_steps() -> None:
    # a very short screen: the rung between rounds up to 10 steps, never below
    assert rg.rung_steps(1, 30, 3, 4) == [1, 10, 30]
    assert rg.rung_steps(2, 50, 3, 4) == [2, 10, 20, 50]
    # a rung between that rounds up to the target is the target, run once
    assert rg.rung_steps(1, 10, 2, 4) == [1, 10]
    assert rg.rung_steps(2, 10, 2, 4) == [2, 10]


def test_the_target_is_the_budgets_else_the_probes_length() -> None:
    text = "name: t\nworkload: mlp\nprobe: {steps: 30}\nbudget: {trials: 2, target_steps: 120}\n"
    assert rg.target_of(sp.loads(text)) == 120
    assert rg.plan(sp.loads(text)) == [30, 60, 120]
    assert rg.target_of(sp.loads(text.replace(", target_steps: 120", ""))) == 30
