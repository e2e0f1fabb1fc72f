"""A probe process keeps what its steps free (glibc's `mallopt`, `autotune.process.malloc`): a
cold process, forked by a zygote or fresh, does not page-fault its steps' tensors in again at
every step (measured: 30-40x a warm process's faults, 6-8% slower, benchmarks/RESULTS.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from autotune.probe import ProbeConfig
from autotune.process import launcher

# tiny_gpt, printing the minor page faults its steps took from step 20 to step 60.
COUNTING = """
import resource

import torch

from autotune.workloads.tiny_gpt import TinyGPTWorkload


class Counting(TinyGPTWorkload):
    marks = []

    def loss(self, model, batch):
        if torch.is_grad_enabled():  # a training step, not the held-out reference
            self.marks.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
            if len(self.marks) == 60:
                print(f"step faults {self.marks[59] - self.marks[19]}", flush=True)
        return super().loss(model, batch)


def make(size="tiny"):
    return Counting(size)
"""


pytestmark = pytest.mark.usefixtures("no_zygote_left")  # tests/process/conftest.py


def _step_faults(tmp_path: Path, spare: bool) -> int:
    wl = tmp_path / "counting.py"
    wl.write_text(COUNTING)
    probe = ProbeConfig(
        workload=f"{wl}:make", size="tiny", steps=70, micro_batch=16, knobs={"lr": 1e-3}
    )
    result = launcher.run_trial_process(probe.to_dict(), {}, timeout_s=180, threads=1, spare=spare)
    assert result["outcome"] == "complete", result.get("error") or result.get("log_tail")
    found = re.findall(r"step faults (\d+)", result.get("log_tail") or "")
    assert found, result.get("log_tail")
    return int(found[-1])


@pytest.mark.integration  # probe processes
@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt and ru_minflt: Linux")
@pytest.mark.parametrize("spare", [True, False], ids=["forked by the zygote", "fresh"])
def test_a_cold_probe_process_does_not_fault_its_steps_in_again(
    tmp_path: Path, spare: bool
) -> None:
    faults = _step_faults(tmp_path, spare)
    # 40 steps: with glibc's defaults a cold process took 6,000-19,000 faults here (a zygote's
    # child over 2000 steps: ~470k); keeping what it frees, 88-195.
    assert faults < 2000, f"{faults} minor page faults over 40 steps"
