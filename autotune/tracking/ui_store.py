"""What `autotune ui` opens: a tracking store MLflow's server can serve, and the study's
experiment in it.

Checked before the server starts, in one line each: MLflow's server given a corrupt SQLite
file or an unknown URI scheme printed two tracebacks and exited, and a study's recorded
experiment id was linked in whatever store --tracking-uri named (experiment 1 of another store
is another experiment)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from autotune.errors import TrackingError, UsageError
from autotune.sqlite_read import tables_problem
from autotune.tracking.connection import redact, sqlite_path, uri_scheme

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

# The stores MLflow's server keeps runs in ("" is a plain path, a file store's folder).
_SERVED = ("", "file", "sqlite", "postgresql", "postgres", "mysql", "mariadb", "mssql")


def check_served(uri: str) -> None:
    """Refuse, in one line naming it, a store the MLflow UI cannot serve: an unknown scheme,
    or an SQLite file that is not an SQLite database or holds no MLflow tables (read only:
    MLflow's server would add its tables to any SQLite file it is given)."""
    scheme = uri_scheme(uri)
    if scheme not in _SERVED:
        raise UsageError(
            f"{redact(uri)}: not a tracking store the MLflow UI can open (scheme '{scheme}'); "
            "give sqlite:///FILE, a folder, or a postgresql://, mysql:// or mssql:// database"
        )
    path = sqlite_path(uri) if scheme == "sqlite" else None
    problem = (
        tables_problem(path, ("experiments", "runs"), "MLflow store")
        if path is not None and path.is_file()
        else None
    )
    if problem is not None:
        raise TrackingError(f"cannot open the MLflow tracking store at {uri}: {problem}")


def study_experiment(client: MlflowClient, name: str, recorded_id: str | None) -> str:
    """The id of study `name`'s experiment in the client's store: the one it recorded when it
    is there under the study's name, else the one of that name (a store the study logged to
    under another address, or a copy of it). TrackingError when the store has none."""
    from mlflow.exceptions import MlflowException

    uri = str(client.tracking_uri)
    if recorded_id:
        with contextlib.suppress(MlflowException):
            recorded = client.get_experiment(recorded_id)
            if recorded.name == name and recorded.lifecycle_stage == "active":
                return str(recorded.experiment_id)
    experiment = client.get_experiment_by_name(name)
    if experiment is None or experiment.lifecycle_stage != "active":
        what = "no experiment" if experiment is None else "only a deleted experiment"
        raise TrackingError(
            f"{what} '{name}' in the MLflow tracking store {redact(uri)}: study {name} was not "
            "logged there; leave out --tracking-uri to open the store it logged to"
        )
    return str(experiment.experiment_id)
