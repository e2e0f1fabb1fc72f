"""The study's MLflow experiment: named after the study, of MLflow's training kind (its UI
opens such an experiment on the runs table), its artifacts beside a SQLite store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.tracking.connection import sqlite_path, uri_scheme

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
"""MLflow 3's experiment kind: its UI opens an experiment of kind `custom_model_development` on
the runs table (model training), one of kind `genai_development` (or none) on traces."""


EXPERIMENT_KIND = "custom_model_development"


def ensure_experiment(client: MlflowClient, study_name: str) -> str:
    """The id of the experiment named after the study: created if missing, restored if deleted.

    It is created of MLflow's training kind (TAG_EXPERIMENT_KIND), so that the UI opens on its
    runs; an existing experiment without a kind gets it (one with a kind keeps its own).
    For a SQLite store, a new experiment keeps its artifacts in `mlruns/` next to the database
    file (MLflow's default would be `./mlruns` of whatever folder the driver runs in).
    """
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(study_name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        if TAG_EXPERIMENT_KIND not in (experiment.tags or {}):
            client.set_experiment_tag(
                experiment.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND
            )
        return str(experiment.experiment_id)
    artifact_location = _default_artifact_location(client)
    try:
        return str(
            client.create_experiment(
                study_name,
                artifact_location=artifact_location,
                tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND},
            )
        )
    except MlflowException:
        experiment = client.get_experiment_by_name(study_name)  # created meanwhile
        if experiment is None:
            raise
        return str(experiment.experiment_id)


def _default_artifact_location(client: MlflowClient) -> str | None:
    uri = str(client.tracking_uri)
    if uri_scheme(uri) != "sqlite":
        return None
    path = sqlite_path(uri)
    if path is None or not path.is_absolute():
        return None
    return (path.parent / "mlruns").as_uri()
