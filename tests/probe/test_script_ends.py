"""How a training script's run ends, and what its reports may say: a script that leaves its
loop before its planned steps unasked fails (`bad_report`), a negative count or gradient norm
is a bad report, a NaN loss stops it at once, a finite 1e308 loss is not `nonfinite_loss`; and
`autotune probe` runs the script apart, as a trial does, so a script that ends its process
(os._exit) is a failure with JSON on stdout. Real scripts, the real CLI; nothing mocked."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.probe.config import ProbeConfig
from autotune.probe.script import BadReport
from autotune.probe.script_run import run_script

HEAD = "import os, autotune\ntrial = autotune.trial(steps=99, micro_batch=3)\n"


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    def go(body: str, steps: int = 20, **cfg: Any) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(HEAD + textwrap.dedent(body))
        c = ProbeConfig(workload="script:train.py", steps=steps, script=str(script), **cfg)
        t = iter(range(10_000))
        return run_script(c, clock=lambda: next(t) * 0.010)

    return go


def test_a_script_that_leaves_its_loop_early_unasked_fails(run: Callable[..., Any]) -> None:
    body = """
        for step in range(trial.steps):
            if step == 3:
                break
            trial.report(step, loss=1.0, grad_norm=1.0)
        """
    with pytest.raises(BadReport, match="reported 3 of 30 steps and stopped without being") as e:
        run(body, steps=30)
    assert e.value.cause == "bad_report"
    # sys.exit(0) after some of the steps is the same shortfall
    with pytest.raises(BadReport, match="reported 2 of 5 steps"):
        run("trial.report(0, loss=1.0)\ntrial.report(1, loss=1.0)\nraise SystemExit(0)\n", 5)
    # all the steps: complete
    assert run(body.replace("step == 3", "step == 99"), steps=30)["status"] == "ok"


def test_a_script_stopped_by_a_divergence_is_diverged_not_short(run: Callable[..., Any]) -> None:
    body = """
        for step in range(trial.steps):
            trial.report(step, loss=1.0 if step < 2 else 1e6)
            if trial.should_stop:
                break
        """
    summary = run(body, steps=30, divergence={"persist_steps": 3}, telemetry_every=1)
    assert summary["status"] == "diverged" and summary["steps_run"] < 30


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ("trial.report(0, loss=1.0, samples=-16)", r"samples=-16 is not a count"),
        ("trial.report(0, loss=1.0, samples=float('nan'))", r"samples=nan is not a count"),
        ("trial.report(0, loss=1.0, tokens=-1)", r"tokens=-1 is not a count"),
        ("trial.report(0, loss=1.0, grad_norm=-5.0)", r"grad_norm=-5\.0 is negative"),
        (
            "import torch\ntrial.report(0, loss=1.0, grad_norm=torch.tensor(-5.0))",
            r"step=0\): grad_norm=-5\.0 is negative",
        ),
    ],
)
def test_negative_counts_and_gradient_norms_are_bad_reports(
    run: Callable[..., Any], call: str, said: str
) -> None:
    with pytest.raises(BadReport, match=said) as e:
        run(call + "\n", steps=1)
    assert e.value.cause == "bad_report"


def test_a_nan_loss_stops_the_script_at_once(run: Callable[..., Any]) -> None:
    body = """
        import torch
        for step in range(trial.steps):
            bad = step == 5
            v = float('nan') if bad else 1.0
            trial.report(step, loss=torch.tensor(v) if step % 2 else v, grad_norm=1.0)
        """
    summary = run(body, steps=20)  # chunks of 10 steps after the first 3
    assert summary["status"] == "diverged" and summary["divergence_cause"] == "nonfinite_loss"
    assert summary["diverged_at_step"] == 5 and summary["steps_run"] == 6


def test_a_finite_huge_loss_is_not_called_nonfinite(run: Callable[..., Any]) -> None:
    body = """
        for step in range(trial.steps):
            trial.report(step, loss=1.0 if step < 3 else 1e308, grad_norm=1.0)
            if trial.should_stop:
                break
        """
    summary = run(body, steps=20)  # spikes, not yet a verdict: never "nonfinite"
    assert summary["divergence_cause"] != "nonfinite_loss"
    assert summary["divergence_max_loss_ratio"] == 1e308
    assert summary["series"]["loss"][3] == 1e308
    summary = run(body, steps=20, divergence={"persist_steps": 3}, telemetry_every=1)
    assert summary["status"] == "diverged"
    assert summary["divergence_cause"] == "loss_explosion"


def test_a_run_that_ends_inside_an_explosion_is_diverged_at_the_length_it_is_trained(
    run: Callable[..., Any],
) -> None:
    # the loss jumps 10x-100x over its start 8 steps before the end and stays there: too few
    # steps for persistence (75) or a recovery window (300) to close; at the end of the LR
    # schedule (the length the user trains) it ended inside a spike it never recovered from
    body = """
        for step in range(trial.steps):
            trial.report(step, loss=1.0 / (1 + 0.05 * step) if step < 32 else 50.0, grad_norm=1.0)
        """
    ended = run(body, steps=40)
    assert (ended["status"], ended["divergence_cause"]) == ("diverged", "no_recovery")
    assert ended["diverged_at_step"] == 39 and ended["divergence_onset_step"] == 32
    # the same steps as the first rung of a longer schedule: not its end, no verdict yet
    rung = run(body, steps=40, schedule_steps=120)
    assert (rung["status"], rung["divergence_cause"]) == ("ok", None)
    assert rung["divergence_spike_count"] == 8
    # one jump at the last step is a spike, not a verdict
    late = run(body.replace("step < 32", "step < 39"), steps=40)
    assert late["status"] == "ok" and late["divergence_spike_count"] == 1


SPACE = """\
name: apart
workload: {script: train.py}
probe: {steps: 10, micro_batch: 4, device: cpu, threads: 1}
knobs: {lr: 0.01}
"""


@pytest.mark.integration
def test_probe_runs_a_script_apart_and_reports_its_failure(tmp_path: Path) -> None:
    # the script ends the process it runs in: a trial's crash, not the CLI's silent exit
    cause, said = "crash", "exited with status 0 without a summary"
    body = """
        for step in range(trial.steps):
            if step == 3:
                os._exit(0)
            print("step", step)
            trial.report(step, loss=1.0, grad_norm=1.0)
        """
    (tmp_path / "train.py").write_text(HEAD + textwrap.dedent(body))
    (tmp_path / "space.yaml").write_text(SPACE)
    result = CliRunner().invoke(app, ["probe", "--space", str(tmp_path / "space.yaml"), "--json"])
    assert result.exit_code == 2, result.output
    data = json.loads(result.stdout)  # the JSON alone, and the failure in it
    assert (data["status"], data["cause"]) == ("failed", cause)
    assert said in data["error"]
    error = [line for line in result.stderr.splitlines() if line.startswith("autotune: error:")]
    assert len(error) == 1 and said in error[0]
    assert "step 2" in result.stderr  # the script's log, on stderr


@pytest.mark.integration
def test_a_script_that_ends_its_process_after_its_last_report_is_complete(
    tmp_path: Path,
) -> None:
    # os._exit(0) to skip a slow teardown, once every step is reported: its summary is made
    body = """
        for step in range(trial.steps):
            trial.report(step, loss=1.0 / (step + 1), grad_norm=1.0)
        os._exit(0)
        """
    (tmp_path / "train.py").write_text(HEAD + textwrap.dedent(body))
    (tmp_path / "space.yaml").write_text(SPACE)
    result = CliRunner().invoke(app, ["probe", "--space", str(tmp_path / "space.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["status"], data["steps_run"]) == ("ok", 10)


@pytest.mark.integration
def test_repro_runs_a_script_apart(tmp_path: Path) -> None:
    # `repro` runs a workload in its own process by default; a script never: one that ends
    # its process is a failure of its run, not the command's silent exit 0
    body = """
        import random
        for step in range(trial.steps):
            if step == 3 and LEAVE:
                os._exit(0)
            trial.report(step, loss=1.0 / (step + 1) + random.random() * 1e-3, grad_norm=1.0)
        """
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    for leave in (False, True):
        script = HEAD + f"LEAVE = {leave}\n" + textwrap.dedent(body)
        (tmp_path / "train.py").write_text(script)
        result = CliRunner().invoke(app, ["repro", str(space)])
        if not leave:
            assert result.exit_code == 0, result.output
            assert "2 runs in fresh processes" in result.stdout
            assert "REPRODUCIBLE: bitwise identical" in result.stdout
            continue
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("autotune: error: ")
        assert "exited with status 0 without a summary" in line
