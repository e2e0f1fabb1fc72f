"""The CPU allocator's failure is an out-of-memory like a GPU's: a real allocation past a real
process limit, classed by `is_oom`, and a probe that hits it ends `oom`, a result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from assets.big_setup import BIG_SETUP, BIG_STEP

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


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_a_probe_past_its_memory_limit_ends_oom(tmp_path: Path) -> None:
    """A real probe in its own process (`autotune.process.entry`, as a study's), limited to
    less memory than its step needs by AUTOTUNE_PROBE_MEMORY_MB: it ends `oom`, a result; the
    same probe without the limit completes."""
    from autotune.probe.config import ProbeConfig
    from autotune.process.launcher import run_trial_process

    (tmp_path / "big.py").write_text(BIG_STEP)
    cfg = ProbeConfig(workload=f"{tmp_path / 'big.py'}:make", steps=3, micro_batch=4)
    got = {}
    for limit in ("600", None):
        extra = {"AUTOTUNE_PROBE_MEMORY_MB": limit} if limit else {}
        out = run_trial_process(cfg.to_dict(), {}, timeout_s=300, threads=1, extra_env=extra)
        got[limit] = (out["outcome"], out.get("cause"), out.get("error"))
    assert got["600"][:2] == ("oom", "oom"), got
    assert got[None][0] == "complete", got


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_out_of_memory_in_the_workloads_setup_is_oom_not_a_failure(tmp_path: Path) -> None:
    """The allocator failing while the workload builds its model (before the first step) is the
    same event as in a step: `oom`, its error said, not `failed (exception)`."""
    from autotune.probe.config import ProbeConfig
    from autotune.process.launcher import run_trial_process

    (tmp_path / "big.py").write_text(BIG_SETUP)
    cfg = ProbeConfig(workload=f"{tmp_path / 'big.py'}:make", steps=3, micro_batch=4)
    extra = {"AUTOTUNE_PROBE_MEMORY_MB": "600"}
    out = run_trial_process(cfg.to_dict(), {}, timeout_s=300, threads=1, extra_env=extra)
    assert (out["outcome"], out["cause"]) == ("oom", "oom"), out
    assert out["summary"] is None
    assert "out of memory before the first step" in out["error"], out["error"]
    assert "DefaultCPUAllocator" in out["error"]
