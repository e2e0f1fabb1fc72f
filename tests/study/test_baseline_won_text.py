"""What the pick line says when the balanced pick is the baseline: beside others on the Pareto
front it is a trade-off among them; off the front (the others led by a point value, tied over
the verified seeds) it is a tie that goes to the defaults. A black-box review saw "trial(s) 2
are better on some objective and worse on another" of a trial worse on nothing."""

from __future__ import annotations

from autotune.study.summary_text import _baseline_won


def _summary(front: list[int]) -> dict[str, object]:
    return {
        "counts": {"complete": 4},
        "baseline": {"number": 0},
        "pareto": [{"number": n} for n in front],
    }


def test_on_the_front_it_is_a_trade_off() -> None:
    text = _baseline_won(_summary([2, 0]))
    assert "the balanced choice of the front, where trial(s) 2 are better on some" in text


def test_off_the_front_it_is_a_tie_that_goes_to_the_defaults() -> None:
    text = _baseline_won(_summary([2]))
    assert "trial(s) 2 on the front did no better beyond the noise" in text
    assert "worse on another" not in text


def test_alone_or_unopposed() -> None:
    assert "no other configuration did better" in _baseline_won(_summary([0]))
    alone = {"counts": {"complete": 1}, "baseline": {"number": 0}, "pareto": []}
    assert "no other trial completed" in _baseline_won(alone)


def test_a_verified_pick_is_judged_on_its_verified_means_not_the_front() -> None:
    """The front is each trial's one run; a verified pick is chosen on the verified means. A
    review saw the baseline picked "where trial(s) 2, 3 are better on some objective and worse
    on another" of trials whose verified means were worse on both."""
    summary = {
        **_summary([3, 2, 0]),
        "pick": {"number": 0, "verified": True},
        "verified": [
            {"number": 0, "seeds": [1, 2], "held": True},
            {"number": 3, "seeds": [1, 2], "held": True},
            {"number": 2, "seeds": [1, 2], "held": False},
        ],
    }
    text = _baseline_won(summary)
    assert "worse on another" not in text and "the front" not in text, text
    assert "the balanced choice on the means verified over seeds [1, 2], beside trial(s) 3," in text
    none_held = {
        **summary,
        "verified": [{**v, "held": v["number"] == 0} for v in summary["verified"]],
    }
    assert "the only verified configuration that held on every seed [1, 2]" in _baseline_won(
        none_held
    )
    # verified alone (nothing else verified): the front's wording, as before
    alone = {**summary, "verified": summary["verified"][:1]}
    assert "the balanced choice of the front, where trial(s) 3, 2 are better" in _baseline_won(
        alone
    )
