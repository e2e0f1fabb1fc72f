"""The line under the paired comparison names the searched side for what it is. When the
defaults are preferred, the configuration compared with them is not the pick: a black-box
review saw "  pick     trial 2: final_loss 0.3176" above "pick: the defaults (trial 0)"."""

from __future__ import annotations

from typing import Any

from autotune.study.summary_text import _pick_lines


def _summary(chosen: int, first: int, verdict: str) -> dict[str, Any]:
    loss = {"mean": 0.3, "low": 0.2, "high": 0.4, "n": 2}
    side = {"source": "verified", "final_loss": loss, "diverged_share": 0.0, "causes": {}}
    return {
        "baseline": {"number": 0},
        "pick": {
            "number": chosen,
            "first_choice": first,
            "defaults_preferred": chosen != first,
            "verdict": verdict,
            "verified": True,
            "params": {},
        },
        "vs_baseline": {
            "steps": 40,
            "seeds": [1, 2],
            "verdict": verdict,
            "pick": {**side, "number": first},
            "baseline": {**side, "number": 0},
        },
    }


def test_the_candidate_compared_is_not_called_the_pick_when_the_defaults_are() -> None:
    lines = _pick_lines(_summary(0, 2, "no detectable difference"))
    assert lines[0].startswith("trial 2 vs baseline (paired over seeds [1, 2]): NO DETECTABLE")
    assert lines[1].startswith("  compared trial 2: final_loss 0.3"), lines
    assert lines[2].startswith("  baseline trial 0: final_loss 0.3"), lines
    assert lines[3].startswith("pick: the defaults (trial 0): trial 2 showed no detectable")
    assert not any(x.startswith("  pick ") for x in lines), lines


def test_a_searched_pick_is_still_called_the_pick() -> None:
    lines = _pick_lines(_summary(2, 2, "better"))
    assert lines[1].startswith("  pick     trial 2: final_loss 0.3"), lines
    assert lines[3].startswith("pick (balanced: the knee of the front, verified): trial 2")
