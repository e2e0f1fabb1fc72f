"""A test workload that misbehaves on request: the mlp workload, plus one failure mode.

The mode comes from the environment variable HSA_AUTOTUNE_TEST_MODE, read in the probe process
(the study sets environment knobs before the process starts; the HSA_ prefix is one a space file
may set and that no platform conditions away):

    unset, ok   train normally
    raise       raise RuntimeError at step RAISE_AT with a recognisable message
    hang        start a child process, then sleep for ever (the trial time limit must end both)
    nan         the loss becomes NaN from step NAN_AT on
    kill        the probe process sends itself SIGKILL at step KILL_AT
    slow        sleep SLOW_S on every training micro-batch (a probe slower than the baseline's)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from autotune.workloads.mlp import MLPWorkload

MODE_VAR = "HSA_AUTOTUNE_TEST_MODE"
MESSAGE = "behaving workload: deliberate failure for the test"
HANG_CHILD_MARKER = "autotune-test-hang-child"
RAISE_AT = NAN_AT = KILL_AT = HANG_AT = 3
SLOW_S = 0.1


class BehavingWorkload(MLPWorkload):
    name = "behaving"

    def __init__(self, size: str, mode: str) -> None:
        super().__init__(size)
        self.mode = mode
        self.calls = 0

    def loss(self, model: Any, batch: Any) -> Any:
        import torch

        loss = super().loss(model, batch)
        if not torch.is_grad_enabled():  # the probe's held-out reference, before step 0
            return loss
        step = self.calls  # training steps (one micro-batch each)
        self.calls += 1
        if self.mode == "slow":
            time.sleep(SLOW_S)
        if self.mode == "raise" and step >= RAISE_AT:
            raise RuntimeError(MESSAGE)
        if self.mode == "nan" and step >= NAN_AT:
            return loss * float("nan")
        if self.mode == "kill" and step >= KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "hang" and step >= HANG_AT:
            # A grandchild in the probe's process group: killing the trial must take it too.
            child = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(3600)", HANG_CHILD_MARKER]
            )
            print(f"{HANG_CHILD_MARKER} pid {child.pid}", flush=True)  # lands in the log tail
            while True:
                time.sleep(3600)
        return loss


def make(size: str = "tiny") -> BehavingWorkload:
    return BehavingWorkload(size, os.environ.get(MODE_VAR, "ok"))
