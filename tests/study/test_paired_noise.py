"""The throughput note beside the paired verdict: a tie among the candidates' own intervals is
not said alone when the comparison with the defaults over the same seeds measured a difference
(a study printed "within timing noise" above "worse on throughput [x0.81, x0.92]")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from autotune.study import noise
from autotune.study.verdict import Decision, paired_noise_note

NOTE = {
    "metric": "throughput",
    "within_noise": True,
    "candidates": 2,
    "range": [27203.0, 31514.0],
    "message": noise.WITHIN_NOISE,
}


def _decision(verdict: str) -> Decision:
    pick = SimpleNamespace(number=2)
    row: dict[str, Any] = {
        "verdict": verdict,
        "ratio": {"mean": 0.863, "low": 0.809, "high": 0.921, "n": 3, "scale": "log"},
    }
    return Decision(pick, pick, {"verdict": "mixed", "metrics": {"throughput": row}})


def test_a_measured_paired_difference_is_said_with_the_tie() -> None:
    out = paired_noise_note(dict(NOTE), _decision("worse"))
    assert out is not None and out["within_noise"] is True and out["paired"] == "worse"
    assert out["message"].startswith("throughput differences among the candidates are within")
    assert "trial 2 is worse on throughput than the defaults (x0.863" in out["message"]
    assert "[x0.809, x0.921]" in out["message"]


def test_a_paired_difference_beside_too_few_seeds_says_too_few_not_a_tie() -> None:
    few = "2 seeds: the throughput interval spans 357x; too few seeds to compare throughput"
    out = paired_noise_note({**NOTE, "too_few_seeds": few}, _decision("worse"))
    assert out is not None and "within" not in out["message"]
    assert out["message"].startswith(f"throughput not compared among the candidates ({few})")
    assert "trial 2 is worse on throughput than the defaults (x0.863" in out["message"]


def test_no_paired_difference_leaves_the_note_as_it_was() -> None:
    assert paired_noise_note(dict(NOTE), _decision("no detectable difference")) == NOTE
    apart = {**NOTE, "within_noise": False, "message": None}
    assert paired_noise_note(apart, _decision("worse")) == apart
    assert paired_noise_note(None, _decision("worse")) is None
