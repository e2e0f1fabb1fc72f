"""The MLflow connection: the tracking URI (resolved, redacted for messages) and a client that
is known to reach its server or database before anything is logged, with one clear error."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from autotune.errors import TrackingError
from autotune.tracking.redaction import redact, scrub, unencoded
from autotune.tracking.store_template import discard, keep_template, seed_new_store

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


DEFAULT_URI = "sqlite:///mlflow.db"


_DB_SCHEMES = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}


_TCP_TIMEOUT_S = 3.0


_DB_CONNECT_TIMEOUT_S = 5


_HTTP_TIMEOUT_S = 5


# How every later MLflow request of this process is bounded once an http(s) store was checked
# (`bound_http_requests`). MLflow's defaults (7 retries with exponential backoff, 120 s per try)
# held a study's writer ~4 minutes per write once its server was gone, and the driver behind it.
# No retry (urllib3 would also log a warning line per retry), a short timeout: a write to a server
# that is gone fails in seconds, and is logged by --resume (files and Optuna are the truth).
_HTTP_BOUNDS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


# MLflow prints "View run ... / View experiment ..." on stdout at the end of every run logged to a
# server: noise among a study's progress lines, which already say where the study is logged.
_QUIET_URLS = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


def resolve_uri(uri: str | None) -> str:
    """The tracking URI to use: `uri`, else $MLFLOW_TRACKING_URI, else `sqlite:///mlflow.db`.

    Relative SQLite paths and plain/`file:` paths are made absolute against the current folder,
    so trials that run in other folders and `mlflow ui` started here see the same store. Server
    and database URIs (http, https, postgresql, mysql, ...) are returned unchanged.
    """
    chosen = (uri or "").strip() or os.environ.get("MLFLOW_TRACKING_URI", "").strip() or DEFAULT_URI
    scheme = uri_scheme(chosen)
    if scheme == "sqlite":
        return _absolute_sqlite(chosen)
    if scheme == "file":
        path = _file_uri_path(chosen)
        return Path(path).expanduser().resolve().as_uri()
    if scheme == "":
        return Path(chosen).expanduser().resolve().as_uri()
    return chosen


def uri_scheme(uri: str) -> str:
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


def sqlite_path(uri: str) -> Path | None:
    rest = uri.split(":", 1)[1]
    if not rest.startswith("///"):
        return None
    path = rest[3:].partition("?")[0]
    if path in ("", ":memory:") or path.startswith("file:"):
        return None
    return Path(path)


def _unreachable(uri: str, reason: object) -> TrackingError:
    if uri_scheme(uri) in ("sqlite", "file", ""):
        return TrackingError(
            f"cannot open the MLflow tracking store at {uri}: {reason}. Pass --tracking-uri / "
            f"set MLFLOW_TRACKING_URI to another store (default: {DEFAULT_URI} in this folder)."
        )
    return TrackingError(
        f"cannot reach the MLflow tracking store at {redact(uri)}: {reason}. Start the server, "
        "or pass --tracking-uri / set MLFLOW_TRACKING_URI to a reachable store "
        f"(default: {DEFAULT_URI} in this folder)."
    )


def one_line(exc: BaseException, *uris: str | None) -> str:
    """The first line of `exc`, named by its type; with every password of `uris` masked (a
    driver's message may quote the host it tried, and with it part of a password)."""
    text = str(exc).strip().splitlines()
    first = scrub(text[0], *uris) if text else ""
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


class _RaisedAnyway(logging.Filter):
    """Drops MLflow's traceback of a database error it raises anyway (`make_managed_session`
    logs each OperationalError with its whole traceback, then raises it): every caller here
    turns the raised error into one line of its own, so a store that goes away mid-study printed
    a traceback per write beside that line (43 of them in one review)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error")


_RAISED_ANYWAY = _RaisedAnyway()


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


def _check_encoded(uri: str) -> None:
    """Refuse a URI whose password holds an unencoded '@' (or '/', '?', '#'): as written it
    names another host than the one meant, with part of the password in it."""
    problem = unencoded(uri)
    if problem is not None:
        raise TrackingError(f"invalid tracking URI {problem}")


def _check_http(uri: str) -> None:
    import urllib.request

    parts = urlsplit(uri)
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        raise TrackingError(f"invalid tracking URI {redact(uri)}: {scrub(str(exc), uri)}") from exc
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
        raise TrackingError(f"invalid tracking URI {redact(uri)}: {one_line(exc, uri)}") from exc
    _check_tcp(uri, url.host, url.port or _DB_SCHEMES.get(scheme))
    try:
        engine = sqlalchemy.create_engine(client_uri, poolclass=NullPool)
    except ModuleNotFoundError as exc:
        raise TrackingError(
            f"the database driver for {redact(uri)} is not installed ({exc.name}); install it, "
            "e.g. `pip install 'psycopg[binary]'` for postgresql:// (SQLAlchemy 2.1's default "
            "driver; psycopg2-binary serves postgresql+psycopg2://) or `pip install pymysql` for "
            "MySQL."
        ) from exc
    except Exception as exc:
        raise TrackingError(f"invalid tracking URI {redact(uri)}: {one_line(exc, uri)}") from exc
    try:
        with engine.connect():
            pass
    except Exception as exc:
        raise _unreachable(uri, one_line(exc, uri)) from exc
    finally:
        engine.dispose()


def _missing_folder(path: Path) -> str | None:
    """Why a local store at `path` (an SQLite file, a file store's folder) is not made: the
    folder it goes in does not exist. A store is made in a folder that exists, never with the
    folders above it (a typo in a URI made /nonexistent/dir at the root), as an Optuna
    `--storage` in a missing folder is refused. None when that folder is there (a link to one
    included; a broken link is named by `folder_problem`)."""
    folder = path.expanduser().absolute().parent
    if folder.exists() or folder.is_symlink():
        return None
    above = next((p for p in folder.parents if p.exists() or p.is_symlink()), None)
    why = ""
    if above is not None and not above.is_dir():
        why = f" ({above} is {'a broken link' if not above.exists() else 'not a folder'})"
    return f"the folder {folder} does not exist{why}"


def _refused(uri: str, problem: str, *, missing: bool = False) -> TrackingError:
    what = "Make the folder, or pass" if missing else "Pass"
    return TrackingError(
        f"cannot open the MLflow tracking store at {uri}: {problem}. {what} --tracking-uri "
        "/ set MLFLOW_TRACKING_URI to a writable location."
    )


def _check_sqlite(uri: str) -> None:
    path = sqlite_path(uri)
    if path is None:
        return
    missing = _missing_folder(path)
    if missing is not None:
        raise _refused(uri, missing, missing=True)
    folder = path.parent
    problem = folder_problem(folder)
    if problem is not None:
        raise _refused(uri, problem)
    # SQLite writes its journal next to the database: the folder must be writable too.
    for target in (folder, path) if path.exists() else (folder,):
        if not os.access(target, os.W_OK):
            raise TrackingError(
                f"the MLflow store {uri} is not writable ({target}). Pass --tracking-uri / set "
                "MLFLOW_TRACKING_URI to a writable location."
            )


def _check_file_store(uri: str) -> None:
    """A file store (`file:` or a plain path): its folder, or the one it is made in, exists."""
    folder = Path(unquote(_file_uri_path(uri)))
    missing = _missing_folder(folder)
    if missing is not None:
        raise _refused(uri, missing, missing=True)
    problem = folder_problem(folder)
    if problem is not None:
        raise _refused(uri, problem)


def folder_problem(folder: Path) -> str | None:
    """Why files cannot be made in `folder` (made first, as `mkdir -p`, when missing), found
    without making anything: a part of its path that is a file, or the nearest folder that
    exists is not writable. None when nothing is in the way."""
    path = folder.expanduser().absolute()
    for part in (path, *path.parents):
        try:
            if not part.exists():
                if part.is_symlink():
                    return f"{part} is a broken link"
                continue
        except OSError as exc:
            return f"{part}: {exc.strerror or exc}"
        if not part.is_dir():
            return f"{part} is not a folder"
        if not os.access(part, os.W_OK | os.X_OK):
            return f"{part} is not writable"
        return None
    return None


def file_problem(path: Path) -> str | None:
    """Why the file `path` cannot be made or written in place (`folder_problem` of its folder,
    or a folder where the file should be); None when nothing is in the way."""
    problem = folder_problem(path.parent)
    if problem is None and path.is_dir():
        problem = f"{path} is a folder"
    return problem


def make_folder(folder: Path) -> list[Path]:
    """`mkdir -p folder`; the folders it made, outermost first. On an OSError the folders made
    are removed again and the error is raised."""
    path = folder.expanduser().absolute()
    made = [p for p in (path, *path.parents) if not p.exists()][::-1]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    return made


def check_uri(uri: str) -> None:
    """The cheap checks of a tracking store (resolved), before anything is made: an HTTP server
    or a database host that answers on its port, an SQLite store whose folder exists and is
    writable (a file store: made in a folder that exists). TrackingError naming the URI when
    one fails; `connect` does the full check."""
    _check_encoded(uri)
    scheme = uri_scheme(uri)
    problem: str | None = None
    if scheme in ("http", "https"):
        _check_http(uri)
    elif scheme in _DB_SCHEMES:
        parts = urlsplit(uri)
        try:
            port = parts.port or _DB_SCHEMES[scheme]
        except ValueError as exc:
            raise TrackingError(
                f"invalid tracking URI {redact(uri)}: {scrub(str(exc), uri)}"
            ) from exc
        _check_tcp(uri, parts.hostname, port)
    elif scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None:
            return
        missing = _missing_folder(path)
        if missing is not None:
            raise _refused(uri, missing, missing=True)
        problem = file_problem(path)
        if problem is None and path.exists() and not os.access(path, os.W_OK):
            problem = f"{path} is not writable"
    elif scheme == "file":  # a file store: a folder that exists, or one made in a folder that does
        _check_file_store(uri)
    if problem is not None:
        raise _refused(uri, problem)


def connect(uri: str) -> MlflowClient:
    """A client for `uri` (already resolved), after checking that the store answers.

    Fails within seconds with a TrackingError naming the URI when the store is unreachable:
    HTTP without retries and with a short timeout, databases with a bounded TCP probe and
    connect timeout, SQLite with a check that its folder exists (it is not made) and is writable.
    """
    _check_encoded(uri)
    scheme = uri_scheme(uri)
    probe_env: dict[str, str] = {}
    client_uri = uri
    new_file: Path | None = None
    if scheme in ("http", "https"):
        _check_http(uri)
        bound_http_requests()
        probe_env = {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(_HTTP_TIMEOUT_S),
        }
    elif scheme == "sqlite":
        _check_sqlite(uri)
        path = sqlite_path(uri)
        new_file = path if path is not None and not path.exists() else None
    elif scheme == "file":
        _check_file_store(uri)
    elif scheme in _DB_SCHEMES:
        client_uri = _with_connect_timeout(uri, scheme)
        _check_database(uri, client_uri, scheme)

    # A new SQLite store starts as a copy of the cached empty schema when there is one
    # (`store_template`); if MLflow refuses that copy, it is removed and MLflow makes the store.
    seeded = new_file is not None and seed_new_store(new_file)
    try:
        try:
            client = _open(client_uri, probe_env)
        except Exception:
            if not seeded or new_file is None:
                raise
            discard(new_file, client_uri)
            seeded = False
            client = _open(client_uri, probe_env)
    except TrackingError:
        raise
    except Exception as exc:
        raise _unreachable(uri, one_line(exc, uri)) from exc
    if new_file is not None and not seeded:
        keep_template(new_file)
    return client


def bound_http_requests() -> None:
    """Bound MLflow's HTTP requests for the rest of this process (`_HTTP_BOUNDS`) and keep it
    from printing run links, each unless the user set that variable. In the environment, since
    MLflow reads these variables at every request (`mlflow.utils.rest_utils.http_request`), the
    writer's thread included; a context around one call would race with that thread."""
    for key, value in {**_HTTP_BOUNDS, **_QUIET_URLS}.items():
        os.environ.setdefault(key, value)


def answers(uri: str) -> bool:
    """Whether the server of an http(s) or database store answers on its port now (one TCP
    connect, at most `_TCP_TIMEOUT_S`); True for a local store (SQLite, files), which has no
    server to be down. The writer asks it after a write failed: a server gone, or one write
    refused?"""
    if uri_scheme(uri) not in ("http", "https", *_DB_SCHEMES):
        return True
    try:
        check_uri(uri)
    except TrackingError:
        return False
    return True


def _open(client_uri: str, probe_env: dict[str, str]) -> MlflowClient:
    """An MLflow client of the store, which has answered one query."""
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow.store.db.utils").addFilter(_RAISED_ANYWAY)  # once: filters are a set
    with _env(probe_env), quiet_store_creation():
        client = MlflowClient(tracking_uri=client_uri)
        client.search_experiments(max_results=1)
    return client
