"""A trial's outcome, one enum for every layer: how a probe run as a trial (a screen trial, a
rung, a verification seed, a recipe's run) ended.

`complete`: it trained its steps (the probe's `ok`); `diverged`: the probe found a divergence (a
result, not an error); `oom`: it ran out of memory; `failed`: it gave no result (an exception, a
crash, a timeout, a worker lost). The process made it from the probe's `ProbeStatus`
(`autotune.process.launcher`); the stores (trials/*.json, Optuna's attributes, MLflow's tags)
hold the value, a plain string, and `Outcome(value)` reads it back. A member is a `str` equal to
its value, so a record read back from JSON compares equal to it; it prints as its value too.
"""

from __future__ import annotations

from enum import Enum

from autotune.probe.summary import ProbeStatus


class Outcome(str, Enum):
    """How a trial's probe ended (see the module)."""

    COMPLETE = "complete"
    DIVERGED = "diverged"
    OOM = "oom"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def of_status(cls, status: str) -> str:
        """The outcome of a probe that ended with `status` (`ProbeStatus`): `ok` is complete,
        `diverged` and `oom` are themselves; a status of no known kind is passed on as it is."""
        return cls.COMPLETE.value if status == ProbeStatus.OK.value else status


#: The outcomes that measured the probe's metrics: all but `failed`.
MEASURED = (Outcome.COMPLETE, Outcome.DIVERGED, Outcome.OOM)
#: The outcomes that broke the run (what the `diverged` objective counts).
BROKE = (Outcome.DIVERGED, Outcome.OOM)
