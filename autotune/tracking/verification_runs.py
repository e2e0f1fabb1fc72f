"""A verification (a configuration re-run over seeds, by the study or `autotune verify`) as an
MLflow run: interval metrics per objective, beside the baseline's, linked to its study and trial.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.numbers import finite
from autotune.tracking.runs import (
    ROLE_VERIFICATION,
    TAG_LOGGED,
    TAG_PARENT,
    TAG_ROLE,
    fingerprint_tags,
)
from autotune.tracking.values import clean_params, clean_tags, log_entities, log_metrics, to_json

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


def log_verification(
    client: MlflowClient,
    experiment_id: str,
    *,
    name: str,
    result: Mapping[str, Any],
    tags: Mapping[str, Any],
    parent_run_id: str | None = None,
    fingerprint: dict[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
    report: Mapping[str, Any] | None = None,
    losses: Mapping[int, Sequence[Any]] | None = None,
) -> str:
    """One verification (a configuration re-run over seeds) as an MLflow run; returns its id.

    Metrics `<metric>.mean`, `.low`, `.high` (95% interval), `diverged_share`, and with a
    baseline the same under `baseline.`; each seed's loss series (`losses`: seed -> the loss
    at each step) as the metric history `loss/seed_<seed>`; tags link it to its study and
    trial (and, in the study's own experiment, make it a child of the study's run)."""
    from mlflow.entities import Metric, RunStatus

    now = int(time.time() * 1000)
    all_tags: dict[str, Any] = {TAG_ROLE: ROLE_VERIFICATION, **tags}
    if parent_run_id:
        all_tags[TAG_PARENT] = parent_run_id
    if fingerprint:
        all_tags.update(fingerprint_tags(fingerprint))
    run = client.create_run(experiment_id, run_name=name, tags=clean_tags(all_tags))
    run_id = str(run.info.run_id)
    metrics: list[Metric] = []

    def add(prefix: str, res: Mapping[str, Any]) -> None:
        share = res.get("diverged_share")
        if share is not None:
            metrics.append(Metric(f"{prefix}diverged_share", float(share), now, 0))
        for metric, iv in (res.get("metrics") or {}).items():
            for part in ("mean", "low", "high"):
                value = finite(iv.get(part))
                if value is not None:
                    metrics.append(Metric(f"{prefix}{metric}.{part}", value, now, 0))

    add("", result)
    for seed, points in sorted((losses or {}).items()):
        for step, raw in enumerate(points):
            value = finite(raw)
            if value is not None:
                metrics.append(Metric(f"loss/seed_{int(seed)}", value, now, step))
    if baseline is not None:
        add("baseline.", baseline)
    log_entities(
        client,
        run_id,
        params=clean_params({"seeds": result.get("seeds"), "n_seeds": result.get("n")}),
    )
    log_metrics(client, run_id, metrics)
    client.log_text(run_id, to_json(report if report is not None else result), "verification.json")
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED), end_time=now)
    client.set_tag(run_id, TAG_LOGGED, "true")
    return run_id
