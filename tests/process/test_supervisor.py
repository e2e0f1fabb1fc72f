"""How the DDP launcher names a failure of its ranks. A review found a rank that left early with
status 0 (a workload's os._exit(0)) unnamed: the trial's error was its peer's gloo 'Connection
reset by peer', which only follows from it; and a hang named by rank 0's timeout alone."""

from __future__ import annotations

import pytest
from assets import leaving

from autotune.probe import ProbeConfig
from autotune.process.entry import run as run_probe
from autotune.process.ranks import COMM_TIMEOUT_ENV, CommError, RankFailure


@pytest.mark.integration  # starts the ranks' processes
def test_a_rank_that_exits_0_early_is_the_cause_not_its_peers_error() -> None:
    cfg = ProbeConfig(
        workload=leaving.workload("exit0"), steps=10, micro_batch=8, device="cpu", world_size=2
    )
    with pytest.raises(RankFailure) as info:
        run_probe(cfg)
    assert info.value.cause == "crash"
    assert str(info.value).startswith("rank 1 exited with status 0 without a summary"), info.value


@pytest.mark.integration  # starts the ranks' processes
def test_a_hang_names_the_rank_that_went_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMM_TIMEOUT_ENV, "6")
    cfg = ProbeConfig(
        workload=leaving.workload("hang1"), steps=10, micro_batch=8, device="cpu", world_size=2
    )
    with pytest.raises(CommError) as info:
        run_probe(cfg)
    assert info.value.cause == "comm_hang"
    # rank 0's timed-out all-reduce is the evidence; rank 1, which went silent, is the cause
    assert str(info.value).startswith("rank 1 hung"), info.value
    assert "rank 0: " in str(info.value), info.value
