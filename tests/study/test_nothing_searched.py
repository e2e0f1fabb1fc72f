"""A space with nothing to search (every knob fixed) runs its baseline alone: a black-box review
saw 3 identical trials, then 2 of them verified over 3 seeds beside the baseline (12 probes
for one configuration), with no warning. Real local Ray, SQLite Optuna and MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from assets import studies as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy"),
    pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes"),
]

SPACE = """\
name: fixed
workload: {name: mlp, size: tiny}
probe: {steps: 10, micro_batch: 16, device: cpu, threads: 1}
budget: {trials: 3}
verify: {top_k: 2, seeds: 2}
knobs: {lr: 0.1}
"""


def test_a_space_with_nothing_searched_runs_the_baseline_alone(tmp_path: Path) -> None:
    space = h.write(tmp_path, SPACE)
    args = ["study", "--space", str(space), "--tracking-uri", h.sqlite_uri(tmp_path)]
    run = h.autotune(args, tmp_path, token=h.new_token())
    assert run.returncode == 0, h.explain(run)
    assert "nothing to search: the baseline alone runs (not 3 copies of it)" in run.stdout
    study_dir = tmp_path / "autotune-studies" / "fixed"
    records = sorted(p.name for p in (study_dir / "trials").glob("*.json"))
    assert records == ["0000.json"], records
    assert not list(study_dir.glob("verify/*.json")), "nothing verified: no candidate to compare"
    assert "verifying" not in run.stdout

    show = h.autotune(["show", "fixed", "--json"], tmp_path)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["trials"] == 1 and summary["counts"]["complete"] == 1
    assert summary["unfinished"] is None, "the baseline alone is the whole study"
    assert summary["verified"] == [] and summary["pick"]["number"] == 0
