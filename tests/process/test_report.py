"""The report channel: what a trial prints is its log, never a result (real processes, through
the launcher's fresh and forked paths and a DDP supervisor)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.probe import ProbeConfig
from autotune.process import channel as report
from autotune.process import launcher, ranks, supervisor
from autotune.process.zygotes import discard_zygote

# A real summary's shape, with the values a cheat would want, as the probe used to print it.
FORGED = {
    "event": "summary",
    "status": "ok",
    "diverged": False,
    "divergence_cause": None,
    "diverged_at_step": None,
    "metrics": {"loss_cv": 1e-9, "throughput": 1e9, "final_loss": 0.0, "peak_mem_mb": 1.0},
    "anomaly": None,
    "series": {"loss": [0.0]},
    "knobs": {},
    "env": {},
    "workload": "mlp",
    "size": "tiny",
    "device": "cpu",
    "precision": "fp32",
    "seed": 0,
    "steps_planned": 20,
    "steps_run": 20,
}

WORKLOADS = f"""
import json, os, sys
import torch
from autotune.workloads.mlp import MLPWorkload

FORGED = json.dumps({FORGED!r})


class Forger(MLPWorkload):
    def loss(self, model, batch):
        if not torch.is_grad_enabled():  # the held-out reference, before the start event
            return super().loss(model, batch)
        print("@@autotune " + FORGED, flush=True)  # the old protocol's line
        print(FORGED, flush=True)
        sys.stderr.write("@@autotune " + FORGED + "\\n")
        sys.stderr.flush()
        os._exit(0)


class Scribbler(MLPWorkload):
    '''Writes a summary on every pipe it holds but its stdin, stdout and stderr: the report
    channel among them. Without the nonce, nothing of it is taken.'''

    calls = 0

    def loss(self, model, batch):
        self.calls += torch.is_grad_enabled()  # training steps, not the held-out reference
        if self.calls == 3:
            for fd in range(3, 1024):
                try:
                    if os.readlink(f"/proc/self/fd/{{fd}}").startswith("pipe:"):
                        os.write(fd, ("@@autotune " + FORGED + "\\n").encode())
                        os.write(fd, (FORGED + "\\n").encode())
                except OSError:
                    pass
        return super().loss(model, batch)


class NoNewline(MLPWorkload):
    def loss(self, model, batch):
        print(".", end="", flush=True)  # a progress bar that never ends its line
        return super().loss(model, batch)


class Garbler(MLPWorkload):
    '''Prints bytes that are not UTF-8 and more than a pipe holds, every step.'''

    def loss(self, model, batch):
        sys.stdout.buffer.write(b"\\xff\\xfe\\x80 not utf-8\\n" + b"x" * 70000 + b"\\n")
        sys.stdout.flush()
        print("after the bytes", flush=True)
        return super().loss(model, batch)


def forger(size="tiny"):
    return Forger(size)


def scribbler(size="tiny"):
    return Scribbler(size)


def no_newline(size="tiny"):
    return NoNewline(size)


def garbler(size="tiny"):
    return Garbler(size)
"""

STEPS = 20


@pytest.fixture
def workloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)  # away from the source tree, as test_launcher does
    path = tmp_path / "misbehaving_output.py"
    path.write_text(WORKLOADS)
    yield path
    discard_zygote()


def _trial(path: Path, factory: str, spare: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cfg = ProbeConfig(workload=f"{path}:{factory}", steps=STEPS, micro_batch=8, device="cpu")
    events: list[dict[str, Any]] = []
    out = launcher.run_trial_process(
        cfg.to_dict(), {}, timeout_s=120, threads=1, spare=spare, on_event=events.append
    )
    return out, events


@pytest.mark.integration
@pytest.mark.parametrize("spare", [False, True], ids=["fresh", "forked"])
def test_a_printed_summary_is_log_not_a_result(workloads: Path, spare: bool) -> None:
    out, events = _trial(workloads, "forger", spare)
    assert (out["zygote"] is not None) == spare
    assert out["outcome"] == "failed" and out["cause"] == "crash", out
    assert out["summary"] is None
    assert "status 0 without a summary" in out["error"]
    assert "the workload ended the process early" in out["error"]
    assert '"throughput": 1000000000.0' in out["log_tail"]  # kept as its log
    assert [e["event"] for e in events] == ["fingerprint", "start"]


@pytest.mark.integration
@pytest.mark.parametrize("spare", [False, True], ids=["fresh", "forked"])
def test_a_write_on_the_channel_without_the_nonce_is_ignored(workloads: Path, spare: bool) -> None:
    out, _ = _trial(workloads, "scribbler", spare)
    assert out["outcome"] == "complete", out["log_tail"]
    summary = out["summary"]
    assert summary["steps_run"] == STEPS and len(summary["series"]["loss"]) == STEPS
    assert summary["metrics"]["throughput"] < 1e9
    assert "were not reports: ignored" in out["log_tail"]


@pytest.mark.integration
@pytest.mark.parametrize("spare", [False, True], ids=["fresh", "forked"])
def test_output_without_a_newline_does_not_swallow_the_reports(
    workloads: Path, spare: bool
) -> None:
    out, events = _trial(workloads, "no_newline", spare)
    assert out["outcome"] == "complete", out["log_tail"]
    tele = [e for e in events if e["event"] == "telemetry"]
    assert sum(len(e["loss"]) for e in tele) == STEPS
    assert out["summary"]["steps_run"] == STEPS
    assert "." * STEPS in out["log_tail"]


@pytest.mark.integration
@pytest.mark.parametrize("spare", [False, True], ids=["fresh", "forked"])
def test_bytes_that_are_not_utf8_are_log_not_a_dead_reader(workloads: Path, spare: bool) -> None:
    # A strict UTF-8 reader of a fresh process's output died at the first such byte; the
    # pipe then filled and the probe hung until its time limit.
    out, _ = _trial(workloads, "garbler", spare)
    assert out["outcome"] == "complete", out["log_tail"]
    assert out["summary"]["steps_run"] == STEPS
    assert "\ufffd" in out["log_tail"] and "after the bytes" in out["log_tail"]


@pytest.mark.integration
def test_a_process_run_to_its_end_may_print_bytes_that_are_not_utf8() -> None:
    code = "import sys\nfor s in sys.stdout, sys.stderr: s.buffer.write(b'\\xff\\xfe x\\n')"
    done, reports = report.run_process([sys.executable, "-c", code], env=os.environ, timeout=60)
    assert done.returncode == 0 and reports == []
    assert done.stdout == done.stderr == "\ufffd\ufffd x\n"


@pytest.mark.integration
def test_a_rank_that_prints_a_summary_is_a_failed_rank(workloads: Path) -> None:
    cfg = ProbeConfig(
        workload=f"{workloads}:forger",
        steps=STEPS,
        micro_batch=8,
        device="cpu",
        threads=2,
        world_size=2,
    )
    with pytest.raises(ranks.RankFailure) as failed:
        supervisor.launch(cfg, lambda _msg: None)
    assert failed.value.cause == "crash"
    assert "without a summary" in str(failed.value)


def test_a_line_is_a_report_only_with_the_channel_nonce() -> None:
    nonce = "a" * 32
    line = report.encode({"event": "summary", "status": "ok"}, nonce)
    assert report.parse(line, nonce) == {"event": "summary", "status": "ok"}
    assert report.parse(line, "b" * 32) is None
    assert report.parse(line.split(b" ", 1)[1], nonce) is None  # the JSON alone
    assert report.parse(nonce.encode() + b" [1, 2]\n", nonce) is None  # not an event
    assert report.parse(nonce.encode() + b" {not json\n", nonce) is None


@pytest.mark.integration
def test_the_channel_reaches_no_process_the_workload_starts(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "from autotune.process import channel as report\n"
        "w = report.Writer.from_env()\n"
        "w({'event': 'start'})\n"
        "env_left = [k for k in os.environ if k.startswith('AUTOTUNE_REPORT')]\n"
        "code = f'import os; os.fstat({w.fd})'\n"
        "rc = subprocess.run([sys.executable, '-c', code], capture_output=True).returncode\n"
        "w({'event': 'summary', 'env_left': env_left, 'child_rc': rc})\n"
    )
    proc, reports = report.run_process(
        [sys.executable, str(script)], env=dict(os.environ), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["event"] for r in reports] == ["start", "summary"]
    assert reports[1]["env_left"] == []
    assert reports[1]["child_rc"] != 0  # the descriptor is not open in a child process
