"""What MLflow accepts: its limits on keys, params, tags and batches, and values cleaned and cut
to fit them; batched logging of entities and metrics."""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient


# MLflow's limits (mlflow/utils/validation.py in 3.17).
MAX_PARAM_VALUE = 6000


MAX_TAG_VALUE = 8000


MAX_KEY = 250


MAX_METRICS_PER_BATCH = 1000


MAX_PARAMS_TAGS_PER_BATCH = 100


def bool_str(value: Any) -> str:
    return "true" if value else "false"


def plain(value: Any) -> Any:
    """A JSON-safe scalar: non-finite floats become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    try:
        return json_safe(value.item())  # numpy scalars
    except AttributeError:
        return str(value)


def to_json(value: Any) -> str:
    """Strict JSON (NaN/inf as strings, so browsers can parse it), indented."""
    return json.dumps(json_safe(value), indent=2, sort_keys=True, allow_nan=False) + "\n"


_BAD_KEY_CHARS = re.compile(r"[^/\w.\- ]")


def clean_key(key: Any) -> str:
    """A valid MLflow param/metric/tag key: safe characters, no '..' or leading '/', ≤250."""
    text = _BAD_KEY_CHARS.sub("_", str(key)).strip()
    parts = [p for p in text.split("/") if p not in ("", ".", "..")]
    text = "/".join(parts) or "_"
    if posixpath.normpath(text) != text:
        text = text.replace("/", "_")
    return text[:MAX_KEY]


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = "...[truncated]"
    return text[: limit - len(marker)] + marker


def param_value(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        text = json.dumps(json_safe(value), sort_keys=True)
    else:
        text = str(value)
    return truncate(text, MAX_PARAM_VALUE)


def clean_params(params: Mapping[str, Any]) -> dict[str, str]:
    return {clean_key(k): param_value(v) for k, v in params.items()}


def clean_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    return {clean_key(k): truncate(str(v), MAX_TAG_VALUE) for k, v in tags.items()}


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def log_entities(
    client: MlflowClient,
    run_id: str,
    *,
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, Any] | None = None,
) -> None:
    from mlflow.entities import Param, RunTag

    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in clean_tags(tags or {}).items()]
    for chunk in chunks(param_list, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=chunk, synchronous=True)
    for chunk in chunks(tag_list, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, tags=chunk, synchronous=True)


def log_metrics(client: MlflowClient, run_id: str, metrics: Sequence[Metric]) -> None:
    for chunk in chunks(metrics, MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=chunk, synchronous=True)
