"""A promoted probe that continued the rung below, but not as the run from step 0 would have (a
Lightning fit whose plain DataLoader drew its batches afresh: `continuation.note`), is said so
on its console line and counted in the summary's rung line; the others read as before."""

from __future__ import annotations

from pathlib import Path

import optuna
from assets import studies as h

from autotune import study as st
from autotune.study import attrs as ua
from autotune.study.rung_phase import probe_line, slim

NOTE = "the training DataLoader has no state_dict: its batches were drawn afresh"


def record(number: int, note: str | None, resumed: int | None = 30) -> dict[str, object]:
    cont = {"from": "x.pt", "step": resumed or 0, "why": None, **({"note": note} if note else {})}
    summary = {"resumed_from_step": resumed, "continuation": cont, "metrics": {}}
    return {"number": number, "rung": 1, "steps": 90, "outcome": "complete", "summary": summary}


def test_the_console_line_says_how_a_continued_probe_differed() -> None:
    assert probe_line(3, 90, record(3, NOTE)) == (
        f"  trial 3 at 90 steps: complete, continued from step 30 ({NOTE})"
    )
    assert (
        probe_line(3, 90, record(3, None))
        == "  trial 3 at 90 steps: complete, continued from step 30"
    )
    # with the probe's own time, as the screen's and the verification's lines show theirs
    timed = {**record(3, None), "wall_clock_s": 12.4}
    assert (
        probe_line(3, 90, timed)
        == "  trial 3 at 90 steps: complete, continued from step 30  [12 s]"
    )
    assert slim(record(3, NOTE))["continuation_note"] == NOTE
    assert slim(record(3, None))["continuation_note"] is None


def test_the_summary_counts_them(tmp_path: Path) -> None:
    folder = h.recorded_study(
        tmp_path, "cd", trials=3, finished=3, overrides=["budget.target_steps=90"]
    )
    study = optuna.load_study(study_name="cd", storage=f"sqlite:///{folder / 'optuna.db'}")
    table = [{"rung": 1, "steps": 90, "numbers": [0, 1, 2], "agreement": None}]
    study.set_user_attr(ua.RUNGS, table)
    study.set_user_attr(
        ua.DECIDED, {"steps": 90, "rung": 1, "reason": "target", "target_steps": 90}
    )
    for number, note, resumed in ((0, None, 30), (1, NOTE, 30), (2, None, None)):
        study.set_user_attr(ua.rung_key(number, 90), slim(record(number, note, resumed)))
    _, space, study_dir, _ = st.find_study(str(folder))
    summary = st.summarize(study, space, study_dir)
    row = summary["rungs"][1]
    assert (row["continued"], row["continued_differently"]) == (2, 1)
    text = st.format_summary(summary)
    assert (
        "2 of 3 promoted probes continued from the rung below (1 not as the run from step 0 "
        "would have: see their records' continuation.note)"
    ) in text
    # None continued differently: the line as before, no count.
    study.set_user_attr(ua.rung_key(1, 90), slim(record(1, None)))
    summary = st.summarize(study, space, study_dir)
    assert "continued_differently" not in summary["rungs"][1]
    assert "not as the run from step 0" not in st.format_summary(summary)
