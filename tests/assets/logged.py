"""A trial's outcome as the study logs it to MLflow, with a loss curve (for `compare`)."""

from __future__ import annotations

from typing import Any


def logged_outcome(number: int, loss: list[float]) -> dict[str, Any]:
    return {
        "number": number,
        "outcome": "complete",
        "baseline": number == 0,
        "feasible": True,
        "knobs": {"clip_norm": 1.0},
        "summary": {"series": {"loss": loss}, "metrics": {}, "steps_run": len(loss)},
        "wall_s": 1.0,
    }
