"""benchmarks/gpu_check.sh, the prepared GPU check, on a machine without a GPU: it runs in the
environment it is given, says plainly that no GPU is visible, and leaves its table (a GPU machine
is lent only to some sessions; there the same script runs every step)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: run the script itself"),
]


def test_the_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks/gpu_check.sh")], check=True)


def test_without_a_gpu_it_stops_with_a_clear_line_and_its_table(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OUT": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks/gpu_check.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no GPU visible to torch: stopping" in proc.stdout
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("| step | status | last line |")
    # It used this environment (torch and the stack import here) instead of building a venv.
    assert "| devices | rc=0" in table and "| venv |" not in table
    assert not (ROOT / ".venv-gpu").exists()


def test_the_sync_check_refuses_without_a_device() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu_sync_check.py"), "--precision", "fp16"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no CUDA/ROCm device" in proc.stderr
