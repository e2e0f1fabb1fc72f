"""The trial process: forked by the worker's zygote for its environment, or a fresh process."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import assets.studies as h
import pytest

from autotune import space as sp
from autotune.process import launcher
from autotune.process import zygote as zygote_mod
from autotune.process.zygotes import discard_zygote

MISBEHAVING = """
import os, signal, subprocess, sys, time

from autotune.workloads.mlp import MLPWorkload


class Hang(MLPWorkload):
    def loss(self, model, batch):
        # A grandchild in the probe's process group: the trial time limit must end both.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"grandchild pid {child.pid}", flush=True)
        while True:
            time.sleep(3600)


class Sleep(MLPWorkload):
    def loss(self, model, batch):
        import torch

        if torch.is_grad_enabled():  # in training, after the start (not the held-out reference)
            time.sleep(3600)
        return super().loss(model, batch)


class Segv(MLPWorkload):
    def loss(self, model, batch):
        os.kill(os.getpid(), signal.SIGSEGV)


class Leave(MLPWorkload):
    started = False

    def loss(self, model, batch):
        # A helper left running when the probe ends: it must not outlive the trial.
        if not self.started:
            self.started = True
            child = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(3600)"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            print(f"left pid {child.pid}", flush=True)
        return super().loss(model, batch)


def leave(size="tiny"):
    return Leave(size)


def hang(size="tiny"):
    return Hang(size)


def sleep(size="tiny"):
    return Sleep(size)


def segv(size="tiny"):
    return Segv(size)
"""


pytestmark = pytest.mark.usefixtures("no_zygote_left")  # tests/process/conftest.py


def _probe(steps: int = 20, workload: str | None = None) -> dict[str, Any]:
    space = sp.load("amp", [f"probe.steps={steps}", "probe.precision=fp32"])
    cfg = sp.probe_config(space).to_dict()
    return {**cfg, "workload": workload} if workload else cfg


def _run(
    env_knobs: dict[str, str] | None = None,
    *,
    spare: bool = True,
    timeout_s: float = 120,
    **kw: Any,
) -> dict[str, Any]:
    return launcher.run_trial_process(
        _probe(**kw), env_knobs or {}, timeout_s=timeout_s, threads=1, spare=spare
    )


_gone = h.ended


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.integration
def test_a_second_trial_is_forked_by_the_zygote_without_an_import() -> None:
    first = _run()
    assert first["outcome"] == "complete", first["log_tail"]
    zygote = first["zygote"]
    assert zygote is not None and first["spare"] is False  # started for this trial
    second = _run()
    assert second["outcome"] == "complete", second["log_tail"]
    assert second["zygote"] == zygote and second["spare"] is True
    assert second["summary"]["metrics"]["throughput"] > 0
    fresh = _run(spare=False)
    assert fresh["outcome"] == "complete", fresh["log_tail"]
    assert fresh["zygote"] is None and fresh["spare"] is False
    # From asking for a process to the probe's `start` event: a fresh one imports torch first.
    assert second["start_s"] * 4 < fresh["start_s"], (second["start_s"], fresh["start_s"])

    # Between trials the zygote does nothing.
    before = _cpu_ticks(zygote)
    time.sleep(1.0)
    assert _cpu_ticks(zygote) - before <= 1
    discard_zygote()
    assert _gone(zygote)


@pytest.mark.integration
def test_a_trial_of_another_environment_gets_a_zygote_of_its_own() -> None:
    first = _run()
    assert first["outcome"] == "complete", first["log_tail"]
    assert "NCCL_DEBUG" not in first["fingerprint"]["env"]
    second = _run({"NCCL_DEBUG": "WARN"})
    assert second["outcome"] == "complete", second["log_tail"]
    assert second["zygote"] not in (None, first["zygote"]) and second["spare"] is False
    # The probe runs with the trial's environment knob, set before its zygote imported torch.
    assert second["fingerprint"]["env"].get("NCCL_DEBUG") == "WARN"
    assert _gone(first["zygote"])  # the zygote of the other environment left, being idle
    third = _run({"NCCL_DEBUG": "WARN"})
    assert third["outcome"] == "complete", third["log_tail"]
    assert third["zygote"] == second["zygote"] and third["spare"] is True
    assert third["fingerprint"]["env"].get("NCCL_DEBUG") == "WARN"


@pytest.mark.integration
def test_a_forked_probe_that_hangs_or_crashes_is_reported_and_the_zygote_serves_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)
    hung = _run(timeout_s=6, steps=200, workload=f"{tmp_path / 'misbehaving.py'}:hang")
    zygote = hung["zygote"]
    assert zygote is not None
    assert hung["outcome"] == "failed" and hung["cause"] == "timeout", hung
    # Killed with its process group: the grandchild it started too.
    found = re.search(r"grandchild pid (\d+)", hung["log_tail"])
    assert found, hung["log_tail"]
    assert _gone(int(found.group(1)))

    crashed = _run(workload=f"{tmp_path / 'misbehaving.py'}:segv")
    assert crashed["zygote"] == zygote and crashed["spare"] is True
    assert crashed["outcome"] == "failed" and crashed["cause"] == "crash", crashed
    assert "SIGSEGV" in crashed["error"]

    ok = _run()
    assert ok["zygote"] == zygote and ok["spare"] is True
    assert ok["outcome"] == "complete", ok["log_tail"]

    # A probe dies with its zygote (PR_SET_PDEATHSIG), as a fresh one dies with its worker.
    started, result = threading.Event(), {}

    def sleeper() -> None:
        result.update(
            launcher.run_trial_process(
                _probe(workload=f"{tmp_path / 'misbehaving.py'}:sleep"),
                {},
                timeout_s=120,
                threads=1,
                spare=True,
                on_event=lambda msg: started.set() if msg.get("event") == "start" else None,
            )
        )

    thread = threading.Thread(target=sleeper)
    thread.start()
    assert started.wait(60)
    discard_zygote()
    thread.join(30)
    assert not thread.is_alive()
    assert result["zygote"] == zygote
    assert result["outcome"] == "failed" and result["cause"] == "killed", result


@pytest.mark.integration
@pytest.mark.parametrize("spare", [True, False], ids=["forked", "fresh"])
def test_what_a_probe_leaves_running_ends_with_it(tmp_path: Path, spare: bool) -> None:
    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)
    for _ in range(2 if spare else 1):  # forked: the second is the zygote's child
        out = _run(spare=spare, workload=f"{tmp_path / 'misbehaving.py'}:leave")
        assert out["outcome"] == "complete", out["log_tail"]
        found = re.search(r"left pid (\d+)", out["log_tail"])
        assert found, out["log_tail"]
        assert _gone(int(found.group(1))), "a process the probe started outlived it"
    assert (out["zygote"] is not None) is spare


@pytest.mark.integration
def test_a_dead_or_stuck_zygote_costs_no_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _run()
    assert first["outcome"] == "complete", first["log_tail"]
    killed = first["zygote"]
    os.kill(killed, signal.SIGKILL)
    second = _run()
    assert second["outcome"] == "complete", second["log_tail"]
    assert second["zygote"] != killed

    # A zygote that does not answer a fork request: the trial runs in a fresh process.
    if second["zygote"] is None:  # the dead zygote was found when asked to fork
        second = _run()
    stuck = second["zygote"]
    assert stuck is not None
    monkeypatch.setattr(zygote_mod, "FORK_REPLY_S", 1.0)
    os.kill(stuck, signal.SIGSTOP)
    third = _run()
    assert third["outcome"] == "complete", third["log_tail"]
    assert third["zygote"] is None and third["spare"] is False
    assert _gone(stuck)  # discarded

    # A new zygote was started once that trial's loop had ended; the next trial uses it.
    fourth = _run()
    assert fourth["outcome"] == "complete", fourth["log_tail"]
    assert fourth["zygote"] not in (None, killed, stuck) and fourth["spare"] is True


@pytest.mark.integration
@pytest.mark.parametrize("spare", [False, True], ids=["fresh", "forked"])
def test_an_autotune_folder_in_the_current_folder_does_not_shadow_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spare: bool
) -> None:
    """Run from a checkout with a non-editable install, `python -m` would import the folder's
    autotune/ source tree (without the shipped workloads) instead of the installed package. A
    decoy that fails to import stands in for it here; a workload file beside it is found."""
    (tmp_path / "autotune").mkdir()
    (tmp_path / "autotune" / "__init__.py").write_text("raise ImportError('the decoy')\n")
    (tmp_path / "here_wl.py").write_text(
        "from autotune.workloads import mlp\ndef make(size='tiny'):\n    return mlp.make(size)\n"
    )
    monkeypatch.chdir(tmp_path)
    discard_zygote()
    result = _run(spare=spare, workload=f"{tmp_path / 'here_wl.py'}:make")
    assert result["outcome"] == "complete", result.get("error") or result.get("log_tail")
