"""A small space file's text and the helpers that edit it and read its load errors, for the
tests of `autotune.space` (tests/space/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import space as sp
from autotune.errors import AutotuneError, SpaceError

# Line numbers in the assertions below are found by searching the text, so editing BASE keeps
# them right; each edit of BASE must match exactly once.
BASE = """\
name: demo
description: a space for the tests
workload: {name: mlp, size: tiny}
probe:
  steps: 30
  precision: fp32
objectives:
  - {metric: loss_cv, direction: minimize}
  - {metric: throughput, direction: maximize}
knobs:
  lr: {low: 0.0001, high: 0.01, log: true}
  clip_norm: 1.0
  warmup_steps: {low: 0, high: 20, step: 5}
env:
  NCCL_ALGO: {choices: [Ring, Tree]}
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} must occur once"
    return text.replace(old, new)


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line containing `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]


def load_error(path: Path, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(SpaceError) as info:
        sp.load(path, overrides)
    message = str(info.value)
    assert "\n" not in message, "an error is one line"
    assert isinstance(info.value, AutotuneError)
    return message
