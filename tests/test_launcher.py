"""The trial process and its spare: reused only when ready and of the same environment."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune import launcher
from autotune import space as sp
from autotune.probe import ProbeConfig

ASSETS = Path(__file__).parent / "assets"


@pytest.fixture(autouse=True)
def no_spare_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Away from the source tree: `python -m autotune.spare` must import the installed package.
    monkeypatch.chdir(tmp_path)
    yield
    launcher.discard_spare()


def _probe(steps: int = 20) -> dict:
    space = sp.load("amp", [f"probe.steps={steps}", "probe.precision=fp32"])
    return ProbeConfig.from_space(space).to_dict()


def _wait_ready(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spare = dict(launcher._SPARE)
        if spare and spare["ready"].is_set():
            return
        time.sleep(0.1)
    raise AssertionError("the spare did not become ready")


def test_second_trial_takes_the_spare_started_by_the_first() -> None:
    first = launcher.run_trial_process(_probe(), {}, timeout_s=120, threads=1, spare=True)
    assert first["outcome"] == "complete", first["log_tail"]
    assert first["spare"] is False
    assert launcher._SPARE, "a spare is started when the first trial's loop has ended"
    spare_pid = launcher._SPARE["proc"].pid
    _wait_ready()

    second = launcher.run_trial_process(_probe(), {}, timeout_s=120, threads=1, spare=True)
    assert second["outcome"] == "complete", second["log_tail"]
    assert second["spare"] is True
    assert second["summary"]["metrics"]["throughput"] > 0
    # The spare that ran the second trial is gone; a new one waits for a third.
    assert launcher._SPARE["proc"].pid != spare_pid
    launcher.discard_spare()
    assert not launcher._SPARE


def test_a_spare_of_another_environment_is_not_used() -> None:
    launcher.start_spare(launcher.probe_env({}, threads=1))
    _wait_ready()
    out = launcher.run_trial_process(
        _probe(), {"NCCL_DEBUG": "WARN"}, timeout_s=120, threads=1, spare=False
    )
    assert out["outcome"] == "complete", out["log_tail"]
    assert out["spare"] is False
    # The process that ran it was started with the trial's environment knob.
    assert out["fingerprint"]["env"].get("NCCL_DEBUG") == "WARN"


def test_a_spare_still_importing_is_waited_for_or_discarded() -> None:
    env = launcher.probe_env({}, threads=1)
    launcher.start_spare(env)
    proc = launcher._SPARE["proc"]
    assert launcher.take_spare(env, wait_s=0) is None  # still importing torch, no wait allowed
    assert proc.wait(timeout=10) is not None  # and killed
    launcher.start_spare(env)
    proc = launcher._SPARE["proc"]
    assert launcher.take_spare(env, wait_s=60) is proc  # waited for: it started first
    assert proc.poll() is None
    launcher._kill(proc)


def test_a_timed_out_trial_is_killed_even_from_a_spare(tmp_path: Path) -> None:
    env_knobs = {"HSA_AUTOTUNE_TEST_MODE": "hang"}
    probe = {**_probe(200), "workload": f"{ASSETS / 'behaving.py'}:make"}
    launcher.start_spare(launcher.probe_env(env_knobs, threads=1))
    _wait_ready()
    out = launcher.run_trial_process(probe, env_knobs, timeout_s=8, threads=1, spare=True)
    assert out["spare"] is True
    assert out["outcome"] == "failed" and out["cause"] == "timeout"
