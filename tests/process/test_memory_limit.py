"""Under AUTOTUNE_PROBE_MEMORY_MB a probe's data memory is its live tensors', the same at every
length: a micro-batch that fits for 5 steps fits for 40 (glibc's default mmap threshold let the
heap keep what the steps freed, 5-29 MiB over 40-60 steps of this workload, so what fit depended
on how long the probe ran)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.process import malloc, memory_limit

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "benchmarks" / "workloads" / "long_signal.py"

SCRIPT = """
import json, sys
from autotune.process import memory_limit
if sys.argv[1] == "limited":  # a probe process: the limit and the allocator
    memory_limit.apply()
else:  # a DDP rank: the limit inherited, the allocator set by the rank itself
    memory_limit.settle_allocator()
def vmdata():
    for line in open("/proc/self/status"):
        if line.startswith("VmData"):
            return int(line.split()[1]) / 1024
from autotune.probe import ProbeConfig, run_probe
cfg = ProbeConfig(workload=sys.argv[2] + ":make", size="wide", steps=5, micro_batch=16,
                  knobs={"accum_steps": 4, "lr": 0.1}, threads=1)
run_probe(cfg)
before = vmdata()
run_probe(ProbeConfig(**{**cfg.to_dict(), "steps": 40}))
print(json.dumps({"grew_mb": vmdata() - before}))
"""


def _growth(tmp_path: Path, mode: str) -> float:
    env = {**os.environ, memory_limit.ENV: "4000"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(WORKLOAD)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return float(json.loads(done.stdout.strip().splitlines()[-1])["grew_mb"])


@pytest.mark.integration  # two probe processes
@pytest.mark.skipif(sys.platform != "linux", reason="VmData and glibc's mallopt: Linux")
@pytest.mark.parametrize("mode", ["limited", "rank"])
def test_the_data_memory_does_not_grow_with_the_steps_under_the_limit(
    tmp_path: Path, mode: str
) -> None:
    """`limited`: a probe process (`memory_limit.apply`); `rank`: a DDP rank, which inherits
    the launcher's limit but sets its own allocator (`memory_limit.settle_allocator`)."""
    assert malloc.fixed_mmap_threshold(), "this Linux's C library is glibc"
    # Without the limit's allocator setting the same run kept 5-29 MiB of what its steps freed
    # (measured alone, and beside the rest of the suite); with it, 0.0 in both.
    limited = _growth(tmp_path, mode)
    assert limited <= 1.0, f"under the limit, data memory grew {limited:.1f} MiB over 40 steps"


# A DDP probe under the limit failed as a bare `exception` ("can't start new thread", "Resource
# temporarily unavailable") or a `crash` (glibc's exit 127), never naming the limit, where the
# same probe in one process was `oom` (a black-box review of DDP probes on the CPU).
STARVED = [
    RuntimeError("can't start new thread"),  # Python's threading
    RuntimeError("Resource temporarily unavailable"),  # c10d's store, gloo: pthread_create
]


@pytest.mark.parametrize("e", STARVED, ids=["python", "c++"])
def test_a_thread_that_could_not_start_under_the_limit_is_out_of_memory(
    monkeypatch: pytest.MonkeyPatch, e: RuntimeError
) -> None:
    from autotune.process.ranks import cause_of

    monkeypatch.setenv(memory_limit.ENV, "30")
    message = memory_limit.thread_starved(e)
    assert message is not None and message.startswith(f"out of memory under {memory_limit.ENV}=30")
    assert str(e) in message
    assert cause_of(e) == "oom", "a rank's own failure to start gloo's threads"
    monkeypatch.delenv(memory_limit.ENV)
    assert memory_limit.thread_starved(e) is None, "without the limit: not the limit's doing"
    assert cause_of(e) == "exception"


def test_a_process_glibc_ended_for_a_threads_data_under_the_limit_is_out_of_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autotune.process.rank_failures import death

    tail = ["some log", "cannot allocate memory for thread-local data: ABORT"]
    monkeypatch.setenv(memory_limit.ENV, "8")
    cause, message = death(1, 127, tail)
    assert cause == "oom" and message.startswith(f"rank 1: out of memory under {memory_limit.ENV}")
    assert memory_limit.crash_starved("\n".join(tail[:1])) is None, "another crash stays one"
    monkeypatch.delenv(memory_limit.ENV)
    assert death(1, 127, tail)[0] == "crash"
