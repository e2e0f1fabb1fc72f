"""What a training script reports at the edges (black-box review bb5, B2/B11/B12): a loss that is
negative throughout (an NLL) has a `loss_drop` and a `loss_cv`, so the default `loss_drop >=
0.05` constraint judges what it learned; one finite 1e300 loss leaves the stability metrics a
number (the noise it is), not NaN; a per-step count past any machine's (`samples=10**30`) is a
bad report naming the field; `sys.exit("message")` fails with status 1 and the message. Real
scripts run by `run_script`; the metric functions on their own where the arithmetic is the
point."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.probe import metrics as m
from autotune.probe import safe_stats
from autotune.probe.config import ProbeConfig
from autotune.probe.script import BadReport, ScriptFailure
from autotune.probe.script_run import run_script
from autotune.probe.script_values import MAX_COUNT

HEAD = "import sys, autotune\ntrial = autotune.trial(steps=99, micro_batch=3)\n"
# a loss that learns: 1 + 2 exp(-step / 10), with a small period-2 wiggle (finite loss_cv)
LOSS = "1.0 + 2.0 * 2.718281828 ** (-step / 10) + 0.01 * (-1) ** step"


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    def go(body: str, steps: int = 40) -> dict[str, Any]:
        script = tmp_path / "train.py"
        script.write_text(HEAD + textwrap.dedent(body))
        c = ProbeConfig(workload="script:train.py", steps=steps, script=str(script))
        t = iter(range(10_000))
        return run_script(c, clock=lambda: next(t) * 0.010)

    return go


def loop(loss: str, **extra: str) -> str:
    more = "".join(f", {k}={v}" for k, v in extra.items())
    return (
        "for step in range(trial.steps):\n"
        f"    trial.report(step, loss={loss}, grad_norm=1.0{more})\n"
    )


# ----- B2: a loss that is not positive -----


def test_relative_drop_is_one_minus_the_ratio_for_a_positive_loss_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    for first, last in rng.uniform(0.01, 10.0, size=(200, 2)):
        assert safe_stats.relative_drop(first, last) == 1.0 - last / first
    assert safe_stats.relative_drop(-2.51, -2.99) == pytest.approx(0.48 / 2.51)
    assert safe_stats.relative_drop(-2.0, -1.0) == pytest.approx(-0.5)  # went up: negative
    assert safe_stats.relative_drop(-3.0, -3.0) == 0.0
    assert math.isnan(safe_stats.relative_drop(0.0, -1.0))  # no size to be relative to
    assert math.isnan(safe_stats.relative_drop(math.nan, 1.0))


def test_a_negative_loss_script_that_learns_passes_the_default_loss_drop(
    run: Callable[..., dict[str, Any]],
) -> None:
    # the same run shifted by -4 (a Gaussian NLL's constant): it learned exactly as much
    shifted = run(loop(f"{LOSS} - 4.0"))
    plain = run(loop(LOSS))
    for s in (shifted, plain):
        assert s["status"] == "ok", s
    neg, pos = shifted["metrics"], plain["metrics"]
    assert neg["initial_loss"] < 0 and neg["final_loss"] < 0
    expected = (neg["initial_loss"] - neg["final_loss"]) / abs(neg["initial_loss"])
    assert neg["loss_drop"] == pytest.approx(expected)
    assert neg["loss_drop"] >= 0.05  # the default constraint holds: it learned
    assert math.isfinite(neg["loss_cv"]) and neg["loss_cv"] > 0
    # what does not depend on the level is unchanged by the shift
    assert neg["noise_per_drop"] == pytest.approx(pos["noise_per_drop"], rel=1e-9)
    assert pos["loss_drop"] == 1 - pos["final_loss"] / pos["initial_loss"]


def test_loss_cv_of_a_negative_level_is_relative_to_its_size() -> None:
    loss = 3.0 + 0.1 * (-1.0) ** np.arange(60)
    assert m.loss_cv(-loss) == pytest.approx(m.loss_cv(loss), rel=1e-12)


# ----- B11: one finite overflow, and counts no machine processes -----


def test_one_finite_1e300_loss_leaves_the_stability_metrics_a_number() -> None:
    loss = 1.0 + 2.0 * np.exp(-np.arange(40) / 10) + 0.01 * (-1.0) ** np.arange(40)
    huge = loss.copy()
    huge[32] = 1e300
    with np.errstate(all="raise"):  # no overflow on the way
        cv, npd = m.loss_cv(huge), m.noise_per_drop(huge)
    assert math.isfinite(cv) and math.isfinite(npd)
    assert npd > 1e250 and cv > 1e250  # the noise it is: the worst of any finite run
    assert m.spike_count(huge) == 1
    # an ordinary series: exactly numpy's plain std and mean
    tail = loss[20:]
    assert safe_stats.std(tail) == float(np.std(tail))
    assert safe_stats.mean(tail) == float(np.mean(tail))
    assert safe_stats.mean(np.array([1e308, 1e308])) == pytest.approx(1e308)
    assert math.isnan(safe_stats.std(np.array([1.0, math.inf])))  # not finite: not rescaled


def test_a_script_with_one_1e300_loss_keeps_its_noise_per_drop(
    run: Callable[..., dict[str, Any]],
) -> None:
    s = run(loop(f"1e300 if step == 32 else {LOSS}"))
    assert s["status"] == "ok", s
    assert math.isfinite(s["metrics"]["noise_per_drop"]) and math.isfinite(s["metrics"]["loss_cv"])


@pytest.mark.parametrize("field", ["samples", "tokens"])
def test_a_count_no_machine_processes_in_a_step_is_a_bad_report(
    run: Callable[..., dict[str, Any]], field: str
) -> None:
    with pytest.raises(BadReport) as e:
        run(loop(LOSS, **{field: "10**30"}))
    text = str(e.value)
    assert text.startswith(f"trial.report(step=0): {field}=1000000000000000000000000000000 ")
    assert "optimizer step" in text and "1e+12" in text
    ok = run(loop(LOSS, **{field: str(int(MAX_COUNT))}))  # the bound itself is a count
    assert ok["status"] == "ok"


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_or_blank_metric_name_is_a_bad_report(
    run: Callable[..., dict[str, Any]], name: str
) -> None:
    """A name with nothing in it names no series: refused, not logged under a made-up key."""
    with pytest.raises(BadReport) as e:
        run(f"for step in range(trial.steps):\n    trial.report(step, 1.0, **{{{name!r}: 1.0}})\n")
    assert str(e.value).startswith("trial.report(step=0): a metric name is empty or blank")


# ----- B12: sys.exit("message") -----


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("'finished all steps but exiting 1'", "status 1: finished all steps but exiting 1"),
        ("3", "status 3"),
        ("True", "status 1"),
    ],
)
def test_sys_exit_with_a_message_is_status_1_and_the_message(
    run: Callable[..., dict[str, Any]], code: str, said: str
) -> None:
    with pytest.raises(ScriptFailure) as e:
        run(loop(LOSS) + f"sys.exit({code})\n")
    assert str(e.value) == f"the script exited with {said}"
