"""`PartialSeries`: the launcher keeps the steps a probe reported, for a probe that ends without
a summary; what a probe sends is not trusted (out of order, ragged, not numbers)."""

from __future__ import annotations

import math

from autotune.process.partial import PartialSeries


def _event(first: object, n: int, **extra: object) -> dict[str, object]:
    start = first if isinstance(first, int) else 0
    return {
        "event": "telemetry",
        "first_step": first,
        "loss": [float(start + i) for i in range(n)],
        "clipped": [True] * n,
        **extra,
    }


def test_events_in_order_are_one_series_from_the_first_step() -> None:
    kept = PartialSeries()
    kept.add(_event(5, 3))
    kept.add(_event(8, 2, lr=[0.1, float("nan")]))
    rec = kept.record()
    assert rec is not None and rec["first_step"] == 5 and rec["steps"] == 5
    assert rec["series"]["loss"] == [5.0, 6.0, 7.0, 8.0, 9.0]
    assert rec["series"]["clipped"] == [1.0] * 5
    lr = rec["series"]["lr"]
    assert lr[:3] == [None] * 3 and lr[3] == 0.1 and math.isnan(lr[4])
    assert "grad_norm" not in rec["series"]  # never reported


def test_what_does_not_follow_ends_the_keeping() -> None:
    for bad in (
        _event(4, 2),  # a gap
        _event(2, 2),  # a repeat
        _event("3", 2),  # not a step
        _event(True, 2),
        {**_event(3, 2), "loss": "1,2"},  # not a list
        {**_event(3, 2), "clipped": [True]},  # ragged
        {"event": "telemetry", "first_step": 3, "lr": [0.1]},  # no loss
    ):
        kept = PartialSeries()
        kept.add(_event(0, 3))
        kept.add(bad)
        kept.add(_event(3, 1))  # after a break nothing more is kept
        rec = kept.record()
        assert rec is not None and rec["steps"] == 3, bad
    assert PartialSeries().record() is None
    junk = PartialSeries()
    junk.add({**_event(0, 2), "loss": [object(), "x"]})
    assert junk.record() == {"first_step": 0, "steps": 2, "series": {"clipped": [1.0, 1.0]}}
