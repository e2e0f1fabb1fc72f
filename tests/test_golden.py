"""Every built-in workload: its loss curve at a fixed seed on CPU matches the committed golden
file (so a change in training semantics shows up in CI), and it shows the instability the knobs
cure (PyTorch defaults at its `unstable_lr` spike or diverge; clipping and warm-up train)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import pytest
import torch

from autotune.probe import ProbeConfig, run_probe
from autotune.workload import BUILTINS, resolve

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_loss_curve_matches_golden_file(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    assert path.is_file(), f"no golden file for {name}: run python tests/golden/regen.py"
    gold = json.loads(path.read_text())
    if gold["torch"].split("+")[0] != torch.__version__.split("+")[0]:
        pytest.skip(f"golden file made with torch {gold['torch']}, this is {torch.__version__}")
    if (
        name == "tiny_gpt"
        and gold["python"].rsplit(".", 1)[0] != platform.python_version().rsplit(".", 1)[0]
    ):
        pytest.skip(
            "tiny_gpt trains on this Python's standard library sources, which differ "
            f"between Python {gold['python']} and {platform.python_version()}"
        )
    settings = {k: gold[k] for k in ("size", "steps", "micro_batch", "seed", "precision", "knobs")}
    torch.set_num_threads(gold["threads"])
    try:
        result = run_probe(ProbeConfig(workload=name, threads=gold["threads"], **settings))
    finally:
        torch.set_num_threads(max(1, torch.get_num_threads()))
    np.testing.assert_allclose(result["series"]["loss"], gold["loss"], rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(
        result["series"]["grad_norm"], gold["grad_norm"], rtol=2e-3, atol=1e-6
    )


def _peak(r: dict) -> float:
    """The worst loss of the run relative to its first (untrained) loss."""
    loss = np.asarray(r["series"]["loss"], dtype=float)
    return float(np.nanmax(np.where(np.isfinite(loss), loss, np.inf)) / loss[0])


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_defaults_are_unstable_at_unstable_lr_and_the_knobs_cure_it(name: str) -> None:
    w = resolve(name, "tiny")
    base = ProbeConfig(
        workload=name, steps=150, micro_batch=16, threads=1, knobs={"lr": w.unstable_lr}
    )
    raw = run_probe(base)
    # PyTorch's defaults at the high learning rate: diverged, or a loss spike of 2x or more.
    assert raw["status"] == "diverged" or _peak(raw) >= 2.0, (
        f"{name}: PyTorch defaults at lr={w.unstable_lr} trained smoothly (peak {_peak(raw):.2f})"
    )
    # The same learning rate with clipping and a warm-up: no divergence, a smaller peak.
    cured = run_probe(
        ProbeConfig(
            **{
                **base.to_dict(),
                "knobs": {"lr": w.unstable_lr, "clip_norm": 0.25, "warmup_steps": 75},
            }
        )
    )
    assert cured["status"] == "ok", f"{name}: still {cured['status']} with clipping + warm-up"
    assert _peak(cured) < min(1.5, _peak(raw))
    # Sensible knobs at the workload's default learning rate: it trains.
    sensible = run_probe(
        ProbeConfig(
            **{
                **base.to_dict(),
                "knobs": {"lr": w.default_lr, "clip_norm": 1.0, "warmup_steps": 20},
            }
        )
    )
    assert sensible["status"] == "ok" and sensible["metrics"]["loss_drop"] > 0.2
    assert _peak(sensible) < 1.5
