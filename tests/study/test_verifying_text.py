"""The verification phase's banner counts the configurations verified, not the baseline with
them (a black-box review: "verifying 2 configuration(s) beside the baseline (trials 0, 1)" for
one candidate)."""

from __future__ import annotations

from types import SimpleNamespace

from autotune.study.verification import verifying_text


def c(number: int, baseline: bool = False) -> SimpleNamespace:
    return SimpleNamespace(number=number, baseline=baseline)


def test_the_baseline_is_named_apart_from_the_configurations() -> None:
    assert (
        verifying_text([c(0, True), c(1)])
        == "1 configuration (trial 1) beside the baseline (trial 0)"
    )
    assert (
        verifying_text([c(0, True), c(3), c(9)])
        == "2 configurations (trials 3, 9) beside the baseline (trial 0)"
    )
    assert verifying_text([c(4), c(5)]) == "2 configurations (trials 4, 5)"
    assert verifying_text([c(0, True)]) == "the baseline (trial 0)"
