"""NumPy numbers in `trial.report` (autotune.probe.script_values): a real scalar or a 0-d array
is a number, an integer one a step; anything else is refused naming its type. A script run in
this process with runpy, as the other script tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.probe.config import ProbeConfig
from autotune.probe.script import BadReport
from autotune.probe.script_run import run_script

HEAD = "import numpy as np, autotune\ntrial = autotune.trial(steps=99, micro_batch=3)\n"


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    def go(body: str, steps: int = 4) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(HEAD + textwrap.dedent(body))
        c = ProbeConfig(workload="script:train.py", steps=steps, script=str(script))
        return run_script(c)

    return go


def test_numpy_scalars_and_0d_arrays_are_numbers_and_steps(run: Callable[..., Any]) -> None:
    body = """
        for i in range(trial.steps):
            trial.report(
                np.int64(i) if i % 2 else np.array(i, dtype=np.int32),
                loss=np.float32(4.0 - i) if i % 2 else np.array(4.0 - i),
                grad_norm=np.float16(1.5),
                samples=np.int64(3),
                acc=np.float32(0.25),
            )
        """
    summary = run(body)
    assert summary["status"] == "ok" and summary["steps_run"] == 4
    assert summary["series"]["loss"] == pytest.approx([4.0, 3.0, 2.0, 1.0])
    assert summary["series"]["grad_norm"] == pytest.approx([1.5] * 4)
    assert summary["series"]["metric.acc"] == pytest.approx([0.25] * 4)


def test_a_numpy_nan_loss_stops_the_run_at_once(run: Callable[..., Any]) -> None:
    body = """
        for i in range(trial.steps):
            trial.report(i, loss=np.float32("nan") if i == 1 else np.float32(1.0))
            if trial.should_stop:
                break
        """
    summary = run(body, steps=30)
    assert (summary["status"], summary["divergence_cause"]) == ("diverged", "nonfinite_loss")
    assert summary["steps_run"] == 2


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ("trial.report(np.float64(0), loss=1.0)", r"step must be an int.*not a numpy.float64"),
        ("trial.report(np.array([0]), loss=1.0)", r"step must be an int.*not a numpy.ndarray"),
        ("trial.report(0, loss=np.array([1.0, 2.0]))", r"is not a number \(a numpy.ndarray\)"),
        ("trial.report(0, loss=np.bool_(True))", r"is not a number \(a numpy.bool"),
        ("trial.report(0, loss=1.0, grad_norm='1')", r"is not a number \(a str\)"),
    ],
)
def test_what_is_not_a_number_is_refused_naming_its_type(
    run: Callable[..., Any], call: str, reason: str
) -> None:
    with pytest.raises(BadReport, match=reason):
        run(call + "\n")
