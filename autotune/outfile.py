"""The one way a command writes a file at a path the user gave (`export -o`, `compare -o`, ...).

Atomically (a temporary file beside it, renamed over it), so a failure leaves the old file or
none, never half of one. A temporary file and a rename replace whatever is at the path, so the
path is checked first: a symlink is followed and the file it points to is replaced (the link
stays); anything else that is not a regular file (a device such as /dev/null, a FIFO, a
socket, a folder) is refused, naming what it is, and nothing is written. So is a file a study
keeps (`kept`): an SQLite database (a study's Optuna storage, an MLflow store: `export -o
autotune-studies/NAME/optuna.db` replaced the storage it had just read) or a study folder's
own file (its study.json, its lock, a record in a folder of it such as trials/).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from autotune.errors import UsageError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def kind(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def special(path: str | Path) -> str | None:
    """What is at `path` (a link followed) when it is there and is not a regular file; None
    when it is one or cannot be looked at (a reader then names the file missing). A reader
    asks before it opens: a FIFO would block it forever."""
    try:
        return kind(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


def not_regular(path: str | Path, flag: str) -> UsageError | None:
    """The error for `path` (given as `flag PATH`) when it is there, the link followed, and is
    not a regular file; None when it is one or is not there."""
    what = special(path)
    if what is None:
        return None
    return UsageError(f"{flag} {path}: not a regular file ({what}); give a file path")


#: The first 16 bytes of every SQLite database file.
_SQLITE = b"SQLite format 3\x00"
#: The file that marks a study's folder (`study.folder`); its records lie in the folders below
#: it, its own files beside it (a recipe exported into the folder may be exported over).
_STUDY_MARK = "study.json"
_STUDY_OWN = (_STUDY_MARK, "driver.lock")


def kept(dest: Path) -> str | None:
    """What `dest` is when it is a file a study keeps, which no output replaces: an SQLite
    database, or a study folder's own file (its study.json, its lock, a record in a folder of
    it); None otherwise, and when it is not there."""
    if not dest.is_file():
        return None
    try:
        with dest.open("rb") as f:
            head = f.read(len(_SQLITE))
    except OSError:
        head = b""
    if head == _SQLITE:
        return "an SQLite database (a study's storage or an MLflow store)"
    if dest.name in _STUDY_OWN and (dest.parent / _STUDY_MARK).is_file():
        return f"a file of the study folder {dest.parent}"
    if (dest.parent.parent / _STUDY_MARK).is_file():  # its records: trials/, verify/, ...
        return f"a file of the study folder {dest.parent.parent}"
    return None


def _refuse_kept(path: str | Path, flag: str) -> None:
    what = kept(_followed(path))
    if what is not None:
        raise UsageError(f"{flag} {path}: is {what}: not replaced; give another path")


def target(path: str | Path, flag: str) -> Path:
    """The file a write to `path` replaces: `path` itself, or the file a symlink at it points
    to (made when the link dangles). A UsageError when it is there and not a regular file, or
    is a file a study keeps (`kept`): what a command checks before it does any work."""
    error = not_regular(path, flag)
    if error is not None:
        raise error
    _refuse_kept(path, flag)
    return _followed(path)


def no_folder(dest: Path) -> str | None:
    """Why `dest` cannot be written for want of its folder: the folder does not exist, or a
    file stands where it (or a folder above it) should be (`-o r.yaml/x` with r.yaml a file: no
    "does not exist" for a path that does); None when the folder is there."""
    if dest.parent.is_dir():
        return None
    for above in dest.parents:  # the nearest that exists and is no folder
        if above.exists() or above.is_symlink():
            if not above.is_dir():
                return f"{above} is a file, not a folder"
            break
    return f"folder {dest.parent} does not exist"


def _followed(path: str | Path) -> Path:
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def write(path: str | Path, data: str | bytes, flag: str) -> Path:
    """`data` to `path` atomically (see the module docstring); returns the file written. A
    UsageError for what the rename would replace though it is no regular file (a device, a
    FIFO, a socket) or is a file a study keeps (`kept`); an OSError when it cannot be written,
    a folder there included (no temporary file is left behind)."""
    error = not_regular(path, flag)
    if error is not None and special(path) != "a folder":  # a rename over a folder fails
        raise error
    _refuse_kept(path, flag)
    dest = _followed(path)
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        with contextlib.suppress(OSError):  # keep the mode of the file it replaces
            os.chmod(tmp, stat.S_IMODE(os.stat(dest).st_mode))
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return dest
