"""A KeyboardInterrupt the script raises itself is the script's failure (`exception`, named
KeyboardInterrupt), in `autotune probe` and in a study alike; a real SIGINT (Ctrl-C, the
first-report watch) still interrupts the trial.

A review: a plain loop that did `raise KeyboardInterrupt` at step 5 got "failed (crash): the
probe process died from SIGINT" from `autotune probe` and "failed (crash): the probe process
exited with status 70 without a summary" in a study, though the README says a script that
raises fails with the exception's type and first line."""

from __future__ import annotations

import json
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from assets import studies as h
from typer.testing import CliRunner

from autotune.cli import app
from autotune.probe.config import ProbeConfig
from autotune.probe.script import ScriptFailure
from autotune.probe.script_run import run_script

HEAD = (
    "import os, signal, threading, time, autotune\n"
    "trial = autotune.trial(steps=99, micro_batch=3)\n"
)
LOOP = """
for step in range(trial.steps):
    if step == 2 and RAISE:
        raise KeyboardInterrupt(*MESSAGE)
    trial.report(step, loss=1.0 / (step + 1), grad_norm=1.0)
"""


@pytest.fixture(autouse=True)
def terminal_sigint() -> Iterator[None]:
    """SIGINT as in a terminal (it raises KeyboardInterrupt): a test run from a background job
    inherits it ignored, where no Ctrl-C can come (its own test below)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def run(tmp_path: Path, body: str, limit: float | None = None) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent(body))
    c = ProbeConfig(workload="script:train.py", steps=5, script=str(script), first_report_s=limit)
    return run_script(c, lambda _m: None)


@pytest.mark.parametrize("limit", [None, 30.0], ids=["unwatched", "watched"])
@pytest.mark.parametrize(
    ("message", "said"), [((), "raised by the script"), (("stop\nnow",), "stop")]
)
def test_a_keyboard_interrupt_the_script_raises_is_its_failure(
    tmp_path: Path, limit: float | None, message: tuple[str, ...], said: str
) -> None:
    with pytest.raises(ScriptFailure) as e:
        run(tmp_path, f"RAISE, MESSAGE = True, {message!r}\n" + LOOP, limit)
    assert (e.value.cause, e.value.error_type, str(e.value)) == (
        "exception",
        "KeyboardInterrupt",
        said,
    )


def test_with_sigint_ignored_the_scripts_own_interrupt_is_its_failure(tmp_path: Path) -> None:
    """Under `nohup ... &` SIGINT is ignored: no Ctrl-C can come, so a KeyboardInterrupt is the
    script's own (once it escaped as an interrupt and ended the process running the probe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with pytest.raises(ScriptFailure) as e:
        run(tmp_path, "RAISE, MESSAGE = True, ()\n" + LOOP)
    assert (e.value.cause, e.value.error_type) == ("exception", "KeyboardInterrupt")
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # left as it was


@pytest.mark.parametrize("limit", [None, 30.0], ids=["unwatched", "watched"])
def test_a_real_sigint_still_interrupts_the_trial(tmp_path: Path, limit: float | None) -> None:
    # a SIGINT from outside the script's thread, as a Ctrl-C: the trial is interrupted
    body = "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()\ntime.sleep(20)\n"
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, body, limit)


SPACE = """
name: kbint
workload: {script: train.py}
probe: {steps: 10, batch: 4, threads: 1}
budget: {trials: 2, trial_timeout_s: 60}
verify: {top_k: 0}
knobs:
  clip_norm: {low: 0.1, high: 1.0}
"""
# the baseline (no clipping) completes; trial 1 (clip_norm searched) raises
STUDY_RAISE = "RAISE, MESSAGE = trial.recipe.knobs['clip_norm'] > 0, ()\n"


@pytest.mark.integration
def test_probe_and_study_name_the_scripts_keyboard_interrupt(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(HEAD + "RAISE, MESSAGE = True, ()\n" + LOOP)
    (tmp_path / "space.yaml").write_text(SPACE)
    said = "KeyboardInterrupt: raised by the script"
    result = CliRunner().invoke(app, ["probe", "--space", str(tmp_path / "space.yaml"), "--json"])
    assert result.exit_code == 2, result.output
    data = json.loads(result.stdout)
    assert (data["status"], data["cause"], data["error"]) == ("failed", "exception", said)

    (tmp_path / "train.py").write_text(HEAD + STUDY_RAISE + LOOP)
    study = h.autotune(["study", "--space", "space.yaml"], tmp_path, token=h.new_token())
    assert study.returncode == 0, h.explain(study)
    assert f"trial   1  failed (exception): {said}" in study.stdout, h.explain(study)
