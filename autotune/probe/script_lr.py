"""The learning rate of a script's steps, for its `lr` series when `trial.report` is given no
`lr=` (`autotune.probe.script`).

What is recorded is read, never assumed: the learning rate of the first parameter group of the
optimizer autotune knows of. A script that steps its optimizer before its first report reports
after each step: the rate is the one that step ran at (read by a step pre-hook, whether the
scheduler stepped before the report or not). One that reports first reports before each step:
the rate is read at the report, the one the coming step runs at. autotune knows of the
optimizer the recipe built (`Recipe.optimizer`, `lightning.configure_optimizers`) and of the one
handed to `trial.resume`; the first of them is the one read. Without one the step's `lr` is
NaN (nothing recorded): the knob's peak would be a made-up value for a script that warms up or
decays on its own.
"""

from __future__ import annotations

import math
from typing import Any


def first_lr(optimizer: Any) -> float:
    """The learning rate of `optimizer`'s first parameter group (NaN when it has none)."""
    try:
        return float(optimizer.param_groups[0]["lr"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return math.nan


class LrWatch:
    """The learning rate of the optimizer a script trains with, step by step."""

    def __init__(self) -> None:
        self.optimizer: Any = None
        self.stepped: float | None = None  # the rate of its last step
        self.after_step: bool | None = None  # the script reports after its step (first report)

    def watch(self, optimizer: Any) -> None:
        """Read `optimizer`'s learning rate from now on; a second optimizer is not read."""
        if self.optimizer is not None or optimizer is None:
            return
        if not getattr(optimizer, "param_groups", None):
            return
        self.optimizer = optimizer
        register = getattr(optimizer, "register_step_pre_hook", None)
        if register is not None:
            register(self._before_step)

    def _before_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        self.stepped = first_lr(optimizer)

    def value(self) -> float:
        """The learning rate of the step being reported (see the module); NaN when no optimizer
        is known."""
        if self.optimizer is None:
            return math.nan
        if self.after_step is None:
            self.after_step = self.stepped is not None
        if self.after_step and self.stepped is not None:
            return self.stepped
        return first_lr(self.optimizer)
