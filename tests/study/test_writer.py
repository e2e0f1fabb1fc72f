"""The study's plots draw the records of the length its front was decided at (`writer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.study import folder
from autotune.study.writer import _decided_records
from autotune.tracking.summary import _lengths


def _record(number: int, steps: int, noise: float) -> dict[str, Any]:
    return {"number": number, "steps": steps, "summary": {"metrics": {"noise_per_drop": noise}}}


def test_the_plots_draw_the_rung_the_front_was_decided_at(tmp_path: Path) -> None:
    screen = [_record(n, 40, 0.01 * (n + 1)) for n in range(4)]
    for n in (0, 2):  # promoted to 120 steps; 3 also ran a rung of another length (80)
        folder.write_json(folder.rung_path(tmp_path, n, 1), _record(n, 120, 0.5 + n))
    folder.write_json(folder.rung_path(tmp_path, 3, 1), _record(3, 80, 9.0))
    summary = {"decided": {"rung": 1, "steps": 120}, "pareto_steps": 120}
    drawn = _decided_records(tmp_path, summary, screen)
    assert drawn is not None
    assert [(r["number"], r["summary"]["metrics"]["noise_per_drop"]) for r in drawn] == [
        (0, 0.5),
        (2, 2.5),
    ]
    assert _lengths(summary, screen, drawn) == (
        "at 120 steps",
        "2 trials not run 120 steps (not promoted): not drawn",
    )


def test_a_study_decided_at_the_screen_draws_the_screen_and_says_so(tmp_path: Path) -> None:
    screen = [_record(n, 40, 0.01) for n in range(3)]
    summary = {"decided": {"rung": 0, "steps": 40}, "pareto_steps": 40}
    assert _decided_records(tmp_path, summary, screen) is None
    assert _lengths(summary, screen, None) == ("at the screen's 40 steps", "")
