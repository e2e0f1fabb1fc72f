"""What a probe's processes leave running (a workload's helper holding their output open) ends
with the probe, which ends when its processes do. A review found a DDP trial whose ranks each
started a helper hang until its time limit (the launcher waited on the ranks' log pipes the
helpers held), and `autotune probe | grep` wait for the helper a one-process probe left."""

from __future__ import annotations

import re
from pathlib import Path

import assets.studies as h
import pytest
from assets import leaving
from typer.testing import CliRunner

from autotune.cli import app
from autotune.probe import ProbeConfig
from autotune.process import launcher, leftovers

pytestmark = pytest.mark.integration


_gone = h.ended


def _helpers(log: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"helper pid (\d+)", log)]


def test_a_ddp_trial_ends_with_its_ranks_and_their_helpers_with_it() -> None:
    cfg = ProbeConfig(
        workload=leaving.workload("spawn"), steps=10, micro_batch=8, device="cpu", world_size=2
    )
    out = launcher.run_trial_process(cfg.to_dict(), {}, timeout_s=120, threads=2)
    assert out["outcome"] == "complete", (out["cause"], out["error"], out["log_tail"][-2000:])
    pids = _helpers(out["log_tail"])
    assert len(pids) == 2, out["log_tail"][-2000:]  # one per rank
    assert all(_gone(pid) for pid in pids), "a rank's helper outlived the trial"


def test_autotune_probe_ends_what_its_probe_left_running(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        f"name: left\nworkload: {{name: {leaving.workload('spawn')}}}\n"
        "probe: {steps: 10, micro_batch: 8, threads: 1}\n"
    )
    result = CliRunner().invoke(app, ["probe", "--space", str(tmp_path / "s.yaml")])
    assert result.exit_code == 0, result.output[-2000:]
    pids = _helpers(result.output)
    assert len(pids) == 1, result.output[-2000:]
    assert _gone(pid := pids[0]), f"the probe's helper {pid} outlived `autotune probe`"
    assert not leftovers.adopt_orphans(False)  # this process adopts orphans no longer
