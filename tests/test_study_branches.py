"""The rung phase's branches that end a study below the target, each driven by a real study
(real local Ray, SQLite Optuna, SQLite MLflow; nothing mocked): no configuration but the baseline
is feasible at the screen, so there is nothing to promote."""

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


def test_a_screen_with_nothing_feasible_promotes_nothing_and_says_so(tmp_path: Path) -> None:
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
    assert "rung 1:" not in run.stdout, "a rung ran with nothing feasible to promote"

    show = h.autotune(["show", "branches", "--json"], tmp_path, timeout=120)
    assert show.returncode == 0, h.explain(show)
    summary = json.loads(show.stdout)
    assert summary["decided"]["steps"] == 30, summary["decided"]
    assert summary["decided"]["reason"] == "no feasible configuration to promote"
    study_dir = tmp_path / "autotune-studies" / "branches"
    assert not list((study_dir / "trials").glob("*-r1.json")), "no rung record may exist"
