"""A test workload (the mlp one) whose processes leave something behind, by factory:

spawn   at its third training micro-batch each process starts `sleep 1000`, a helper that
        inherits its output (as a tokenizer server would) and outlives it; the pid is
        printed as `helper pid N`
exit0   rank 1 leaves with os._exit(0) at its third training micro-batch, no summary said
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from autotune.workloads.mlp import MLPWorkload

PATH = Path(__file__).resolve()
AT = 3


class Leaving(MLPWorkload):
    name = "leaving"

    def __init__(self, size: str, mode: str) -> None:
        super().__init__(size)
        self.mode, self.calls = mode, 0

    def loss(self, model: Any, batch: Any) -> Any:
        import torch

        if torch.is_grad_enabled():  # training, not the held-out reference
            self.calls += 1
            if self.calls == AT and self.mode == "spawn":
                helper = subprocess.Popen(["sleep", "1000"])
                print(f"helper pid {helper.pid}", flush=True)
            if self.calls == AT and self.mode == "exit0" and os.environ.get("RANK") == "1":
                os._exit(0)
            if self.calls == AT and self.mode == "hang1" and os.environ.get("RANK") == "1":
                time.sleep(10**6)
        return super().loss(model, batch)


def spawn(size: str = "tiny") -> Leaving:
    return Leaving(size, "spawn")


def exit0(size: str = "tiny") -> Leaving:
    return Leaving(size, "exit0")


def hang1(size: str = "tiny") -> Leaving:
    return Leaving(size, "hang1")


def workload(mode: str) -> str:
    """The workload spec of `mode`, for a probe config or `--set workload.name=...`."""
    return f"{PATH}:{mode}"
