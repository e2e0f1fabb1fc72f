"""A difference in how many seeds diverged decides a verdict only beyond chance: the paired
verdict's sign test over the seeds exactly one side diverged on, the divergence promise's
Fisher test of two shares. One seed of three (a lucky baseline seed, an unlucky seed of a good
recipe) decided both by an exact count comparison: `worse` and exit 1 in verify, `better` in
the study's pick against the defaults, `WORSE than promised` for 1 of 5 seeds against 0 of 3.
Pure functions on hand-made run records, as tests/study/test_verdicts.py builds them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from assets.recipes import make_recipe
from hypothesis import given
from hypothesis import strategies as st

from autotune.recipe import paired as pd
from autotune.recipe import promise as pm
from autotune.recipe.divergence_chance import (
    beyond,
    decides,
    min_discordant,
    share_test,
    sign_test,
)
from autotune.recipe.seeds import summarize_seeds

METRICS = [("final_loss", "minimize"), ("loss_cv", "minimize")]

# ---------------------------------------------------------------------------------------------
# The tests themselves
# ---------------------------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=40)


@given(counts, counts)
def test_the_sign_test_is_symmetric_and_a_probability(a: int, b: int) -> None:
    p = sign_test(a, b)
    assert p == sign_test(b, a)
    assert 0.0 < p <= 1.0
    if a == b:
        assert p == 1.0  # an even split is no evidence either way


@given(counts, counts)
def test_the_sign_test_grows_surer_as_the_split_grows_lopsided(a: int, b: int) -> None:
    lo, hi = min(a, b), max(a, b)
    # one more discordant seed on the side already ahead: never less evidence
    assert sign_test(hi + 1, lo) <= sign_test(hi, lo)
    # one of the side behind moved to the side ahead (the same discordant seeds): neither
    if lo > 0:
        assert sign_test(hi + 1, lo - 1) <= sign_test(hi, lo)


@given(counts, counts)
def test_fewer_discordant_seeds_than_the_minimum_are_never_beyond_chance(a: int, b: int) -> None:
    least = min_discordant()
    if a + b < least:
        assert not beyond(sign_test(a, b))
    # the minimum is the least that can be: all of them on one side is beyond chance
    assert beyond(sign_test(least, 0)) and not beyond(sign_test(least - 1, 0))


def test_the_minimum_at_95_percent_is_six_seeds() -> None:
    assert min_discordant() == 6
    assert sign_test(6, 0) == pytest.approx(2 / 2**6)
    assert sign_test(5, 0) == pytest.approx(2 / 2**5)  # 0.0625: five are not enough


seeds = st.integers(min_value=1, max_value=20)


@given(seeds, seeds, st.data())
def test_the_share_test_is_symmetric_and_grows_surer_with_more_diverged(
    n_a: int, n_b: int, data: st.DataObject
) -> None:
    k_a = data.draw(st.integers(min_value=0, max_value=n_a))
    k_b = data.draw(st.integers(min_value=0, max_value=n_b))
    p = share_test(k_a, n_a, k_b, n_b)
    assert p == pytest.approx(share_test(k_b, n_b, k_a, n_a))
    assert 0.0 < p <= 1.0 + 1e-12
    if k_a * n_b >= k_b * n_a and k_a < n_a:  # a's share at least b's: one more diverged there
        assert share_test(k_a + 1, n_a, k_b, n_b) <= p + 1e-12


# ---------------------------------------------------------------------------------------------
# The paired verdict
# ---------------------------------------------------------------------------------------------


def result(finals: list[float], diverged: tuple[int, ...] = ()) -> dict[str, Any]:
    """Seeds 1, 2, ... with these final losses; the seeds (1-based) in `diverged` stopped
    early, diverged (loss_explosion)."""
    runs = []
    for k, final in enumerate(finals, 1):
        gone = k in diverged
        runs.append(
            {
                "seed": k,
                "outcome": "diverged" if gone else "complete",
                "cause": "loss_explosion" if gone else None,
                "summary": {
                    "metrics": {"final_loss": final, "loss_cv": 0.1 + 0.001 * k},
                    "steps_run": 12 if gone else 30,
                    "steps_planned": 30,
                },
            }
        )
    return summarize_seeds(runs, ["final_loss", "loss_cv"])


GOOD = [1.0, 1.02, 0.99]  # a recipe clearly better than the baseline on the seeds it completed
BASE = [2.0, 2.03, 1.98]
CHANCE_1_OF_3 = (
    "diverged on 1 of 3 seeds, the baseline on 0: not beyond chance over 3 seeds (p = 1; it "
    "takes 6 seeds that diverged on one side alone)"
)


def test_one_unlucky_seed_of_a_good_recipe_does_not_make_it_worse() -> None:
    out = pd.compare(result(GOOD, diverged=(3,)), result(BASE), METRICS)
    # was "worse: diverged on 1 of 3 seeds, the baseline on 0", and exit 1 in verify
    assert out["verdict"] == "better", out["why"]
    assert out["why"] == f"better than the baseline: final_loss; {CHANCE_1_OF_3}"
    div = out["diverged"]
    assert (div["pick_seeds"], div["baseline_seeds"], div["n"]) == (1, 0, 3)
    assert (div["pick_only"], div["baseline_only"]) == (1, 0)
    assert div["p"] == 1.0 and div["beyond_chance"] is False and div["decides"] is False
    report = {"recipe_result": result(GOOD, diverged=(3,)), "vs_baseline": out}
    assert pd.verify_problems(report) == []
    # never hidden: the printed line carries it
    assert CHANCE_1_OF_3 in pd.format_line(out, "recipe")


def test_a_lucky_baseline_seed_does_not_make_a_candidate_better() -> None:
    # the defaults diverged on 1 of 3 by chance; the candidate is no different on the metrics
    out = pd.compare(result(BASE), result([1.97, 9.0, 2.02], diverged=(2,)), METRICS)
    # was "better: diverged on 0 vs 1 seeds": the study's pick took the candidate
    assert out["verdict"] == "no detectable difference"
    assert out["verdict"] in pd.PREFER_DEFAULTS  # a tie goes to the defaults
    assert out["why"].endswith(
        "; diverged on 0 of 3 seeds, the baseline on 1: not beyond chance over 3 seeds (p = 1; "
        "it takes 6 seeds that diverged on one side alone)"
    )


def test_a_divergence_difference_beyond_chance_decides_and_says_so() -> None:
    eight = [2.0, 2.03, 1.98, 2.01, 2.02, 1.99, 2.0, 2.01]
    calm, wild = result(eight), result(eight, diverged=(3, 4, 5, 6, 7, 8))
    worse = pd.compare(wild, calm, METRICS)
    assert worse["verdict"] == "worse"
    assert worse["why"] == (
        "diverged on 6 of 8 seeds, the baseline on 0 (beyond chance: p = 0.031)"
    )
    assert worse["diverged"]["beyond_chance"] is True
    assert worse["diverged"]["p"] == pytest.approx(0.03125)
    assert pd.verify_problems({"recipe_result": wild, "vs_baseline": worse}) == [
        "it diverged on more seeds than the baseline (6 vs 0 of 8), beyond chance: p = 0.031"
    ]
    better = pd.compare(calm, wild, METRICS)  # as good on the metrics: better by that alone
    assert better["verdict"] == "better"
    assert better["why"] == (
        "better than the baseline: diverged on 0 vs 6 seeds (beyond chance: p = 0.031)"
    )
    # worse on a metric but diverging less beyond chance: a trade-off
    slow = result([2.5, 2.53, 2.48, 2.51, 2.52, 2.49, 2.5, 2.51])
    mixed = pd.compare(slow, wild, METRICS)
    assert mixed["verdict"] == "mixed" and mixed["why"] == (
        "better on divergence, worse on final_loss"
    )


def test_the_same_count_on_different_seeds_is_no_divergence_difference() -> None:
    # each diverged on one seed, not the same one: two discordant seeds, split evenly
    out = pd.compare(result(BASE, diverged=(1,)), result(BASE, diverged=(2,)), METRICS)
    div = out["diverged"]
    assert (div["pick_only"], div["baseline_only"], div["p"]) == (1, 1, 1.0)
    assert "diverged on" not in out["why"]  # equal counts: nothing to say


def test_diverging_on_every_seed_keeps_its_own_rule() -> None:
    gone = result([9.0, 9.0, 9.0], diverged=(1, 2, 3))
    out = pd.compare(gone, result(BASE), METRICS)
    # 3 discordant seeds are within chance by the sign test; every seed is no chance
    assert out["diverged"]["beyond_chance"] is False and out["diverged"]["every_seed"] == "pick"
    assert out["verdict"] == "worse"
    assert out["why"] == (
        "diverged on 3 of 3 seeds, the baseline on 0 (it diverged on every seed); loss_cv not "
        "compared: this configuration diverged on every seed"
    )
    assert pd.verify_problems({"recipe_result": gone, "vs_baseline": out}) == [
        "it diverged on every seed (3 of 3)",
        "it diverged on more seeds than the baseline (3 vs 0 of 3), and on every seed",
    ]


def test_a_verdict_recorded_before_the_test_is_judged_from_its_counts() -> None:
    # a recipe's study verdict from an older autotune: counts only, no `decides`
    one = {"n": 3, "pick": 1 / 3, "baseline": 0.0, "pick_seeds": 1, "baseline_seeds": 0}
    assert not decides(one)
    assert pd.verify_problems({"vs_baseline": {"verdict": "worse", "diverged": one}}) == []
    six = {"n": 8, "pick": 0.75, "baseline": 0.0, "pick_seeds": 6, "baseline_seeds": 0}
    assert decides(six)
    assert pd.verify_problems({"vs_baseline": {"verdict": "worse", "diverged": six}}) == [
        "it diverged on more seeds than the baseline (6 vs 0 of 8), beyond chance: by its counts"
    ]


# ---------------------------------------------------------------------------------------------
# The divergence promise
# ---------------------------------------------------------------------------------------------


def promise_row(promised_share: float, promised_on: int, diverged: int, n: int) -> dict[str, Any]:
    """The divergence row of `autotune verify`: the recipe verified on `promised_on` seeds of
    which a share `promised_share` diverged; here `diverged` of `n` seeds diverged."""
    verified = {
        "mean": 0.05,
        "low": 0.04,
        "high": 0.06,
        "n": promised_on,
        "seeds": list(range(1, promised_on + 1)),
        "diverged_share": promised_share,
    }
    r = replace(
        make_recipe(),
        achieved={"loss_cv": {"direction": "minimize", "value": 0.05, "verified": verified}},
    )
    got = {"n": n, "failed": 0, "diverged_share": diverged / n, "metrics": {}}
    return next(p for p in pm.compare_promise(r, got, True) if p["metric"] == "diverged")


def test_one_seed_of_five_against_a_promise_of_none_of_three_is_within_chance() -> None:
    row = promise_row(0.0, 3, diverged=1, n=5)
    # was "WORSE than promised", and exit 1
    assert (
        row["verdict"]
        == "more than promised, within chance (1 of 5 here vs 0 of 3 promised: p = 1)"
    )
    assert (row["beyond_chance"], row["p"]) == (False, 1.0)
    assert (row["measured_seeds"], row["promise_seeds"]) == (5, 3)
    assert pd.verify_problems({"promise": [row]}) == []
    assert pm.promise_line(row, None) == (
        "  diverged       promised 0% of seeds  measured 20%  -> more than promised, within chance "
        "(1 of 5 here vs 0 of 3 promised: p = 1)"
    )
    # and lower than promised by chance is not "better than promised"
    assert promise_row(1 / 3, 3, diverged=0, n=5)["verdict"] == (
        "as promised (0 of 5 here vs 1 of 3 promised: within chance, p = 0.38)"
    )


def test_a_divergence_share_beyond_chance_breaks_the_promise() -> None:
    row = promise_row(0.0, 10, diverged=4, n=5)
    assert row["verdict"] == (
        "WORSE than promised (4 of 5 here vs 0 of 10 promised: beyond chance, p = 0.0037)"
    )
    assert row["beyond_chance"] is True
    assert pd.verify_problems({"promise": [row]}) == [f"diverged: {row['verdict']}"]
    better = promise_row(0.6, 10, diverged=0, n=10)
    assert better["verdict"].startswith("better than promised (0 of 10 here vs 6 of 10")


def test_too_few_seeds_here_or_in_the_promise_are_not_judged() -> None:
    assert promise_row(0.0, 3, diverged=1, n=2)["verdict"] == (
        "too few seeds to tell (1 of 2 here vs 0 of 3 promised; --seeds 3 or more)"
    )
    assert promise_row(0.0, 2, diverged=1, n=5)["verdict"] == (
        "not judged (a promise from 2 seeds: 1 of 5 here vs 0 of 2 promised)"
    )


def test_diverging_on_every_seed_is_never_as_promised() -> None:
    # 3 of 3 against 0 of 3: within chance by the test (p = 0.1), never "as promised"
    row = promise_row(0.0, 3, diverged=3, n=3)
    assert row["verdict"] == "DIVERGED on every seed"
    assert pd.verify_problems({"promise": [row]}) == ["diverged: DIVERGED on every seed"]
