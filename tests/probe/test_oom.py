"""The CPU allocator's failure is an out-of-memory like a GPU's: a real allocation past a real
process limit, classed by `is_oom`, and a probe that hits it ends `oom`, a result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.probe.oom import is_oom


def test_what_is_and_is_not_an_out_of_memory() -> None:
    import torch

    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(MemoryError())
    text = "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you"
    assert is_oom(RuntimeError(text))
    assert is_oom(RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate"))
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_oom(ValueError("DefaultCPUAllocator: can't allocate memory"))


WORKLOAD = """
import torch

class Big:
    name, size, default_lr, unstable_lr = "big", "tiny", 1e-3, 1e-1

    def build_model(self):
        return torch.nn.Linear(4, 1)

    def batches(self, micro_batch, seed):
        while True:
            yield (torch.ones(micro_batch, 4),)

    def eval_batches(self, micro_batch):
        return [(torch.ones(micro_batch, 4),)]

    def loss(self, model, batch):
        # 800 MB of activations per step: past a 600 MB limit, far below this machine's RAM
        wide = model(batch[0]).expand(batch[0].shape[0], 200_000_000 // batch[0].shape[0])
        return (wide * 1.0).pow(2).mean()

    def samples(self, batch):
        return int(batch[0].shape[0])

    def tokens(self, batch):
        return 0

def make(size="tiny"):
    return Big()
"""


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_a_probe_past_its_memory_limit_ends_oom(tmp_path: Path) -> None:
    """A real probe in its own process (`autotune.process.entry`, as a study's), limited to
    less memory than its step needs by AUTOTUNE_PROBE_MEMORY_MB: it ends `oom`, a result; the
    same probe without the limit completes."""
    from autotune.probe.config import ProbeConfig
    from autotune.process.launcher import run_trial_process

    (tmp_path / "big.py").write_text(WORKLOAD)
    cfg = ProbeConfig(workload=f"{tmp_path / 'big.py'}:make", steps=3, micro_batch=4)
    got = {}
    for limit in ("600", None):
        extra = {"AUTOTUNE_PROBE_MEMORY_MB": limit} if limit else {}
        out = run_trial_process(cfg.to_dict(), {}, timeout_s=300, threads=1, extra_env=extra)
        got[limit] = (out["outcome"], out.get("cause"), out.get("error"))
    assert got["600"][:2] == ("oom", "oom"), got
    assert got[None][0] == "complete", got


BIG_MODEL = WORKLOAD.replace(
    "        return torch.nn.Linear(4, 1)",
    "        self.table = torch.ones(200_000_000)  # 800 MB before the first step\n"
    "        return torch.nn.Linear(4, 1)",
).replace("200_000_000 // batch[0].shape[0]", "1")


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_out_of_memory_in_the_workloads_setup_is_oom_not_a_failure(tmp_path: Path) -> None:
    """The allocator failing while the workload builds its model (before the first step) is the
    same event as in a step: `oom`, its error said, not `failed (exception)`."""
    from autotune.probe.config import ProbeConfig
    from autotune.process.launcher import run_trial_process

    (tmp_path / "big.py").write_text(BIG_MODEL)
    cfg = ProbeConfig(workload=f"{tmp_path / 'big.py'}:make", steps=3, micro_batch=4)
    extra = {"AUTOTUNE_PROBE_MEMORY_MB": "600"}
    out = run_trial_process(cfg.to_dict(), {}, timeout_s=300, threads=1, extra_env=extra)
    assert (out["outcome"], out["cause"]) == ("oom", "oom"), out
    assert out["summary"] is None
    assert "out of memory before the first step" in out["error"], out["error"]
    assert "DefaultCPUAllocator" in out["error"]
