"""Each step's own `samples=` and `tokens=` of a training script's reports
(`autotune.probe.script_counts`): a short last batch is one short step, not every step."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from autotune.probe.config import ProbeConfig
from autotune.probe.script_counts import StepCounts
from autotune.probe.script_run import run_script

# 39 steps of 16 samples (64 tokens), then a last batch of 1 sample (4 tokens)
SCRIPT = """
import autotune
trial = autotune.trial(steps=99, micro_batch=16)
for i in range(trial.steps):
    n = 16 if i < trial.steps - 1 else 1
    trial.report(i, loss=1.0 / (i + 1), grad_norm=1.0, samples=n, tokens=4 * n)
"""


def _run(tmp_path: Path, steps: int, **cfg: Any) -> dict[str, Any]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    c = ProbeConfig(workload="script:train.py", steps=steps, script=str(script), **cfg)
    t = iter(range(10_000))
    return run_script(c, None, clock=lambda: next(t) * 0.010)


def test_a_short_last_batch_counts_as_one_short_step(tmp_path: Path) -> None:
    summary = _run(tmp_path, 40, micro_batch=16)
    assert summary["samples_seen"] == 39 * 16 + 1 and summary["tokens_seen"] == 4 * (39 * 16 + 1)
    assert (summary["samples_per_step"], summary["tokens_per_step"]) == (16, 64)
    # each step's own count: their mean over 10 ms steps (once: the last step's 1 per step)
    mean = (39 * 16 + 1) / 40
    assert summary["metrics"]["throughput"] == pytest.approx(mean / 0.010)
    assert summary["metrics"]["tokens_per_s"] == pytest.approx(4 * mean / 0.010)
    assert summary["samples_run"] == 39 * 16 + 1


def test_a_continued_run_adds_the_sums_its_shorter_run_saved() -> None:
    short = StepCounts()
    for n in (16, 16, 3):
        short.add(n, None, default_samples=16)
    assert short.seen == (35, 0) and short.per_step == (16, 0)
    longer = StepCounts()
    longer.inherit(3, short.per_step, short.seen)
    longer.add(None, 8, default_samples=16)  # no samples=: the configured batch
    assert longer.seen == (35 + 16, 8) and longer.own_seen == 16
    older = StepCounts()  # a state saved without its sums: per-step counts x steps
    older.inherit(3, (16, 0), None)
    assert older.seen == (48, 0) and older.rate_per_step == (16.0, 0.0)
