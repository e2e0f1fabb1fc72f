"""What a probe process reported of its steps before it failed: the telemetry events' series,
kept by the launcher, so that a trial that raised, crashed, was killed or timed out still shows
its loss curve up to there (the summary, which holds the whole series, never came).

Nothing a probe sends is trusted: an event whose steps do not follow the ones kept, whose
series are not lists of numbers of one length, or past `MAX_STEPS`, ends the keeping (what was
kept stays)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from autotune.probe.telemetry import SERIES_NAMES

#: The series kept, as the telemetry events name them (the summary's `series` keys).
NAMES: Final[tuple[str, ...]] = SERIES_NAMES

#: At most this many steps are kept (a probe's own limit on steps is far below it).
MAX_STEPS: Final[int] = 2_000_000


class PartialSeries:
    """The telemetry events' series, in step order from the first event's `first_step`."""

    def __init__(self) -> None:
        self.first_step: int | None = None
        self.series: dict[str, list[float | None]] = {}
        self.steps = 0
        self.broken = False

    def add(self, msg: Mapping[str, Any]) -> None:
        """Keep one telemetry event's steps, if they follow the ones kept."""
        if self.broken:
            return
        first = msg.get("first_step")
        parts = {n: msg.get(n) for n in NAMES if n in msg}
        lengths = {len(v) for v in parts.values() if isinstance(v, list)}
        ok = (
            isinstance(first, int)
            and not isinstance(first, bool)
            and first >= 0
            and "loss" in parts
            and all(isinstance(v, list) for v in parts.values())
            and len(lengths) == 1
        )
        start = first if self.first_step is None else self.first_step + self.steps
        if not ok or first != start or self.steps + max(lengths) > MAX_STEPS:
            self.broken = True
            return
        if self.first_step is None:
            self.first_step = first
        n = max(lengths)
        for name in NAMES:
            values = parts.get(name)
            kept = self.series.setdefault(name, [None] * self.steps)
            kept.extend([_number(v) for v in values] if isinstance(values, list) else [None] * n)
        self.steps += n

    def record(self) -> dict[str, Any] | None:
        """{"first_step", "steps", "series"} of what was kept; None when nothing was."""
        if not self.steps or self.first_step is None:
            return None
        series = {n: v for n, v in self.series.items() if any(x is not None for x in v)}
        return {"first_step": self.first_step, "steps": self.steps, "series": series}


def _number(v: Any) -> float | None:
    """A reported value as a float (True/False as 1/0: `clipped`, `skipped`); None for anything
    else. Non-finite numbers are kept: a NaN loss is what the run did."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return float(v)
    return None
