"""When a probe stops, and what its end decides: ``divergence.stop_early`` (stop at the verdict,
never, or only on a non-finite loss) and the verdict of a run that ran to the end of its LR
schedule (the length the user trains), which may find one (it ended inside a spike) or, when
every run is carried on, withdraw one of a trend whose loss came back
(``DivergenceMonitor.at_end`` and ``recovered_at_end``).

Pure Python: this module must not import torch, ray, mlflow or optuna.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.probe.divergence import DivergenceMonitor


def stop_mode(value: Any) -> bool | str:
    """``divergence.stop_early`` checked: stop at the verdict (True), never (False), or only
    when the loss is non-finite ("nonfinite": the baseline, which runs the whole length it is
    compared at); ValueError otherwise."""
    if value is None:
        return True
    if isinstance(value, bool) or value == "nonfinite":
        return value
    raise ValueError(
        f"probe.divergence.stop_early must be true, false or 'nonfinite', not {value!r}"
    )


def judge_end(
    monitor: DivergenceMonitor,
    found: tuple[str, int] | None,
    stop_early: bool | str,
    held_out: Callable[[], float | None] | None = None,
) -> tuple[str, int] | None:
    """The verdict of a run that ran to the end of its LR schedule (the length the user trains)
    with `found` its verdict so far (cause, step): one it ended in (``at_end``; its held-out
    loss, when `held_out` measures one, judges a spike too late for ``END_STEPS``), or a trend
    verdict withdrawn when every run is carried on (`stop_early` false) and the loss came back,
    in training and on the held-out set when `held_out` measures it (``recovered_at_end``),
    else `found`."""
    if found is None:
        return monitor.at_end(held_out)
    if stop_early is False and monitor.recovered_at_end(held_out) is not None:
        return None
    return found
