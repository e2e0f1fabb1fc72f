"""This machine's load while a command's probes ran (`verify`, `migrate`): the 1-minute load
average at the start and the end, and a line that says when other work shared the machine. A
throughput measured beside other work reads lower than the machine gives a job alone; the recipe
and the baseline, run interleaved by seed, share the load alike, but a number set against one
measured elsewhere or earlier (a promise, the source machine's) does not."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def load_now() -> dict[str, Any]:
    """The load at a command's start: `{"start": 1-minute load average, "cores": CPUs}`."""
    return {"start": os.getloadavg()[0], "cores": os.cpu_count()}


def load_done(load: Mapping[str, Any]) -> dict[str, Any]:
    """`load` (from `load_now`) with the load at the end added."""
    return {**load, "end": os.getloadavg()[0]}


def load_line(load: Mapping[str, Any] | None, threads: Any, what: str) -> str | None:
    """The report's line on the load while `what` ran (e.g. "the check"), busy when above its
    own `threads` (+ 0.5); None without a measured start (an older report)."""
    if not load or load.get("start") is None:
        return None
    start, end, cores = float(load["start"]), float(load.get("end") or 0.0), load.get("cores")
    own = int(threads or 1)
    text = (
        f"Load average here (1 minute): {start:.2f} at the start of {what}, {end:.2f} at its "
        f"end, on {cores} core(s)"
    )
    if max(start, end) > own + 0.5:
        text += (
            f": more than its own {own} thread(s), so other work shared this machine and the "
            "throughput measured here is lower than it gives a job alone (the recipe and the "
            "baseline, interleaved by seed, shared that load alike)"
        )
    return text + "."
