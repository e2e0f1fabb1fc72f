"""The Optuna storage: its URL (an SQLite file in the study folder by default), checked before
anything is made (`check_storage`, `check_resumable`, `check_folder_storage`), opened with
engine settings per database, failing fast with the (redacted) address when it cannot be
reached, and its server lost mid-study said in one line (`connection_kept`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, ClusterError, ServiceLost, StudyError
from autotune.sqlite_read import read_only
from autotune.study import folder
from autotune.study.folder import optuna_db
from autotune.study.options import StudyOptions
from autotune.tracking.connection import file_problem, one_line, redact
from autotune.tracking.redaction import unencoded, without_password

_HINT = "start the database or fix --storage"


def storage_url(opts: StudyOptions, study_dir: Path) -> str:
    if opts.storage:
        return opts.storage
    return f"sqlite:///{optuna_db(study_dir).resolve()}"


def open_storage(url: str) -> Any:
    """An Optuna RDB storage, failing fast with the URL when it cannot be reached."""
    import optuna

    _check_encoded(url)
    if url.startswith(("postgresql", "mysql")):
        check_tcp(url, what="the Optuna storage", hint=_HINT)
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except Exception as e:
        raise StudyError(f"cannot open the Optuna storage {redact(url)}: {one_line(e, url)}") from e


def _check_encoded(url: str) -> None:
    """Refuse a storage URL whose password holds an unencoded '@' (or '/', '?', '#'): as written
    it names another host than the one meant, with part of the password in it."""
    problem = unencoded(url)
    if problem is not None:
        raise StudyError(f"cannot open the Optuna storage {problem}")


class _NoLostConnectionLog(logging.Filter):
    """Drops what libraries log, with a page of traceback and SQL, about a database connection
    lost (`lost_connection`), which is said once in one line instead: by `connection_kept` for
    the Optuna storage. MLflow's own
    traceback of a database error it re-raises is dropped where every client of its store is
    made (`tracking.connection`), for every command, not here. Optuna's note
    that it "caught an error from sqlalchemy" reading trials and falls back to a slower query
    goes too (the fallback either works, or fails and is said then), and psycopg's that it
    ignored an error ending a pipeline on a connection already lost."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith(_IGNORED):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return error is None or lost_connection(error) is None


_QUIET = _NoLostConnectionLog()
_IGNORED = ("Caught an error from sqlalchemy", "error ignored terminating")
_NOISY = (
    "psycopg",
    "optuna.storages._rdb.storage",
)


@contextlib.contextmanager
def connection_kept(url: str, written: Callable[[], bool]) -> Iterator[None]:
    """Around all the driver does once its storage is open: a database server (PostgreSQL,
    MySQL) that stops or drops the connection mid-study fails whichever call talks to it next
    (a trial told, a rung's record, the summary's read), as SQLAlchemy's OperationalError or
    Optuna's StorageInternalError raised from it, whose text blames "invalid data in the
    commit". That is said in one line naming the storage (ServiceLost, exit status 1), with how
    to carry on: `--resume` once the study is written (`written`), else the same command again
    (a --resume of a study never written would fail). Every other error is left as it is: a
    bug stays a traceback. What finished is in the storage already (each write is committed)."""
    for name in _NOISY:
        logging.getLogger(name).addFilter(_QUIET)  # once: a logger's filters are a set
    try:
        yield
    except AutotuneError:
        raise
    except Exception as e:
        lost = None if url.startswith("sqlite") else lost_connection(e)
        if lost is None:
            raise
        then = (
            "run the same command with --resume to continue (what finished is kept)"
            if written()
            else "run the same command again (nothing of the study was written)"
        )
        raise ServiceLost(
            f"lost the connection to the Optuna storage {redact(url)} ({lost}); bring it back, "
            f"then {then}"
        ) from None


def lost_connection(e: BaseException) -> str | None:
    """The database's own one line when `e`, or an error it was raised from, is a connection
    to the database lost or refused: SQLAlchemy's OperationalError (PEP 249's class for errors
    of the database's operation, not of the program: a server gone, shut down, out of disk) or
    a DBAPI error that invalidated the connection; None otherwise."""
    from sqlalchemy import exc

    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, exc.OperationalError) or (
            isinstance(cur, exc.DBAPIError) and cur.connection_invalidated
        ):
            return one_line(cur.orig if isinstance(cur.orig, BaseException) else cur)
        cur = cur.__cause__ or cur.__context__
    return None


def check_storage(url: str, study_dir: Path) -> None:
    """The cheap checks of the storage, before anything is made: a database SQLAlchemy knows
    (with its driver installed) whose host answers; an SQLite file whose folder exists and is
    writable (the study folder's own file: whose folder can be made). StudyError naming it."""
    import sqlalchemy

    def bad(problem: str) -> StudyError:
        return StudyError(f"cannot open the Optuna storage {redact(url)}: {problem}; fix --storage")

    _check_encoded(url)
    try:
        parsed = sqlalchemy.engine.make_url(url)
        dialect = parsed.get_dialect()
    except Exception as e:
        known = "use sqlite:///PATH, postgresql://HOST/DB or mysql://HOST/DB"
        raise bad(f"not a database URL SQLAlchemy knows ({one_line(e, url)}); {known}") from None
    if parsed.get_backend_name() != "sqlite":
        check_tcp(url, what="the Optuna storage", hint=_HINT)
        try:
            dialect.import_dbapi()
        except ImportError as e:
            raise bad(f"its database driver is not installed ({e.name or e})") from None
        return
    path = sqlite_file(url)
    if path is None:
        if parsed.database in (None, "", ":memory:") or "mode=memory" in url:
            raise bad(
                "an SQLite database in memory lives only as long as this command: nothing of "
                "the study could be shown, exported or resumed; give a file, sqlite:///PATH"
            )
        return
    own = path.absolute() == optuna_db(study_dir).absolute()
    if not own and not (path.parent.exists() or path.parent.is_symlink()):
        raise bad(f"the folder {path.parent} does not exist")
    problem = file_problem(path)
    if problem is None and path.is_file():
        try:  # read only: a file that is not a database is refused before anything is made
            with contextlib.closing(read_only(path)) as db:
                db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.Error as e:
            problem = f"{path}: {e}"
    if problem is not None:
        raise bad(problem)


def check_folder_storage(url: str, study_dir: Path) -> None:
    """Without --storage (the folder's own SQLite file in use `url`): a StudyError when the
    folder's study.json names another storage (a PostgreSQL one, a shared file), saying to pass
    it. Else the study would be looked for in a file that never held it: "--resume: no study",
    or its records taken for an earlier study's whose storage was deleted. An unreadable
    study.json is left to the checks that read it."""
    try:
        meta = folder.read_meta(study_dir) if folder.study_json(study_dir).is_file() else None
    except StudyError:
        return
    if meta is None or same_storage(str(meta["storage"]), url):
        return
    named = redact(str(meta["storage"]))
    hidden = " (its password where *** is)" if named != meta["storage"] else ""
    raise StudyError(
        f"{folder.study_json(study_dir)} says study '{meta['name']}' is in the storage {named}, "
        f"not in this folder's own file (used without --storage); pass --storage "
        f"'{named}'{hidden} to continue it"
    )


def space_changed(name: str, url: str, changed: str, study_dir: Path, shared: bool) -> StudyError:
    """The refusal of a study `name` whose space changed (`changed` says what), with advice
    that works: the study folder holds the old study's trial records, so deleting only its
    storage (optuna.db) leads to a second refusal (`home.refuse_overwrite`); the folder goes
    with it. A `shared` storage holds other studies too: only this one is deleted from it."""
    where = redact(url)
    if shared:
        drop = (
            f"delete it from the storage (optuna delete-study --study-name {name} --storage "
            f"'{where}') and remove its study folder {study_dir}"
        )
    else:
        drop = f"remove its study folder {study_dir} (its optuna.db and trial records)"
    return StudyError(
        f"study '{name}' already exists in {where} with a different space ({changed} changed); "
        f"give the new one another name with --set name={name}-2, or {drop} to start it afresh"
    )


def same_storage(a: str, b: str) -> bool:
    """The same storage URL, an SQLite file compared by its resolved path, a database's without
    its password (study.json may keep it in the URL, and the user give it through PGPASSWORD)."""
    file_a, file_b = sqlite_file(a), sqlite_file(b)
    if file_a is not None and file_b is not None:
        return file_a.resolve() == file_b.resolve()
    return without_password(a) == without_password(b)


def check_resumable(url: str, name: str) -> None:
    """For --resume: the storage holds the study `name`. Read only: nothing is made (a missing
    SQLite file is no study). StudyError naming the storage when it does not."""
    if name not in _study_names(url):
        raise StudyError(f"--resume: no study '{name}' in {redact(url)}; drop --resume to start it")


def _study_names(url: str) -> list[str]:
    """The studies in the storage at `url`, read without making or changing anything."""
    query = "SELECT study_name FROM studies"
    path = sqlite_file(url)
    try:
        if path is not None:
            if not path.is_file():
                return []
            with contextlib.closing(read_only(path)) as db:
                if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'studies'").fetchall():
                    return []
                return [row[0] for row in db.execute(query)]
        return _rdb_study_names(url, query)
    except (sqlite3.Error, OSError) as e:
        raise StudyError(f"cannot read the Optuna storage {redact(url)}: {e}") from None


def _rdb_study_names(url: str, query: str) -> list[str]:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    _check_encoded(url)
    try:
        engine = sqlalchemy.create_engine(url, poolclass=NullPool, **_engine_kwargs(url))
        try:
            with engine.connect() as conn:
                if not sqlalchemy.inspect(conn).has_table("studies"):
                    return []
                return [row[0] for row in conn.execute(sqlalchemy.text(query))]
        finally:
            engine.dispose()
    except Exception as e:
        raise StudyError(
            f"cannot read the Optuna storage {redact(url)}: {one_line(e, url)}"
        ) from None


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite URL; None for another database, in memory or for a `file:` URI."""
    import sqlalchemy

    if not url.startswith("sqlite"):
        return None
    database = sqlalchemy.engine.make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 5}, "pool_pre_ping": True}
    return {}


def check_tcp(url: str, *, what: str, hint: str) -> None:
    """A bounded TCP connect to the host and port of `url` (a URL, or a plain host:port, as a
    Ray address is given); a ClusterError naming it as given when nothing answers."""
    from urllib.parse import urlparse

    parsed = urlparse(url if "://" in url else f"tcp://{url}")
    try:
        host, port = parsed.hostname or "127.0.0.1", parsed.port
    except ValueError:  # a port that is not a number, or out of range
        raise ClusterError(
            f"cannot reach {what} at {redact(url)}: its port is not a whole number from 1 to "
            f"65535; {hint}"
        ) from None
    if port is None:
        return
    try:
        with socket.create_connection((host, port), timeout=3):
            pass
    except OSError as e:
        # The address as the user gave it; beside the host and port tried when it says more.
        given, tried = redact(url), f"{host}:{port}"
        at = tried if given == tried else f"{tried} ({given})"
        raise ClusterError(f"cannot reach {what} at {at}: {e.strerror or e}; {hint}") from e
