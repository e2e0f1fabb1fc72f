"""An audit in MLflow: `log_audit` writes one as a run of the experiment `autotune-audit`
(metrics per op and pass, the whole result as `audit.json`); `load_audit` reads it back,
checked as `migrate` checks a recorded audit (`autotune.audit_form`)."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from autotune.audit_form import audit_problem, path_text
from autotune.errors import ReproError

EXPERIMENT = "autotune-audit"
ARTIFACT = "audit.json"
_PROGRESS = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def log_audit(result: Mapping[str, Any], tracking_uri: str | None = None) -> str:
    """Log `result` as a run of the experiment `autotune-audit`; return its run id.

    Tags: the fingerprint's `autotune.fp.*`, `autotune.role=audit`, device and dtype. Metrics:
    `<op>.<pass>.max_abs`, `.mean_abs`, `.max_rel`, `.max_scaled`, `.nonfinite`, `.flagged`,
    and `flagged_count`. Artifact: the whole result as `audit.json`.
    """
    from mlflow.entities import Metric, RunStatus

    from autotune import tracking

    uri = tracking.resolve_uri(tracking_uri)
    client = tracking.connect(uri)
    experiment_id = tracking.ensure_experiment(client, EXPERIMENT)
    tags = {
        **tracking.fingerprint_tags(dict(result.get("fingerprint") or {})),
        "autotune.role": "audit",
        "autotune.audit.device": str(result["device"]),
        "autotune.audit.dtype": str(result["dtype"]),
        "autotune.audit.flagged": ",".join(result["flagged"])[:5000] or "none",
    }
    name = f"audit-{result['device']}-{result['dtype']}".replace(":", "")
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    run_id = str(run.info.run_id)
    ts = int(time.time() * 1000)
    metrics: list[Metric] = []
    for e in result["entries"]:
        prefix = f"{e['op']}.{e['pass']}"
        metrics.append(Metric(f"{prefix}.flagged", float(bool(e["flagged"])), ts, 0))
        if e.get("error"):
            continue
        for key in ("max_abs", "mean_abs", "max_rel", "max_scaled", "nonfinite"):
            if e.get(key) is None:  # no error measured (a non-finite output): no metric, not 0
                continue
            value = float(e[key])
            if math.isfinite(value):
                metrics.append(Metric(f"{prefix}.{key}", value, ts, 0))
    metrics.append(Metric("flagged_count", float(len(result["flagged"])), ts, 0))
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000], synchronous=True)
    client.log_param(run_id, "seed", str(result["seed"]))
    client.log_text(run_id, json.dumps(result, indent=2, default=str), ARTIFACT)
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED))
    return run_id


def load_audit(run_id: str, tracking_uri: str | None = None) -> dict[str, Any]:
    """The audit logged as run `run_id` (its `audit.json`), with `run_id` added."""
    from autotune import tracking
    from autotune.repro.compare import get_run

    uri = tracking.resolve_uri(tracking_uri)
    client = tracking.connect(uri)
    get_run(client, run_id, uri)
    saved = os.environ.get(_PROGRESS)
    os.environ[_PROGRESS] = "false"  # no download progress bar on the terminal
    try:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = client.download_artifacts(run_id, ARTIFACT, tmp)
            except Exception as exc:
                raise ReproError(
                    f"run {run_id} in {uri} has no {ARTIFACT}: is it an audit run? "
                    f"({type(exc).__name__})"
                ) from exc
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                raise ReproError(f"run {run_id} in {uri}: cannot read {ARTIFACT}: {exc}") from exc
    finally:
        if saved is None:
            os.environ.pop(_PROGRESS, None)
        else:
            os.environ[_PROGRESS] = saved
    if not isinstance(data, dict) or "entries" not in data:
        raise ReproError(f"run {run_id} in {uri}: {ARTIFACT} is not an audit")
    # migrate's rule for a recorded audit: a malformed entry is named, not a traceback or a
    # ratio of NaN that compares as no difference
    found = audit_problem(data, unmeasured=True)
    if found is not None:
        raise ReproError(f"run {run_id} in {uri}: {ARTIFACT} {path_text(found[0])}: {found[1]}")
    data["run_id"] = run_id
    return data
