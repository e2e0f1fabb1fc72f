"""The Optuna storage: its URL (an SQLite file in the study folder by default), opened with
engine settings per database, failing fast with the (redacted) address when it cannot be reached.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from autotune.errors import ClusterError, StudyError
from autotune.study.folder import optuna_db
from autotune.study.options import StudyOptions
from autotune.tracking.connection import redact


def storage_url(opts: StudyOptions, study_dir: Path) -> str:
    if opts.storage:
        return opts.storage
    return f"sqlite:///{optuna_db(study_dir).resolve()}"


def open_storage(url: str) -> Any:
    """An Optuna RDB storage, failing fast with the URL when it cannot be reached."""
    import optuna

    if url.startswith(("postgresql", "mysql")):
        check_tcp(url, what="the Optuna storage", hint="start the database or fix --storage")
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except Exception as e:
        raise StudyError(
            f"cannot open the Optuna storage {redact(url)}: "
            f"{type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 5}, "pool_pre_ping": True}
    return {}


def check_tcp(url: str, *, what: str, hint: str) -> None:
    from urllib.parse import urlparse

    parsed = urlparse(url if "://" in url else f"tcp://{url}")
    host, port = parsed.hostname or "127.0.0.1", parsed.port
    if port is None:
        return
    try:
        with socket.create_connection((host, port), timeout=3):
            pass
    except OSError as e:
        raise ClusterError(
            f"cannot reach {what} at {host}:{port} ({redact(url)}): {e.strerror or e}; {hint}"
        ) from e
