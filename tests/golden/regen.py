"""Write the golden loss file of every built-in workload: `python tests/golden/regen.py`.

Run it only when a change to a workload or to the probe's training semantics is intended, and
say so in the commit: the golden files are how such a change shows up in review.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.probe import ProbeConfig, run_probe
from autotune.probe.workload import BUILTINS

HERE = Path(__file__).resolve().parent
SETTINGS = {
    "size": "tiny",
    "steps": 30,
    "micro_batch": 8,
    "seed": 0,
    "precision": "fp32",
    "knobs": {"clip_norm": 1.0, "warmup_steps": 5},
}


def golden(name: str) -> dict:
    torch.set_num_threads(1)
    cfg = ProbeConfig(workload=name, threads=1, **SETTINGS)  # type: ignore[arg-type]
    result = run_probe(cfg)
    return {
        "workload": name,
        **SETTINGS,
        "threads": 1,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "loss": result["series"]["loss"],
        "grad_norm": result["series"]["grad_norm"],
    }


if __name__ == "__main__":
    for name in BUILTINS:
        data = golden(name)
        (HERE / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        print(f"{name}: {len(data['loss'])} steps, final loss {data['loss'][-1]:.4f}")
