"""The recipe the tests build by hand: every knob at PyTorch's default but those given (lr
0.01 unless given), made-up fingerprint and source. `dataclasses.replace` changes the rest."""

from __future__ import annotations

from typing import Any

from autotune import Recipe
from autotune import space as sp


def make_recipe(**knobs: Any) -> Recipe:
    base = {name: info.default for name, info in sp.KNOBS.items()}
    return Recipe(
        name="t",
        workload={"name": "mlp", "size": "tiny"},
        precision=knobs.pop("precision", "fp32"),
        micro_batch=16,
        knobs={**base, "lr": 0.01, **knobs},
        env={"NCCL_ALGO": "Ring"},
        probe={"steps": 50, "seed": 0},
        achieved={"loss_cv": {"direction": "minimize", "value": 0.05, "verified": None}},
        fingerprint={"hash": "abc123", "platform": "cpu"},
        source={"study": "s", "trial": 4, "searched": ["clip_norm", "warmup_steps"]},
        created_at="2026-01-01T00:00:00+00:00",
    )


def measured(metric: str, values: list[float], **timing: float) -> dict[str, Any]:
    """What `verify` measured: one complete run per value (seeds 1, 2, ...), summarized."""
    from autotune.recipe.seeds import summarize_seeds

    runs = [
        {
            "seed": i + 1,
            "outcome": "complete",
            "summary": {"metrics": {metric: v, **timing}, "steps_run": 50, "steps_planned": 50},
        }
        for i, v in enumerate(values)
    ]
    return summarize_seeds(runs, [metric])
