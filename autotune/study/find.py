"""An existing study, found by its folder, its name under ./autotune-studies, or in a storage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune import space as sp
from autotune.errors import StudyError
from autotune.study import attrs as ua
from autotune.study import folder
from autotune.study.listing import has_meta, home_folder, offer, open_existing
from autotune.study.options import STUDIES_DIR, study_dir_for
from autotune.study.records import planned_at_least_ran
from autotune.tracking.connection import redact


def find_study(ref: str, storage: str | None = None) -> tuple[Any, sp.Space, Path | None, dict]:
    """An existing study by folder, name under ./autotune-studies, or name in --storage."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = Path(ref)
    meta: dict[str, Any] = {}
    study_dir: Path | None = None
    for candidate in (path, study_dir_for(ref)):
        # A study.json of any kind makes it a study folder: one that cannot be read (a link to
        # a device, a FIFO, a folder, a link to nothing) is named with why (`read_meta`), as
        # `autotune studies` lists it, not taken for no study.
        if has_meta(candidate):
            study_dir = candidate.resolve()
            # one that lost its study.json is read from the --storage its message names
            meta = {} if storage and folder.orphaned(candidate) else folder.read_meta(candidate)
            break
    url = storage or meta.get("storage")
    if url is None:
        where = _not_found(path)
        raise StudyError(f"no study '{ref}': {where}, and no --storage given{offer(ref)}")
    name = meta.get("name", ref)
    st = open_existing(url)  # never a new database where the study's should be
    try:
        study = optuna.load_study(study_name=name, storage=st)
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(st)]
        where = redact(url)
        raise StudyError(f"no study '{name}' in {where}{offer(name, known, 'there')}") from None
    space = sp.loads(study.user_attrs[ua.SPACE_YAML], source=f"study {name}", stored=True)
    if study_dir is None:  # named in a storage: its home folder, when this machine sees it
        study_dir, meta = home_folder(study, name, url) or (None, meta)
    meta.setdefault("storage", url)
    return study, planned_at_least_ran(study, space), study_dir, meta


def _not_found(path: Path) -> str:
    """Where a study reference was looked for: a path (absolute, or with a folder in it) only
    as given (./autotune-studies//abs/path named a folder never looked at), a name also under
    ./autotune-studies."""
    if path.is_absolute() or len(path.parts) > 1:
        return "not a study folder" if path.exists() else "no such folder"
    return f"not a study folder, no ./{STUDIES_DIR}/{path}"
