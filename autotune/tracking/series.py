"""A probe's step series as MLflow metric histories (the loss curve, the gradient norm, ...)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.numbers import finite
from autotune.probe.telemetry import SERIES_NAMES
from autotune.tracking.values import clean_key

if TYPE_CHECKING:
    from mlflow.entities import Metric

#: The prefix of a script's other reported metrics among a summary's series.
EXTRA_PREFIX = "metric."


# Step series of the probe summary -> metric key in MLflow (its own name, but the step time's).
SERIES_KEYS = {name: "step_time_ms" if name == "step_time" else name for name in SERIES_NAMES}


def series_metrics(
    series: Mapping[str, Any], ts: int, summary_names: Iterable[str] = (), first: int = 0
) -> list[Metric]:
    """Step series as metric histories (step = `first` + index); non-finite points are skipped.

    The other metrics a script reports (`trial.report(step, loss, accuracy=...)`, the series
    `metric.accuracy`) are logged under their own names, or as `reported.NAME` where autotune
    logs a metric of that name (`summary_names`: the summary's metrics).

    MLflow 3.17 on SQLite stores NaN and silently clamps inf to 1.8e308, so neither is logged:
    the count of steps with a non-finite loss goes to the metric `nonfinite_steps`.
    """
    from mlflow.entities import Metric

    metrics: list[Metric] = []
    for name, key in SERIES_KEYS.items():
        points = series.get(name)
        if not points:
            continue
        nonfinite = 0
        for step, raw in enumerate(points, start=first):
            value = finite(raw)
            if value is None:
                nonfinite += raw is not None
                continue
            metrics.append(Metric(key, value, ts, step))
        if name == "loss":
            metrics.append(Metric("nonfinite_steps", float(nonfinite), ts, 0))
    taken = {*SERIES_KEYS.values(), "nonfinite_steps", *(summary_names or ())}
    for name, points in series.items():
        if not name.startswith(EXTRA_PREFIX) or not points:
            continue
        key = clean_key(name[len(EXTRA_PREFIX) :])
        key = key if key not in taken else f"reported.{key}"
        metrics += [
            Metric(key, value, ts, step)
            for step, value in enumerate((finite(raw) for raw in points), start=first)
            if value is not None
        ]
    return metrics
