"""A study that is refused (its space changed since it ran) is refused before Ray starts and
before MLflow's store opens: the driver's timeline (`study/timeline.py`) stops at the Optuna
storage, no MLflow store file is made, and no Ray is started. Before, the refusal came after
both, and took ~20 s of a loaded 2-core machine. The study is recorded through the study's own
code (`h.recorded_study`: no Ray); the refused driver is the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = pytest.mark.integration


def test_a_changed_space_is_refused_before_ray_and_mlflow(tmp_path: Path) -> None:
    h.recorded_study(tmp_path, "early", trials=3, finished=2)
    before = h.mlp_space("early", trials=3)
    changed = before.replace("warmup_steps: {low: 0, high: 10}", "warmup_steps: {low: 0, high: 20}")
    assert changed != before
    space = h.write(tmp_path, changed)
    timeline = tmp_path / "timeline.jsonl"
    token = h.new_token()
    done = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)],
        tmp_path,
        env=h.cli_env(token, AUTOTUNE_TIMELINE=str(timeline)),
    )
    assert done.returncode == 2, h.explain(done)
    last = done.stderr.strip().splitlines()[-1]
    assert "study 'early' already exists" in last and "with a different space" in last, last
    marks = [json.loads(line)["at"] for line in timeline.read_text().splitlines()]
    assert marks[-1] == "optuna storage", marks
    assert "mlflow store" not in marks and "ray up" not in marks, marks
    assert not (tmp_path / "mlflow.db").exists(), "the refused study made an MLflow store"
    assert not h.wait_gone(token, timeout=30), "the refused driver left processes behind"
