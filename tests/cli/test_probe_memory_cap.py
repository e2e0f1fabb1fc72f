"""`autotune probe` honours AUTOTUNE_PROBE_MEMORY_MB as a trial does (a black-box review: it
checked the value, then ran the probe in its own unlimited process and said it fit). Under the
variable the probe runs in a process of its own, limited; its result says the threads it ran
with, not the command's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from assets import studies as h
from assets.big_setup import BIG_SETUP
from assets.cli import invoke

from autotune import space as sp
from autotune.cli.probe import planned_threads


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_probe_runs_under_the_memory_limit_a_trial_gets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.py").write_text(BIG_SETUP)
    space = h.mlp_space("cap", trials=1, steps=10).replace(
        "{name: mlp, size: tiny}", f"{{name: '{tmp_path / 'big.py'}:make', size: tiny}}"
    )
    h.write(tmp_path, space)
    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", "600")
    capped = invoke("probe", "--space", "space.yaml")
    assert capped.exit_code == 2, capped.output
    assert "(oom)" in capped.stderr and "out of memory before the first step" in capped.stderr

    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", "4000")
    fits = invoke("probe", "--space", "space.yaml", "--json")
    assert fits.exit_code == 0, fits.output
    result = json.loads(fits.stdout)
    assert result["status"] == "ok", result
    planned = planned_threads(sp.load(tmp_path / "space.yaml"))
    assert result["threads"] == planned, "the threads the probe process was given (a trial's)"


DDP_SPACE = """\
name: ddpcap
workload: {name: mlp, size: tiny}
probe: {steps: 10, batch: 16, world_size: 2, device: cpu}
verify: {top_k: 0}
knobs:
  bucket_cap_mb: {low: 1.0, high: 100.0, log: true}
"""


@pytest.mark.integration
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA as Linux counts it")
def test_a_ddp_probe_fits_where_one_process_does_and_is_oom_naming_the_limit_where_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's four reader threads took 8 MiB of stack each from the limit: at 30 MiB
    the DDP probe failed with "can't start new thread" (cause exception) where one process fit.
    At 1 MiB no thread fits: `oom`, naming the variable, as the one-process probe's is."""
    monkeypatch.chdir(tmp_path)
    h.write(tmp_path, DDP_SPACE)
    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", "30")
    fits = invoke("probe", "--space", "space.yaml", "--json")
    assert fits.exit_code == 0, fits.output
    assert json.loads(fits.stdout)["status"] == "ok"

    monkeypatch.setenv("AUTOTUNE_PROBE_MEMORY_MB", "1")
    capped = invoke("probe", "--space", "space.yaml", "--json")
    assert capped.exit_code == 2, capped.output
    failed = json.loads(capped.stdout)
    assert failed["cause"] == "oom", failed
    assert "out of memory under AUTOTUNE_PROBE_MEMORY_MB=1" in failed["error"], failed
