"""The study run's figures at one length: the pick against the baseline where the study
decided (verified where both were), the screen's under `screen.`, the decided length and the
verdict as tags. A black-box review read rvj's run with the screen's best and baseline beside
the verified change: best.noise_per_drop 0.009811, baseline 0.0608, change_pct -74.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune import tracking


def _rvj_summary() -> dict[str, Any]:
    """A summary shaped as rvj's: screened at 40 steps, decided and verified at 120."""
    objectives = [
        {"metric": "noise_per_drop", "direction": "minimize"},
        {"metric": "throughput", "direction": "maximize"},
    ]
    verified = {"steps": 120, "trial": 3, "source": "verified"}
    return {
        "study": "rvj",
        "objectives": objectives,
        "baseline": {
            "number": 0,
            "values": [0.0608, 72851.0],
            "metrics": {"noise_per_drop": 0.0608, "throughput": 72851.0, "steps_run": 40},
        },
        "pareto": [{"number": 3, "values": [0.0127, 9102.0], "knobs": {"clip_norm": 0.68}}],
        "pareto_steps": 120,
        "decided": {"steps": 120, "rung": 1, "reason": "target"},
        "best": {"noise_per_drop": 0.009811, "throughput": 72851.0},  # the screen's
        "improvement": {
            "noise_per_drop": {"baseline": 0.0730, "best": 0.0180, "change_pct": -75.3, **verified},
            "throughput": {"baseline": 28632.0, "best": 6489.0, "change_pct": -77.3, **verified},
        },
        "screen_improvement": {
            "noise_per_drop": {"baseline": 0.0608, "best": 0.009811, "change_pct": -83.9},
            "throughput": {"baseline": 72851.0, "best": 72851.0, "change_pct": 0.0},
        },
        "vs_baseline": {"steps": 120, "verdict": "better", "seeds": [1, 2]},
        "pick": {"number": 3, "verdict": "better"},
        "counts": {"complete": 7},
    }


def test_the_study_run_reads_at_the_decided_length(tmp_path: Path) -> None:
    client = tracking.connect(f"sqlite:///{tmp_path}/mlflow.db")
    experiment_id = tracking.ensure_experiment(client, "rvj")
    parent = tracking.ensure_study_run(
        client, experiment_id, "rvj", space_yaml="name: rvj\n", params={"steps": 40}, tags={}
    )
    tracking.log_study_summary(client, parent, _rvj_summary(), [], None)
    run = client.get_run(parent)
    m, tags = run.data.metrics, run.data.tags
    # best, baseline and change at 120 steps, verified: each change follows from its two figures
    for name in ("noise_per_drop", "throughput"):
        best, base = m[f"best.{name}"], m[f"baseline.{name}"]
        assert m[f"change_pct.{name}"] == pytest.approx(100 * (best - base) / base, abs=0.1)
    assert m["best.noise_per_drop"] == pytest.approx(0.0180)
    assert m["baseline.throughput"] == pytest.approx(28632.0)
    assert "baseline.steps_run" not in m  # the screen's run is not the decided length's
    assert m["decided_steps"] == 120
    assert tags["autotune.decided_steps"] == "120"
    assert tags["autotune.compared"] == "verified"
    assert tags["autotune.verdict"] == "BETTER"  # as the summary prints it
    # the screen's figures, at 40 steps, apart
    assert m["screen.best.noise_per_drop"] == pytest.approx(0.009811)
    assert m["screen.baseline.noise_per_drop"] == pytest.approx(0.0608)
    assert m["screen.baseline.steps_run"] == 40
    assert m["screen.change_pct.noise_per_drop"] == pytest.approx(-83.9)
