"""A pick that is not on the printed Pareto front says where it came from. The front is each
trial's own run (at the probe seed); the verified pick is the knee of the verified means over
other seeds. A black-box review saw "Pareto front at 270 steps" list trial 4 alone, then "pick
(balanced: the knee of the front, verified): trial 7" with nothing saying that trial 7 came
out ahead over seeds 1-2 while trial 4 beat it at seed 0. Recorded studies (no Ray)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assets import studies as h

from autotune import study as st
from autotune.study import attrs as ua
from autotune.study.find import find_study
from autotune.study.summary_text import _off_front_head

N = 4


def made_up(i: int) -> dict[str, float]:
    """Trial i's made-up screen: each trial steadier and faster than the one before (so the
    last one alone is on the front)."""
    return {"loss_cv": 0.5 - 0.1 * i, "throughput": 100.0 + i, "loss_drop": 0.5, "final_loss": 2.0}


def _study(tmp_path: Path, overrides: list[str]) -> Any:
    metrics = [made_up(i) for i in range(N)]
    h.recorded_study(tmp_path, "f", trials=N, finished=N, metrics=metrics, overrides=overrides)
    return find_study(str(st.study_dir_for("f", tmp_path)))


def test_a_verified_pick_off_the_front_says_it_was_chosen_over_other_seeds(
    tmp_path: Path,
) -> None:
    study, space, study_dir, _ = _study(tmp_path, ["verify.top_k=2", "verify.seeds=2"])
    steps = h.SHARED_STEPS
    study.set_user_attr(ua.verified_key(0), h.verified_result(made_up(0), steps))
    # over seeds 1-2 trial 2 comes out steadier than trial 3, which beat it at seed 0
    study.set_user_attr(
        ua.verified_key(2), h.verified_result({**made_up(3), "loss_cv": 0.1}, steps)
    )
    study.set_user_attr(ua.verified_key(3), h.verified_result(made_up(3), steps))
    summary = st.summarize(study, space, study_dir)
    assert [r["number"] for r in summary["pareto"]] == [3]
    assert summary["pick"]["number"] == 2 and summary["pick"]["verified"], summary["pick"]
    off = summary["pick_off_front"]
    assert off == {"seed": 0, "beaten_by": [3], "verified_seeds": [1, 2]}, off
    text = st.format_summary(summary)
    assert "pick (balanced: the knee of the front, verified)" not in text, text
    assert (
        "pick (balanced, verified over seeds [1, 2]): trial 2  (not on the front above, each "
        "trial's run at seed 0, where trial(s) 3 beat it: it is the knee of the verified "
        "configurations that held"
    ) in text, text


def test_a_pick_on_the_front_reads_as_before(tmp_path: Path) -> None:
    study, space, study_dir, _ = _study(tmp_path, ["verify.top_k=2", "verify.seeds=2"])
    steps = h.SHARED_STEPS
    study.set_user_attr(ua.verified_key(0), h.verified_result(made_up(0), steps))
    for n in (2, 3):
        study.set_user_attr(ua.verified_key(n), h.verified_result(made_up(n), steps))
    summary = st.summarize(study, space, study_dir)
    assert summary["pick"]["number"] == 3 and summary["pick_off_front"] is None
    text = st.format_summary(summary)
    assert "pick (balanced: the knee of the front, verified): trial 3" in text, text


def test_an_unverified_pick_off_the_front_is_a_tie_within_noise() -> None:
    off = {"seed": 0, "beaten_by": [4], "verified_seeds": None}
    head = _off_front_head({"number": 7}, off)
    assert head.startswith(
        "pick (balanced: the knee of the front, ties within noise): trial 7  (not on the front "
        "above, where trial(s) 4 beat it within their measured noise"
    ), head
