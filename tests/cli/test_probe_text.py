"""`autotune probe`'s text output: a DDP probe with `probe.measure_scaling` printed no
scaling_efficiency (only `--json` had it; a black-box review of DDP probes)."""

from __future__ import annotations

from typing import Any

from autotune.cli.probe import format_probe


def _summary(**metrics: float) -> dict[str, Any]:
    return {
        "status": "ok",
        "workload": "mlp",
        "size": "tiny",
        "device": "cpu",
        "precision": "fp32",
        "effective_batch": 64,
        "micro_batch": 32,
        "accum_steps": 1,
        "world_size": 2,
        "steps_run": 20,
        "steps_planned": 20,
        "wall_s": 3.0,
        "metrics": {"final_loss": 0.5, **metrics},
        "knobs": {
            "lr": 0.01,
            "clip_norm": 1.0,
            "clip_mode": "global",
            "warmup_steps": 0,
            "schedule": "constant",
            "adam_eps": 1e-8,
            "accum_steps": 1,
        },
    }


def test_the_text_shows_the_scaling_efficiency_a_probe_measured() -> None:
    text = format_probe(_summary(scaling_efficiency=0.31, throughput=2.0e4))
    line = next(x for x in text.splitlines() if x.startswith("scaling_efficiency"))
    assert line.split()[1] == "0.31", line
    assert "scaling_efficiency" not in format_probe(_summary(throughput=2.0e4))
