"""The study's phase marks (`autotune.study.timeline`), read by benchmarks/study_overhead.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.study import timeline


def test_marks_go_to_the_named_file_in_order_and_nowhere_when_none_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(timeline.ENV, raising=False)
    timeline.mark("unseen")
    path = tmp_path / "timeline.jsonl"
    monkeypatch.setenv(timeline.ENV, str(path))
    timeline.mark("driver")
    timeline.mark("ray started")
    marks = [json.loads(line) for line in path.read_text().splitlines()]
    assert [m["at"] for m in marks] == ["driver", "ray started"]
    assert 0 <= marks[1]["t"] - marks[0]["t"] < 60
    assert list(tmp_path.iterdir()) == [path]
