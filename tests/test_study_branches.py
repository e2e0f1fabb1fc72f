"""The rung phase's branch where nothing searched can be promoted, driven by a real study (real
local Ray, SQLite Optuna, SQLite MLflow; nothing mocked): no configuration but the baseline is
feasible at the screen, so no rung compares configurations, and the baseline alone goes on to
the target, where the study decides (the yardstick at the length the user trains)."""

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

# No probe sheds 99.9% of its initial loss in 30 steps: every trial is infeasible at the screen.
NOTHING_FEASIBLE = """\
name: branches
workload: {name: mlp, size: tiny}
probe: {steps: 30, batch: 32, device: cpu, telemetry_every: 10, threads: 1}
budget: {trials: 4, trial_timeout_s: 120, target_steps: 120}
constraints:
  - {metric: loss_drop, op: ">=", value: 0.999}
rungs: {eta: 2, min_promote: 2, grow: always}
sampler: {name: random, seed: 0}
verify: {top_k: 1, seeds: 2}
knobs:
  clip_norm: {low: 0.1, high: 5.0, log: true}
  warmup_steps: {low: 0, high: 10}
"""


def test_with_nothing_feasible_the_baseline_alone_goes_to_the_target(tmp_path: Path) -> None:
    space = h.write(tmp_path, NOTHING_FEASIBLE)
    uri = h.sqlite_uri(tmp_path)
    run = h.autotune(
        ["study", "--space", str(space), "--tracking-uri", uri],
        tmp_path,
        token=h.new_token(),
        timeout=400,
    )
    assert run.returncode == 0, h.explain(run)
    assert "no feasible configuration to promote" in run.stdout, h.explain(run)
    assert "rung 1:" not in run.stdout, "a rung compared configurations with nothing feasible"
    assert "rung 2: 120 steps for the baseline alone (trial 0)" in run.stdout, h.explain(run)
    assert "the baseline alone at 120 (nothing searched was feasible)" in run.stdout

    show = h.autotune(["show", "branches", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["decided"]["steps"] == 120, summary["decided"]
    assert summary["decided"]["reason"].startswith("no feasible configuration to promote")
    assert [(r["steps"], r["numbers"]) for r in summary["rungs"][1:]] == [(120, [0])]
    study_dir = tmp_path / "autotune-studies" / "branches"
    records = sorted(p.name for p in (study_dir / "trials").glob("*-r*.json"))
    assert records == ["0000-r2.json"], records
    top = json.loads((study_dir / "trials" / "0000-r2.json").read_text())
    assert top["summary"]["steps_run"] == 120
    assert top["summary"]["resumed_from_step"] == 30, top["summary"]["continuation"]
    # Infeasible there too (no run sheds 99.9% of its loss): no pick, and the summary says so.
    assert (summary["pick"] or {}).get("number") is None, summary["pick"]
