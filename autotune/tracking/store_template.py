"""A new SQLite MLflow store made from a template instead of MLflow's schema migrations.

Creating an SQLite store runs every one of MLflow's schema migrations (alembic), 2-5 s on two
cores: the largest fixed part of a short study's wall time left once Ray starts beside it
(benchmarks/RESULTS.md, study overhead). The first store made on a machine keeps a copy of its
empty schema in the cache folder (`AUTOTUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/autotune`, else
`~/.cache/autotune`), one per MLflow version; a later new store starts as a copy of it.

The template holds the schema and MLflow's own rows (its alembic revision, the default
workspace) but not the "Default" experiment, whose artifact location MLflow derives from the
folder it runs in: MLflow makes that experiment itself when it opens a store without one, as it
does for a new store. Everything here is a cache: any failure falls back to MLflow's own way.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """Where the templates are kept."""
    named = os.environ.get("AUTOTUNE_CACHE_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune"


def template_path() -> Path:
    """The template for the installed MLflow version."""
    import mlflow

    return cache_dir() / f"mlflow-{mlflow.__version__}-sqlite.db"


def seed_new_store(path: Path) -> bool:
    """Make the store file `path` from the template when it does not exist yet and a template
    does. True when it was made so; False leaves it to MLflow (no template, the file already
    there, made by another process meanwhile, or any error)."""
    template = template_path()
    if path.exists() or not template.is_file():
        return False
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=".mlflow-template-", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        _copy(template, tmp)
        os.link(tmp, path)  # fails if the store appeared meanwhile: that one is used
        return True
    except (OSError, sqlite3.Error):
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def keep_template(path: Path) -> None:
    """Keep the store MLflow just made at `path` (its schema, nothing logged yet) as the
    template, without the Default experiment; nothing when one is kept already or on error."""
    template = template_path()
    if template.is_file():
        return
    tmp = None
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".mlflow-template-", dir=template.parent)
        os.close(fd)
        tmp = Path(name)
        _copy(path, tmp)
        with contextlib.closing(sqlite3.connect(tmp)) as db, db:
            db.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            db.execute("DELETE FROM experiments WHERE experiment_id = 0")
            if db.execute("SELECT COUNT(*) FROM experiments").fetchone()[0]:
                raise sqlite3.DatabaseError("not an empty store")
        os.replace(tmp, template)
        tmp = None
    except (OSError, sqlite3.Error):
        return
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def discard(path: Path, uri: str) -> None:
    """A store made from the template that MLflow refused: the store file and the template
    removed, and MLflow's open engine for `uri` closed (MLflow keeps one per URI, which would
    still read the removed file), so that MLflow makes the store itself next."""
    with contextlib.suppress(OSError):
        path.unlink()
    with contextlib.suppress(OSError):
        template_path().unlink()
    with contextlib.suppress(Exception):  # a private cache of MLflow's: gone in another version
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()


def _copy(source: Path, target: Path) -> None:
    """A consistent copy of an SQLite database (its online backup)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)
