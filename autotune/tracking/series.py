"""A probe's step series as MLflow metric histories (the loss curve, the gradient norm, ...)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.numbers import finite
from autotune.probe.telemetry import SERIES_NAMES
from autotune.tracking.values import MAX_KEY, clean_key

if TYPE_CHECKING:
    from mlflow.entities import Metric

#: The prefix of a script's other reported metrics among a summary's series.
EXTRA_PREFIX = "metric."


#: The tag of a trial's run that maps each reported metric logged under another key to that
#: key (JSON `{name: key}`): the name a script reported can be found again.
TAG_METRIC_KEYS = "autotune.metric_keys"


#: The tag of a trial's run that counts, per metric key, the infinite values not logged (JSON).
TAG_METRIC_INFINITE = "autotune.metric_infinite"


# Step series of the probe summary -> metric key in MLflow (its own name, but the step time's).
SERIES_KEYS = {name: "step_time_ms" if name == "step_time" else name for name in SERIES_NAMES}

# The factor from a series' unit in the probe's summary to its key's: the probe keeps the step
# time in seconds (`probe.telemetry.Chunk.step_time`), its key says milliseconds. The other
# series have no unit (a loss, a norm, a learning rate, a loss scale, 0/1 flags).
SERIES_FACTORS = {"step_time": 1000.0}


def series_metrics(
    series: Mapping[str, Any], ts: int, summary_names: Iterable[str] = (), first: int = 0
) -> tuple[list[Metric], dict[str, str]]:
    """Step series as metric histories (step = `first` + index), and the tags that say how the
    script's own metrics were logged (TAG_METRIC_KEYS, TAG_METRIC_INFINITE; absent when none).

    MLflow 3.17 on SQLite stores NaN and silently clamps inf to 1.8e308. autotune's series
    skip both: the count of steps with a non-finite loss goes to the metric `nonfinite_steps`.
    The other metrics a script reports (`trial.report(step, loss, accuracy=...)`, the series
    `metric.accuracy`) keep a point per step: NaN is logged as NaN; an infinite value, which
    MLflow would turn into a huge finite one, is left out and counted in TAG_METRIC_INFINITE.
    """
    from mlflow.entities import Metric

    metrics: list[Metric] = []
    for name, key in SERIES_KEYS.items():
        points = series.get(name)
        if not points:
            continue
        factor = SERIES_FACTORS.get(name, 1.0)
        nonfinite = 0
        for step, raw in enumerate(points, start=first):
            value = finite(raw)
            if value is None:
                nonfinite += raw is not None
                continue
            metrics.append(Metric(key, value * factor, ts, step))
        if name == "loss":
            metrics.append(Metric("nonfinite_steps", float(nonfinite), ts, 0))
    taken = {*SERIES_KEYS.values(), "nonfinite_steps", *(summary_names or ())}
    extras = {n[len(EXTRA_PREFIX) :]: p for n, p in series.items() if n.startswith(EXTRA_PREFIX)}
    keys = extra_keys([n for n, points in extras.items() if points], taken)
    infinite: dict[str, int] = {}
    for name, key in keys.items():
        for step, raw in enumerate(extras[name], start=first):
            point = _point(raw)
            if point is not None and math.isinf(point):
                infinite[key] = infinite.get(key, 0) + 1
            elif point is not None:
                metrics.append(Metric(key, point, ts, step))
    renamed = {name: key for name, key in keys.items() if key != name}
    tags = {TAG_METRIC_KEYS: json.dumps(renamed, sort_keys=True)} if renamed else {}
    if infinite:
        tags[TAG_METRIC_INFINITE] = json.dumps(infinite, sort_keys=True)
    return metrics, tags


def extra_keys(names: Iterable[str], taken: Iterable[str]) -> dict[str, str]:
    """Each of a script's metric names -> its own MLflow key, none of them one of `taken`
    (the keys autotune logs itself) nor another name's: two names never share a history.

    A name MLflow takes is its key; where autotune logs that name, `reported.NAME`; a name MLflow
    cannot take is cleaned (`clean_key`: `acc@1` as `acc_1`); a key already given gets `.2`,
    `.3`, ... Names that are their own keys come first, then the others in sorted order, so the
    mapping depends on the set of names only, not on the order a script reported them in.
    """
    ours = set(taken)
    used, names = set(ours), set(names)
    own = sorted(n for n in names if clean_key(n) == n and n not in ours)
    keys: dict[str, str] = {}
    for name in own + sorted(names.difference(own)):
        base = clean_key(name)
        if base in ours:
            base = clean_key(f"reported.{base}")
        key, n = base, 1
        while key in used:
            n += 1
            key = f"{base[: MAX_KEY - len(str(n)) - 1]}.{n}"
        used.add(key)
        keys[name] = key
    return keys


def _point(raw: Any) -> float | None:
    """A reported value as MLflow takes it (NaN included); None where there is no number (a
    step without a value, as a partial series may have)."""
    if raw is None or isinstance(raw, bool):
        return None if raw is None else float(raw)
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None
