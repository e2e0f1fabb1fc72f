"""The study folder: where each of its files lives, and the one atomic JSON write and read.

    STUDY_DIR/study.json                      where the stores are (`find_study` reads it)
    STUDY_DIR/optuna.db                       the SQLite storage (unless --storage)
    STUDY_DIR/driver.lock                     held by the driver while it runs
    STUDY_DIR/trials/NNNN.json                a trial's record (`records`)
    STUDY_DIR/trials/NNNN-rK.json             its record at rung K (`rung_phase`)
    STUDY_DIR/verify/NNNN-sSTEPS-seedS.json   one seed of a verification (`verification`)
    STUDY_DIR/state/NNNN-sSTEPS.pt            a promoted probe's state (`states`)
    STUDY_DIR/ray/                            Ray's files (a local Ray's session)

A record is written whole or not at all (`write_json`: a temporary file renamed over it), so a
driver killed mid-write leaves the previous record or none, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from autotune.errors import StudyError


def study_json(study_dir: Path) -> Path:
    return study_dir / "study.json"


def optuna_db(study_dir: Path) -> Path:
    return study_dir / "optuna.db"


def lock_file(study_dir: Path) -> Path:
    return study_dir / "driver.lock"


def ray_dir(study_dir: Path) -> Path:
    return study_dir / "ray"


def trials_dir(study_dir: Path) -> Path:
    return study_dir / "trials"


def trial_path(study_dir: Path, number: int) -> Path:
    """Trial `number`'s record, as its process returned it and the driver completed it."""
    return trials_dir(study_dir) / f"{number:04d}.json"


def rung_path(study_dir: Path, number: int, rung: int) -> Path:
    """Trial `number`'s record at rung `rung` (its steps are in the record)."""
    return trials_dir(study_dir) / f"{number:04d}-r{rung}.json"


def verify_dir(study_dir: Path) -> Path:
    return study_dir / "verify"


def verify_path(study_dir: Path, number: int, seed: int, steps: int) -> Path:
    """Trial `number`'s verification at `steps` over seed `seed`."""
    return verify_dir(study_dir) / f"{number:04d}-s{steps}-seed{seed}.json"


def state_dir(study_dir: Path) -> Path:
    return study_dir / "state"


def state_path(study_dir: Path, number: int, steps: int) -> Path:
    """Where trial `number`'s probe state after `steps` steps (at probe.batch) is kept;
    absolute: the probe process may run in another working directory."""
    return state_dir(study_dir).resolve() / f"{number:04d}-s{steps}.pt"


def write_json(path: Path, data: Any, indent: int | None = None, *, private: bool = False) -> None:
    """`data` as JSON at `path`, atomically (anything JSON cannot hold is written as its str);
    the folder is made when missing. `private`: readable by its owner alone (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, default=str, indent=indent)
    write_text(path, text, path.with_name(f"{path.name}.tmp"), private=private)


def write_text(path: Path, text: str, tmp: Path, *, private: bool = False) -> None:
    """`text` to `path` through the temporary file `tmp` and a rename: the file whole or not
    at all, and no temporary left behind when it cannot be written (the error is raised).
    `private`: the file is made with mode 0600 (owner only) from its first byte, whatever the
    umask or the mode of the file it replaces."""
    try:
        if private:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()  # a leftover temporary keeps its mode: made anew
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(text)
        else:
            tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object at `path`; None when there is none (missing, unreadable, not JSON, or
    not an object)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_rung_record(study_dir: Path, number: int, rung: int, steps: int) -> dict[str, Any] | None:
    """The record of trial `number` at rung `rung`, if it was run at `steps` (a record of
    another length, from before the target changed, does not count)."""
    data = read_json(rung_path(study_dir, number, rung))
    return data if data is not None and data.get("steps") == steps else None


#: The largest study.json read (it holds a few short lines).
META_MAX_BYTES = 1 << 20
#: study.json's key for a storage kept in the study folder: the file's name in it.
STORAGE_FILE = "storage_file"


def meta_record(study_dir: Path, name: str, url: str, **rest: Any) -> dict[str, Any]:
    """What study.json holds: the study's name, its storage URL and the rest given. A storage
    that is an SQLite file in the study folder is also named by its file name alone
    (`storage_file`), so that the folder is self-contained: moved or copied, it is read from
    its own file (`read_meta`); `storage` keeps the URL for older readers."""
    own = _sqlite_path(url)
    inside = own is not None and own.parent.resolve() == study_dir.resolve()
    # Always written (null: the storage is elsewhere), so that a reader knows the record is
    # of this format and never guesses (`_own_storage`).
    data = {"name": name, "storage": url, STORAGE_FILE: own.name if own and inside else None}
    return {**data, **rest}


def read_meta(study_dir: Path) -> dict[str, Any]:
    """STUDY_DIR/study.json: the study's name and the addresses of its stores. A StudyError
    naming the file when it cannot be read (not a regular file, or larger than
    `META_MAX_BYTES`), is not JSON, or lacks the study's name or storage.

    A storage in the study folder (`storage_file`, or, in a study.json written before that was
    kept, an `optuna.db` of another folder while this folder has one) is read from the folder
    `study_dir` is: a moved folder still reads, a copied one reads its own database."""
    path = study_json(study_dir)
    rewrite = "run the study's `autotune study` command again to rewrite it"
    if orphaned(study_dir):
        raise StudyError(
            f"{path}: missing: the folder holds a study's storage ({optuna_db(study_dir).name}) "
            "but not its record of the study's name and stores (or its driver is starting "
            f"now); {rewrite} (or add --resume), or read it with `--storage "
            f"sqlite:///{optuna_db(study_dir).resolve()}` and the study's name"
        )
    try:
        data = json.loads(_read_small(path))
    except OSError as e:
        raise StudyError(f"{path}: cannot read it: {e.strerror or e}") from None
    except ValueError as e:
        raise StudyError(f"{path}: not valid JSON ({e}); {rewrite}") from None
    if not isinstance(data, dict):
        raise StudyError(f"{path}: not a study record (a JSON object); {rewrite}")
    for key in ("name", "storage"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise StudyError(f"{path}: no {key!r} in it; {rewrite}")
    own = _own_storage(study_dir, data)
    if own is not None:
        data["storage"] = f"sqlite:///{own}"
    return data


def orphaned(study_dir: Path) -> bool:
    """A study folder whose study.json is gone (deleted, or a driver killed before it wrote
    it) while its own storage is there."""
    path = study_json(study_dir)
    return not (path.exists() or path.is_symlink()) and optuna_db(study_dir).is_file()


def _read_small(path: Path) -> str:
    """The text of the regular file `path` (a link to one is followed), at most
    `META_MAX_BYTES`; OSError naming why not (a device, a FIFO or a folder is not read: a
    link to /dev/zero would never end)."""
    import errno
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a device, FIFO or socket"
            raise OSError(errno.EINVAL, f"not a regular file ({kind})")
        raw = os.read(fd, META_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > META_MAX_BYTES:
        raise OSError(errno.EFBIG, f"larger than {META_MAX_BYTES // 1024} KiB")
    return raw.decode("utf-8")


def _own_storage(study_dir: Path, data: dict[str, Any]) -> Path | None:
    """The SQLite file in `study_dir` that holds the study's storage, when study.json says it
    is the folder's own (None: the storage is elsewhere, and its URL is used as written)."""
    if STORAGE_FILE in data:
        own = data[STORAGE_FILE]
        if isinstance(own, str) and own and Path(own).name == own and own not in (".", ".."):
            return (study_dir / own).resolve()
        return None
    written = _sqlite_path(data["storage"])
    if written is None or written.name != optuna_db(study_dir).name:
        return None
    here = optuna_db(study_dir).resolve()
    if written.parent.resolve() == here.parent:
        return here
    # Written before `storage_file` was kept: an optuna.db of another folder, while this
    # folder has its own (a study folder only ever holds its own default storage), is this
    # folder moved or copied.
    return here if here.is_file() else None


def _sqlite_path(url: str) -> Path | None:
    """The absolute file of an `sqlite:///` URL (None for another URL, or a relative path:
    it was not written by `storage_url`)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return None
    path = Path(url[len(prefix) :])
    return path if path.is_absolute() else None


def tracking_uri(given: str | None, study_dir: Path, name: str) -> tuple[str, str | None]:
    """The MLflow store (resolved) of study `name` in `study_dir`, and a line saying where it
    came from (None when there is nothing to say).

    One study, one store: a study continued (its study.json names the store it logs to) logs
    there again. Without `given` (--tracking-uri) that store is used before $MLFLOW_TRACKING_URI
    and the default (a re-run from another folder, or with the variable unset, moved a study to
    a new ./mlflow.db, logging every trial again there); a `given` store that is not that one is
    refused (StudyError), as a --storage that is not the study's is. A new study (no
    study.json, or one of another study or without a store): `given`, else
    $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in this folder (`resolve_uri`)."""
    from autotune.tracking.connection import resolve_uri
    from autotune.tracking.redaction import redact

    chosen = resolve_uri(given)
    recorded = _recorded_tracking_uri(study_dir, name)
    if recorded is None or _same_store(recorded, chosen):
        return chosen, None
    path = study_json(study_dir)
    if (given or "").strip():
        raise StudyError(
            f"{path} says study '{name}' logs to the MLflow store {redact(recorded)}, not "
            f"--tracking-uri {redact(chosen)}: a study keeps one store; drop --tracking-uri to "
            "continue it there"
        )
    source = "$MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI", "").strip() else ""
    return recorded, (
        f"MLflow: logging to the study's store {redact(recorded)}, as {path} records (not to "
        f"{source or 'the default'} {redact(chosen)}: a study keeps one store)"
    )


def _recorded_tracking_uri(study_dir: Path, name: str) -> str | None:
    """The store study.json records for study `name`; None when there is no readable record of
    it (an unreadable study.json is named by the checks that need it)."""
    if not study_json(study_dir).is_file():
        return None
    try:
        meta = read_meta(study_dir)
    except StudyError:
        return None
    uri = meta.get("tracking_uri")
    if meta.get("name") != name or not isinstance(uri, str) or not uri.strip():
        return None
    return uri


def _same_store(a: str, b: str) -> bool:
    """The same MLflow store: resolved (an SQLite file by its absolute path), a database's or a
    server's URI without its password (study.json keeps it; the user may give it to libpq)."""
    from autotune.tracking.connection import resolve_uri
    from autotune.tracking.redaction import without_password

    def key(uri: str) -> str:
        return without_password(resolve_uri(uri)).rstrip("/")

    return key(a) == key(b)
