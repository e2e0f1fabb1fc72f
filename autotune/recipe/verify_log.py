"""The MLflow run of `autotune verify`: the store it is logged to (opened before any probe runs)
and the run itself, under the recipe's study's run when that store and run are the recipe's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.recipe.file import Recipe


def open_store(recipe: Recipe, tracking_uri: str | None) -> tuple[str, Any]:
    """The MLflow store a verification is logged to, connected (a TrackingError naming it when
    a store the user named does not answer): `tracking_uri`, else $MLFLOW_TRACKING_URI, else
    the recipe's own store when it answers from here, else `sqlite:///mlflow.db` in this
    folder. Opened before any probe runs, so an unreachable store costs no compute."""
    import os

    from autotune import tracking
    from autotune.errors import TrackingError

    mlflow_src = (recipe.source.get("mlflow") or {}) if recipe.source else {}
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri and _reachable(mlflow_src.get("tracking_uri")):
        own = tracking.resolve_uri(mlflow_src.get("tracking_uri"))
        try:
            return own, tracking.connect(own)
        except TrackingError:
            pass  # the study's store is not reachable from here: this folder's
    uri = tracking.resolve_uri(uri)
    return uri, tracking.connect(uri)


def log_report(
    recipe: Recipe,
    report: Mapping[str, Any],
    tracking_uri: str | None,
    store: tuple[str, Any] | None = None,
) -> str:
    """Log a recipe's verification to MLflow; returns the run id. `store`: `open_store`'s,
    else opened here from `tracking_uri` (then the run is a child of the study's run, in the
    study's experiment, when the store is the recipe's own; else in `autotune-verify`)."""
    from autotune import tracking

    mlflow_src = (recipe.source.get("mlflow") or {}) if recipe.source else {}
    uri, client = store or open_store(recipe, tracking_uri)
    parent = None
    experiment_id = None
    # The recipe records the study's store redacted: the same store when this is its redaction.
    own = uri == mlflow_src.get("tracking_uri") or tracking.redact(uri) == mlflow_src.get(
        "tracking_uri"
    )
    src = recipe.source or {}
    if own and mlflow_src.get("experiment_id"):
        try:
            client.get_experiment(mlflow_src["experiment_id"])
            experiment_id = str(mlflow_src["experiment_id"])
            parent = mlflow_src.get("study_run_id")
            if parent and not _study_run_of(client, str(parent), src.get("study")):
                experiment_id, parent = None, None
        except Exception:
            experiment_id = None
    if experiment_id is None:
        experiment_id = tracking.ensure_experiment(client, "autotune-verify")
    tags = {
        tracking.TAG_STUDY: src.get("study", ""),
        tracking.TAG_VERIFIED_TRIAL: str(src.get("trial", "")),
        "autotune.recipe": recipe.name,
        "autotune.recipe.fp_hash": recipe.fingerprint_hash or "",
        "autotune.fp_drift": ", ".join(d["field"] for d in report.get("drift", [])) or "none",
        # another configuration than the trial's: its run says so beside the trial's name
        "autotune.edited": ", ".join(report.get("edited") or []) or "none",
    }
    return tracking.log_verification(
        client,
        experiment_id,
        name=f"verify-{recipe.name}",
        result=report["recipe_result"],
        baseline=report.get("baseline_result"),
        tags=tags,
        parent_run_id=parent,
        fingerprint=report.get("fingerprint"),
        report={k: v for k, v in report.items() if k != "loss_series"},
        losses={int(seed): v for seed, v in (report.get("loss_series") or {}).items()},
    )


def _study_run_of(client: Any, run_id: str, study: Any) -> bool:
    """Whether the run the recipe names as its study's is that study's: a recipe whose
    `source.study` was edited (or names a study whose run is another's) is not logged under a
    study it did not come from. A run without the study's tag is taken at its word."""
    from autotune import tracking

    try:
        named = client.get_run(run_id).data.tags.get(tracking.TAG_STUDY)
    except Exception:
        return False  # the run is gone from the store: no parent to log under
    return named is None or named == str(study or "")


def _reachable(uri: Any) -> bool:
    """A sqlite store whose file exists here, or a server URI (checked when connecting)."""
    if not isinstance(uri, str) or not uri:
        return False
    if uri.startswith("sqlite:///"):
        from pathlib import Path

        return Path(uri[len("sqlite:///") :]).is_file()
    if uri.startswith("file:"):
        return False
    return "://" in uri and "***" not in uri
