"""Everything MLflow: the study's parent run, one child run per trial, the summary and its plots.

The driver is the only MLflow writer. Every function here takes an explicit
`mlflow.tracking.MlflowClient` and never touches MLflow's global active-run state, so the driver
can log trial N while trial N+1 runs. mlflow is imported inside the functions: importing this
module is cheap. This module must not import ray.

Layout in MLflow:

- experiment = the study name;
- parent run (tags `autotune.role=study`, `autotune.study=<name>`): the study's settings as params,
  `space.yaml`, and at the end the baseline/best metrics, the Pareto table and the plots;
- child run per trial (`trial-0007`, `trial-0000-baseline`): knobs as params, the probe's summary
  metrics, the step series as metric histories, fingerprint tags and artifacts. The tag
  `autotune.logged=true` is written last: a child without it was cut short and is logged again.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
import posixpath
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from autotune.errors import TrackingError

if TYPE_CHECKING:
    from mlflow.entities import Metric, Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

DEFAULT_URI = "sqlite:///mlflow.db"

TAG_ROLE = "autotune.role"
TAG_STUDY = "autotune.study"
TAG_TRIAL_NUMBER = "autotune.trial_number"
TAG_LOGGED = "autotune.logged"
TAG_PARENT = "mlflow.parentRunId"
TAG_VERIFIED_TRIAL = "autotune.verified_trial"
ROLE_VERIFICATION = "verification"

# MLflow's limits (mlflow/utils/validation.py in 3.17).
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100

# Step series of the probe summary -> metric key in MLflow.
SERIES_KEYS = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "lr": "lr",
    "scale": "scale",
    "clipped": "clipped",
    "skipped": "skipped",
    "step_time": "step_time_ms",
}

# Summary fields logged as params of a trial (how the probe actually ran).
DERIVED_PARAMS = (
    "effective_batch",
    "micro_batch",
    "accum_steps",
    "precision",
    "workload",
    "size",
    "steps_planned",
    "world_size",  # DDP probes (autotune.distributed)
    "oom_retried",
)

_DB_SCHEMES = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}
_TCP_TIMEOUT_S = 3.0
_DB_CONNECT_TIMEOUT_S = 5
_HTTP_TIMEOUT_S = 5


# --------------------------------------------------------------------------------------------
# URI and connection
# --------------------------------------------------------------------------------------------


def resolve_uri(uri: str | None) -> str:
    """The tracking URI to use: `uri`, else $MLFLOW_TRACKING_URI, else `sqlite:///mlflow.db`.

    Relative SQLite paths and plain/`file:` paths are made absolute against the current folder,
    so trials that run in other folders and `mlflow ui` started here see the same store. Server
    and database URIs (http, https, postgresql, mysql, ...) are returned unchanged.
    """
    chosen = (uri or "").strip() or os.environ.get("MLFLOW_TRACKING_URI", "").strip() or DEFAULT_URI
    scheme = _scheme(chosen)
    if scheme == "sqlite":
        return _absolute_sqlite(chosen)
    if scheme == "file":
        path = _file_uri_path(chosen)
        return Path(path).expanduser().resolve().as_uri()
    if scheme == "":
        return Path(chosen).expanduser().resolve().as_uri()
    return chosen


def _scheme(uri: str) -> str:
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*):", uri)
    if not match or len(match.group(1)) == 1:  # no scheme, or a Windows drive letter
        return ""
    return match.group(1).lower().split("+", 1)[0]


def _absolute_sqlite(uri: str) -> str:
    rest = uri.split(":", 1)[1]
    if not rest.startswith("///"):
        return uri  # `sqlite://` (in memory) or a form we do not rewrite
    path_and_query = rest[3:]
    path, sep, query = path_and_query.partition("?")
    if path in ("", ":memory:") or path.startswith("file:"):
        return uri
    absolute = str(Path(path).expanduser().resolve())
    return f"sqlite:///{absolute}" + (sep + query if sep else "")


def _file_uri_path(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.netloc and parts.netloc != "localhost":
        return "//" + parts.netloc + parts.path
    return parts.path or uri.split(":", 1)[1]


def _sqlite_path(uri: str) -> Path | None:
    rest = uri.split(":", 1)[1]
    if not rest.startswith("///"):
        return None
    path = rest[3:].partition("?")[0]
    if path in ("", ":memory:") or path.startswith("file:"):
        return None
    return Path(path)


def _unreachable(uri: str, reason: object) -> TrackingError:
    if _scheme(uri) in ("sqlite", "file", ""):
        return TrackingError(
            f"cannot open the MLflow tracking store at {uri}: {reason}. Pass --tracking-uri / "
            f"set MLFLOW_TRACKING_URI to another store (default: {DEFAULT_URI} in this folder)."
        )
    return TrackingError(
        f"cannot reach the MLflow tracking store at {_redact(uri)}: {reason}. Start the server, "
        "or pass --tracking-uri / set MLFLOW_TRACKING_URI to a reachable store "
        f"(default: {DEFAULT_URI} in this folder)."
    )


def _redact(uri: str) -> str:
    """The URI without a password, for messages."""
    return re.sub(r"(://[^:/@]+:)[^@/]*@", r"\1***@", uri)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@contextlib.contextmanager
def _env(values: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


# MLflow and alembic log each step of creating (or upgrading) a database store's tables at INFO:
# noise in a user's first study, where nothing needs their attention.
_STORE_LOGGERS = ("mlflow.store.db.utils", "alembic")


@contextlib.contextmanager
def quiet_store_creation() -> Iterator[None]:
    """Raise the store-creation loggers to WARNING while the block runs (warnings still show)."""
    loggers = [logging.getLogger(name) for name in _STORE_LOGGERS]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.getEffectiveLevel() < logging.WARNING:
            lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved, strict=True):
            lg.setLevel(level)


def _with_connect_timeout(uri: str, scheme: str) -> str:
    """Add `connect_timeout` to a PostgreSQL/MySQL URI that has none, so a dead server fails."""
    if scheme not in ("postgresql", "postgres", "mysql", "mariadb"):
        return uri
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "connect_timeout" for key, _ in query):
        return uri
    query.append(("connect_timeout", str(_DB_CONNECT_TIMEOUT_S)))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _check_tcp(uri: str, host: str | None, port: int | None) -> None:
    """A bounded TCP connect, so a dead or firewalled host fails in seconds."""
    if not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=_TCP_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _unreachable(uri, f"nothing answers on {host}:{port} ({reason})") from exc


def _check_http(uri: str) -> None:
    import urllib.request

    parts = urlsplit(uri)
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        raise TrackingError(f"invalid tracking URI {_redact(uri)}: {exc}") from exc
    proxies = urllib.request.getproxies()
    via_proxy = bool(proxies.get(parts.scheme.lower()))
    if parts.hostname and via_proxy and not urllib.request.proxy_bypass(parts.hostname):
        return  # reached through a proxy: only the HTTP probe can tell
    _check_tcp(uri, parts.hostname, port)


def _check_database(uri: str, client_uri: str, scheme: str) -> None:
    """One TCP probe and one SQLAlchemy connection, each bounded: MLflow itself retries ~100 s.

    `uri` is what the user gave (for messages), `client_uri` the same with a connect timeout.
    """
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    try:
        url = sqlalchemy.engine.make_url(client_uri)
    except Exception as exc:
        raise TrackingError(f"invalid tracking URI {_redact(uri)}: {_one_line(exc)}") from exc
    _check_tcp(uri, url.host, url.port or _DB_SCHEMES.get(scheme))
    try:
        engine = sqlalchemy.create_engine(client_uri, poolclass=NullPool)
    except ModuleNotFoundError as exc:
        raise TrackingError(
            f"the database driver for {_redact(uri)} is not installed ({exc.name}); install it, "
            "e.g. `pip install 'psycopg[binary]'` for postgresql:// (SQLAlchemy 2.1's default "
            "driver; psycopg2-binary serves postgresql+psycopg2://) or `pip install pymysql` for "
            "MySQL."
        ) from exc
    except Exception as exc:
        raise TrackingError(f"invalid tracking URI {_redact(uri)}: {_one_line(exc)}") from exc
    try:
        with engine.connect():
            pass
    except Exception as exc:
        raise _unreachable(uri, _one_line(exc)) from exc
    finally:
        engine.dispose()


def _check_sqlite(uri: str) -> None:
    path = _sqlite_path(uri)
    if path is None:
        return
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrackingError(
            f"cannot create the folder {folder} for the MLflow store {uri}: {exc}. Pass "
            "--tracking-uri / set MLFLOW_TRACKING_URI to a writable location."
        ) from exc
    # SQLite writes its journal next to the database: the folder must be writable too.
    for target in (folder, path) if path.exists() else (folder,):
        if not os.access(target, os.W_OK):
            raise TrackingError(
                f"the MLflow store {uri} is not writable ({target}). Pass --tracking-uri / set "
                "MLFLOW_TRACKING_URI to a writable location."
            )


def connect(uri: str) -> MlflowClient:
    """A client for `uri` (already resolved), after checking that the store answers.

    Fails within seconds with a TrackingError naming the URI when the store is unreachable:
    HTTP without retries and with a short timeout, databases with a bounded TCP probe and
    connect timeout, SQLite with a check that its folder exists (or is created) and is writable.
    """
    from mlflow.tracking import MlflowClient

    scheme = _scheme(uri)
    probe_env: dict[str, str] = {}
    client_uri = uri
    if scheme in ("http", "https"):
        _check_http(uri)
        probe_env = {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(_HTTP_TIMEOUT_S),
        }
    elif scheme == "sqlite":
        _check_sqlite(uri)
    elif scheme in _DB_SCHEMES:
        client_uri = _with_connect_timeout(uri, scheme)
        _check_database(uri, client_uri, scheme)

    try:
        with _env(probe_env), quiet_store_creation():
            client = MlflowClient(tracking_uri=client_uri)
            client.search_experiments(max_results=1)
    except TrackingError:
        raise
    except Exception as exc:
        raise _unreachable(uri, _one_line(exc)) from exc
    return client


# --------------------------------------------------------------------------------------------
# Experiment and study run
# --------------------------------------------------------------------------------------------


def ensure_experiment(client: MlflowClient, study_name: str) -> str:
    """The id of the experiment named after the study: created if missing, restored if deleted.

    For a SQLite store, a new experiment keeps its artifacts in `mlruns/` next to the database
    file (MLflow's default would be `./mlruns` of whatever folder the driver runs in).
    """
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(study_name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return str(experiment.experiment_id)
    artifact_location = _default_artifact_location(client)
    try:
        return str(client.create_experiment(study_name, artifact_location=artifact_location))
    except MlflowException:
        experiment = client.get_experiment_by_name(study_name)  # created meanwhile
        if experiment is None:
            raise
        return str(experiment.experiment_id)


def _default_artifact_location(client: MlflowClient) -> str | None:
    uri = str(client.tracking_uri)
    if _scheme(uri) != "sqlite":
        return None
    path = _sqlite_path(uri)
    if path is None or not path.is_absolute():
        return None
    return (path.parent / "mlruns").as_uri()


def _search_all(client: MlflowClient, experiment_id: str, filter_string: str) -> list[Run]:
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=filter_string,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _study_runs(client: MlflowClient, experiment_id: str, study_name: str) -> list[Run]:
    # The study name is compared here, not in the filter string, so any name needs no quoting.
    runs = _search_all(client, experiment_id, f"tags.`{TAG_ROLE}` = 'study'")
    return [run for run in runs if run.data.tags.get(TAG_STUDY) == study_name]


def ensure_study_run(
    client: MlflowClient,
    experiment_id: str,
    study_name: str,
    *,
    space_yaml: str,
    params: dict[str, Any],
    tags: dict[str, str],
) -> str:
    """The study's parent run: found again by its tags (and set RUNNING), else created.

    A new run gets `params`, `tags` and the `space.yaml` artifact. On an existing run the tags are
    set again and only params it does not have yet are logged (MLflow params are immutable).
    """
    from mlflow.entities import RunStatus

    existing = _study_runs(client, experiment_id, study_name)
    clean_params = _clean_params(params)
    run_tags = {**{k: str(v) for k, v in tags.items()}, TAG_ROLE: "study", TAG_STUDY: study_name}
    if existing:
        run = existing[0]
        run_id = run.info.run_id
        client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        new_params = {k: v for k, v in clean_params.items() if k not in run.data.params}
        _log_entities(client, run_id, params=new_params, tags=run_tags)
        return str(run_id)
    run = client.create_run(experiment_id, run_name=study_name, tags=_clean_tags(run_tags))
    run_id = run.info.run_id
    _log_entities(client, run_id, params=clean_params)
    client.log_text(run_id, space_yaml, "space.yaml")
    return str(run_id)


def find_study_run(client: MlflowClient, study_name: str) -> tuple[str, str] | None:
    """(experiment id, parent run id) of a study logged before, or None."""
    experiment = client.get_experiment_by_name(study_name)
    if experiment is None or experiment.lifecycle_stage == "deleted":
        return None
    experiment_id = str(experiment.experiment_id)
    runs = _study_runs(client, experiment_id, study_name)
    return (experiment_id, str(runs[0].info.run_id)) if runs else None


def set_study_status(client: MlflowClient, parent_run_id: str, status: str) -> None:
    """End the parent run with `status` (FINISHED, FAILED, KILLED), e.g. when the study stops."""
    client.set_terminated(parent_run_id, status=status)


# --------------------------------------------------------------------------------------------
# Trials
# --------------------------------------------------------------------------------------------


def _child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> list[Run]:
    return _search_all(client, experiment_id, f"tags.`{TAG_PARENT}` = '{parent_run_id}'")


def _trial_number(run: Run) -> int | None:
    try:
        return int(run.data.tags.get(TAG_TRIAL_NUMBER, ""))
    except ValueError:
        return None


def _is_complete(run: Run) -> bool:
    return run.data.tags.get(TAG_LOGGED) == "true"


def logged_trials(client: MlflowClient, experiment_id: str, parent_run_id: str) -> set[int]:
    """Trial numbers that have a completely logged child run of `parent_run_id`.

    Child runs without the `autotune.logged=true` marker (the driver died while logging them) are
    deleted, so the trial can be logged again. Call it when a study starts or resumes.
    """
    numbers: set[int] = set()
    for run in _child_runs(client, experiment_id, parent_run_id):
        number = _trial_number(run)
        if _is_complete(run) and run.data.tags.get(TAG_ROLE) == ROLE_VERIFICATION:
            continue
        if _is_complete(run) and number is not None:
            numbers.add(number)
        else:
            log.info("deleting the half-logged MLflow run %s (trial %s)", run.info.run_id, number)
            client.delete_run(run.info.run_id)
    return numbers


def _trial_run_name(number: int, baseline: bool) -> str:
    return f"trial-{number:04d}" + ("-baseline" if baseline else "")


def log_trial(
    client: MlflowClient,
    experiment_id: str,
    parent_run_id: str,
    study_name: str,
    outcome: dict[str, Any],
) -> str:
    """Log one trial as a child run of the study; returns its run id. Idempotent per trial number.

    If a complete child run for `outcome["number"]` exists, its id is returned and nothing is
    written; an incomplete one is deleted and the trial logged afresh.
    """
    from mlflow.entities import RunStatus

    number = int(outcome["number"])
    found = _search_all(
        client,
        experiment_id,
        f"tags.`{TAG_PARENT}` = '{parent_run_id}' and tags.`{TAG_TRIAL_NUMBER}` = '{number}'",
    )
    for run in found:
        if _is_complete(run):
            return str(run.info.run_id)
    for run in found:
        client.delete_run(run.info.run_id)

    summary: dict[str, Any] = outcome.get("summary") or {}
    result = str(outcome.get("outcome") or "failed")
    wall_s = _finite(outcome.get("wall_s"))
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - int(wall_s * 1000) if wall_s is not None and wall_s > 0 else now_ms

    run = client.create_run(
        experiment_id,
        start_time=start_ms,
        run_name=_trial_run_name(number, bool(outcome.get("baseline"))),
        tags={TAG_PARENT: parent_run_id, TAG_STUDY: study_name, TAG_TRIAL_NUMBER: str(number)},
    )
    run_id = str(run.info.run_id)

    _log_entities(
        client,
        run_id,
        params=_clean_params(_trial_params(outcome, summary)),
        tags=_trial_tags(study_name, outcome, summary),
    )
    _log_metrics(client, run_id, _trial_metrics(outcome, summary, now_ms))
    _log_metrics(client, run_id, _series_metrics(summary.get("series") or {}, now_ms))
    _log_trial_artifacts(client, run_id, outcome, summary)

    status = RunStatus.FAILED if result in ("failed", "oom") else RunStatus.FINISHED
    client.set_terminated(run_id, status=RunStatus.to_string(status), end_time=now_ms)
    client.set_tag(run_id, TAG_LOGGED, "true")  # last: marks the run complete
    return run_id


def _trial_params(outcome: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = dict(outcome.get("knobs") or {})
    for var, value in (outcome.get("env") or {}).items():
        params[f"env.{var}"] = value
    for key in DERIVED_PARAMS:
        if summary.get(key) is not None:
            params.setdefault(key, summary[key])
    for r, seen in enumerate(summary.get("rank_env") or ()):  # as each DDP rank read it back
        for var, value in (seen or {}).items():
            params[f"rank{r}.env.{var}"] = "(unset)" if value is None else value
    return params


def _trial_tags(
    study_name: str, outcome: Mapping[str, Any], summary: Mapping[str, Any]
) -> dict[str, str]:
    tags: dict[str, str] = {
        TAG_STUDY: study_name,
        TAG_ROLE: "trial",
        TAG_TRIAL_NUMBER: str(int(outcome["number"])),
        "autotune.outcome": str(outcome.get("outcome") or "failed"),
        "autotune.baseline": _bool_str(outcome.get("baseline")),
        "autotune.feasible": _bool_str(outcome.get("feasible")),
    }
    optional = {
        "autotune.cause": outcome.get("cause"),
        "autotune.node": outcome.get("node"),
        "autotune.device": summary.get("device"),
        "autotune.diverged_at_step": summary.get("diverged_at_step"),
        "autotune.divergence_cause": summary.get("divergence_cause"),
        "autotune.source": outcome.get("source"),
    }
    tags.update({k: str(v) for k, v in optional.items() if v is not None and v != ""})
    if outcome.get("fingerprint"):
        tags.update(fingerprint_tags(outcome["fingerprint"]))
    return tags


def fingerprint_tags(fp: dict[str, Any]) -> dict[str, str]:
    """Flat tags of a fingerprint from `autotune.fingerprint.tags`; none if that is unavailable."""
    try:
        from autotune import fingerprint
    except ImportError:
        return {}
    make = getattr(fingerprint, "tags", None)
    if make is None:
        return {}
    try:
        return {str(k): str(v) for k, v in make(fp).items()}
    except Exception as exc:  # a bad fingerprint must not lose the trial
        log.warning("fingerprint tags could not be made: %s", _one_line(exc))
        return {}


def _trial_metrics(outcome: Mapping[str, Any], summary: Mapping[str, Any], ts: int) -> list[Metric]:
    from mlflow.entities import Metric

    values: dict[str, float] = {}
    for name, value in (summary.get("metrics") or {}).items():
        number = _finite(value)
        if number is not None:
            values[str(name)] = number
    for key in ("steps_run", "steps_planned"):
        number = _finite(summary.get(key))
        if number is not None:
            values.setdefault(key, number)
    wall_s = _finite(outcome.get("wall_s"))
    if wall_s is not None:
        values["wall_s"] = wall_s
    return [Metric(_clean_key(k), v, ts, 0) for k, v in values.items()]


def _series_metrics(series: Mapping[str, Any], ts: int) -> list[Metric]:
    """Step series as metric histories (step = index); non-finite points are skipped.

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
        for step, raw in enumerate(points):
            value = _finite(raw)
            if value is None:
                nonfinite += raw is not None
                continue
            metrics.append(Metric(key, value, ts, step))
        if name == "loss":
            metrics.append(Metric("nonfinite_steps", float(nonfinite), ts, 0))
    return metrics


def _log_trial_artifacts(
    client: MlflowClient, run_id: str, outcome: Mapping[str, Any], summary: Mapping[str, Any]
) -> None:
    if outcome.get("fingerprint"):
        client.log_text(run_id, _json(outcome["fingerprint"]), "fingerprint.json")
    if summary.get("anomaly"):
        client.log_text(run_id, _json(summary["anomaly"]), "anomaly.json")
    if outcome.get("outcome") != "complete":
        if outcome.get("log_tail"):
            client.log_text(run_id, str(outcome["log_tail"]), "log_tail.txt")
        if outcome.get("error"):
            client.log_text(run_id, str(outcome["error"]), "error.txt")
    record = dict(outcome)
    if record.get("summary"):
        record["summary"] = {k: v for k, v in record["summary"].items() if k != "series"}
    client.log_text(run_id, _json(record), "trial.json")


# --------------------------------------------------------------------------------------------
# Verifications
# --------------------------------------------------------------------------------------------


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
) -> str:
    """One verification (a configuration re-run over seeds) as an MLflow run; returns its id.

    Metrics `<metric>.mean`, `.low`, `.high` (95% interval), `diverged_share`, and with a
    baseline the same under `baseline.`; tags link it to its study and trial (and, in the
    study's own experiment, make it a child of the study's run)."""
    from mlflow.entities import Metric, RunStatus

    now = int(time.time() * 1000)
    all_tags: dict[str, Any] = {TAG_ROLE: ROLE_VERIFICATION, **tags}
    if parent_run_id:
        all_tags[TAG_PARENT] = parent_run_id
    if fingerprint:
        all_tags.update(fingerprint_tags(fingerprint))
    run = client.create_run(experiment_id, run_name=name, tags=_clean_tags(all_tags))
    run_id = str(run.info.run_id)
    metrics: list[Metric] = []

    def add(prefix: str, res: Mapping[str, Any]) -> None:
        share = res.get("diverged_share")
        if share is not None:
            metrics.append(Metric(f"{prefix}diverged_share", float(share), now, 0))
        for metric, iv in (res.get("metrics") or {}).items():
            for part in ("mean", "low", "high"):
                value = _finite(iv.get(part))
                if value is not None:
                    metrics.append(Metric(f"{prefix}{metric}.{part}", value, now, 0))

    add("", result)
    if baseline is not None:
        add("baseline.", baseline)
    _log_entities(
        client,
        run_id,
        params=_clean_params({"seeds": result.get("seeds"), "n_seeds": result.get("n")}),
    )
    _log_metrics(client, run_id, metrics)
    client.log_text(run_id, _json(report if report is not None else result), "verification.json")
    client.set_terminated(run_id, status=RunStatus.to_string(RunStatus.FINISHED), end_time=now)
    client.set_tag(run_id, TAG_LOGGED, "true")
    return run_id


def trial_run_ids(client: MlflowClient, experiment_id: str, parent_run_id: str) -> dict[int, str]:
    """Trial number -> run id of its completely logged child run."""
    out: dict[int, str] = {}
    for run in _child_runs(client, experiment_id, parent_run_id):
        number = _trial_number(run)
        if number is not None and _is_complete(run):
            out[number] = str(run.info.run_id)
    return out


# --------------------------------------------------------------------------------------------
# Study summary
# --------------------------------------------------------------------------------------------


def log_study_summary(
    client: MlflowClient,
    parent_run_id: str,
    summary: dict[str, Any],
    outcomes: list[dict[str, Any]],
    importances: dict[str, dict[str, float]] | None,
) -> None:
    """Log the end of a study on its parent run, then set the run FINISHED.

    Metrics `baseline.<m>`, `best.<m>`, `change_pct.<m>` and `trials.<outcome>` counts; tags for
    the pick (`summary["pick"]` if given, else the first Pareto entry) and the front; the Pareto
    front as an MLflow table (`pareto_front.json`) plus `pareto_front.csv` / `.md`; `summary.json`;
    and the plots `plots/pareto_front.png`, `plots/importances.png`, `plots/loss_curves.png`.
    """
    from mlflow.entities import Metric, RunStatus

    ts = int(time.time() * 1000)
    objectives: list[dict[str, Any]] = list(summary.get("objectives") or [])
    pareto: list[dict[str, Any]] = list(summary.get("pareto") or [])
    baseline = summary.get("baseline") or None

    values: dict[str, float] = {}
    if baseline:
        for name, value in (baseline.get("metrics") or {}).items():
            if _finite(value) is not None:
                values[f"baseline.{name}"] = float(value)
    for name, value in (summary.get("best") or {}).items():
        if _finite(value) is not None:
            values[f"best.{name}"] = float(value)
    for name, change in (summary.get("improvement") or {}).items():
        pct = _finite((change or {}).get("change_pct"))
        if pct is not None:
            values[f"change_pct.{name}"] = pct
    for name, count in _counts(outcomes, summary.get("counts") or {}).items():
        values[f"trials.{name}"] = float(count)
    _log_metrics(
        client, parent_run_id, [Metric(_clean_key(k), v, ts, 0) for k, v in values.items()]
    )

    tags: dict[str, str] = {
        "autotune.objectives": ",".join(
            f"{o.get('metric')}:{o.get('direction', 'minimize')}" for o in objectives
        ),
        "autotune.pareto.trials": ",".join(str(p.get("number")) for p in pareto),
        "autotune.pareto.size": str(len(pareto)),
    }
    if baseline and baseline.get("number") is not None:
        tags["autotune.baseline.trial"] = str(baseline["number"])
    pick = _pick(summary, pareto)
    if pick is not None:
        tags["autotune.pick.trial"] = str(pick.get("number"))
        for knob, value in (pick.get("knobs") or {}).items():
            tags[f"autotune.pick.knob.{knob}"] = str(value)
    if summary.get("dropped_knobs"):
        tags["autotune.dropped_knobs"] = _json(summary["dropped_knobs"])
    _log_entities(client, parent_run_id, tags=tags)

    client.log_text(parent_run_id, _json(summary), "summary.json")
    if importances:
        client.log_text(parent_run_id, _json(importances), "importances.json")
    columns = _pareto_columns(objectives, pareto)
    _log_table(client, parent_run_id, columns, "pareto_front.json")
    client.log_text(parent_run_id, _csv(columns), "pareto_front.csv")
    client.log_text(parent_run_id, _markdown(columns), "pareto_front.md")

    _log_plots(client, parent_run_id, summary, outcomes, importances, objectives, pareto)
    client.set_terminated(parent_run_id, status=RunStatus.to_string(RunStatus.FINISHED))


def _pick(summary: Mapping[str, Any], pareto: list[dict[str, Any]]) -> dict[str, Any] | None:
    pick = summary.get("pick")
    if isinstance(pick, dict):
        return pick
    if pick is not None:
        for entry in pareto:
            if entry.get("number") == pick:
                return entry
        return {"number": pick}
    return pareto[0] if pareto else None


def _counts(outcomes: Iterable[Mapping[str, Any]], given: Mapping[str, Any]) -> dict[str, int]:
    counts = {"complete": 0, "diverged": 0, "failed": 0, "oom": 0}
    total = 0
    for outcome in outcomes:
        key = str(outcome.get("outcome") or "failed")
        counts[key] = counts.get(key, 0) + 1
        total += 1
    counts["total"] = total
    for key, value in given.items():  # the study's own counts win (e.g. pruned, timeouts)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            counts[str(key)] = int(value)
    return counts


def _pareto_columns(
    objectives: list[dict[str, Any]], pareto: list[dict[str, Any]]
) -> dict[str, list[Any]]:
    metric_names = [str(o.get("metric")) for o in objectives]
    knob_names: list[str] = []
    for entry in pareto:
        for knob in entry.get("knobs") or {}:
            if knob not in knob_names:
                knob_names.append(knob)
    columns: dict[str, list[Any]] = {"trial": []}
    for name in metric_names:
        columns[name] = []
    for knob in knob_names:
        columns[knob] = []
    for entry in pareto:
        columns["trial"].append(entry.get("number"))
        entry_values = list(entry.get("values") or [])
        for i, name in enumerate(metric_names):
            value = entry_values[i] if i < len(entry_values) else None
            if value is None:
                value = (entry.get("metrics") or {}).get(name)
            columns[name].append(_plain(value))
        for knob in knob_names:
            columns[knob].append(_plain((entry.get("knobs") or {}).get(knob)))
    return columns


def _log_table(
    client: MlflowClient, run_id: str, columns: dict[str, list[Any]], artifact: str
) -> None:
    """An MLflow table artifact that a second summary replaces (log_table would append rows)."""
    existing = {item.path for item in client.list_artifacts(run_id)}
    if artifact not in existing:
        client.log_table(run_id, data=columns, artifact_file=artifact)
        return
    # Same layout as log_table's ("split" orient, no index); the table tag is already set.
    rows = [list(row) for row in zip(*columns.values(), strict=True)]
    text = json.dumps(_json_safe({"columns": list(columns), "data": rows}), allow_nan=False)
    client.log_text(run_id, text, artifact)


def _csv(columns: Mapping[str, list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns.keys())
    writer.writerows(zip(*columns.values(), strict=True))
    return out.getvalue()


def _markdown(columns: Mapping[str, list[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.6g}"
        return "" if value is None else str(value).replace("|", "\\|")

    header = list(columns.keys())
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in zip(*columns.values(), strict=True):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "# Pareto front\n\n" + "\n".join(lines) + "\n"


def _log_plots(
    client: MlflowClient,
    run_id: str,
    summary: Mapping[str, Any],
    outcomes: list[dict[str, Any]],
    importances: dict[str, dict[str, float]] | None,
    objectives: list[dict[str, Any]],
    pareto: list[dict[str, Any]],
) -> None:
    from autotune import plots

    front = {int(p["number"]) for p in pareto if p.get("number") is not None}
    baseline = summary.get("baseline") or {}
    baseline_number = baseline.get("number")
    if baseline_number is None:
        baseline_number = next((o["number"] for o in outcomes if o.get("baseline")), None)
    jobs: list[tuple[str, Any]] = [
        ("plots/pareto_front.png", lambda: plots.pareto_figure(outcomes, objectives, front)),
        (
            "plots/loss_curves.png",
            lambda: plots.loss_curves_figure(outcomes, front, baseline_number),
        ),
    ]
    if importances:
        jobs.append(("plots/importances.png", lambda: plots.importance_figure(importances)))
    for artifact, make in jobs:
        try:
            figure = make()
            client.log_figure(run_id, figure, artifact, save_kwargs={"dpi": plots.DPI})
        except Exception as exc:  # a plot must not cost the study its summary
            log.warning("could not log %s: %s", artifact, _one_line(exc))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, str):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _bool_str(value: Any) -> str:
    return "true" if value else "false"


def _plain(value: Any) -> Any:
    """A JSON-safe scalar: non-finite floats become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    try:
        return _json_safe(value.item())  # numpy scalars
    except AttributeError:
        return str(value)


def _json(value: Any) -> str:
    """Strict JSON (NaN/inf as strings, so browsers can parse it), indented."""
    return json.dumps(_json_safe(value), indent=2, sort_keys=True, allow_nan=False) + "\n"


_BAD_KEY_CHARS = re.compile(r"[^/\w.\- ]")


def _clean_key(key: Any) -> str:
    """A valid MLflow param/metric/tag key: safe characters, no '..' or leading '/', ≤250."""
    text = _BAD_KEY_CHARS.sub("_", str(key)).strip()
    parts = [p for p in text.split("/") if p not in ("", ".", "..")]
    text = "/".join(parts) or "_"
    if posixpath.normpath(text) != text:
        text = text.replace("/", "_")
    return text[:MAX_KEY]


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = "...[truncated]"
    return text[: limit - len(marker)] + marker


def _param_value(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        text = json.dumps(_json_safe(value), sort_keys=True)
    else:
        text = str(value)
    return _truncate(text, MAX_PARAM_VALUE)


def _clean_params(params: Mapping[str, Any]) -> dict[str, str]:
    return {_clean_key(k): _param_value(v) for k, v in params.items()}


def _clean_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    return {_clean_key(k): _truncate(str(v), MAX_TAG_VALUE) for k, v in tags.items()}


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _log_entities(
    client: MlflowClient,
    run_id: str,
    *,
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, Any] | None = None,
) -> None:
    from mlflow.entities import Param, RunTag

    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in _clean_tags(tags or {}).items()]
    for chunk in _chunks(param_list, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, params=chunk, synchronous=True)
    for chunk in _chunks(tag_list, MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run_id, tags=chunk, synchronous=True)


def _log_metrics(client: MlflowClient, run_id: str, metrics: Sequence[Metric]) -> None:
    for chunk in _chunks(metrics, MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=chunk, synchronous=True)
