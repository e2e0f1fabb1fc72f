"""The study folder: where each of its files lives, and the one atomic JSON write and read.

    STUDY_DIR/study.json                      where the stores are (`find_study` reads it)
    STUDY_DIR/optuna.db                       the SQLite storage (unless --storage)
    STUDY_DIR/driver.lock                     held by the driver while it runs
    STUDY_DIR/trials/NNNN.json                a trial's record (`records`)
    STUDY_DIR/trials/NNNN-rK.json             its record at rung K (`rung_phase`)
    STUDY_DIR/verify/NNNN-sSTEPS-seedS.json   one seed of a verification (`verification`)
    STUDY_DIR/state/NNNN-sSTEPS.pt            a promoted probe's state (`states`)
    STUDY_DIR/ray/, STUDY_DIR/tune/           Ray's files and Ray Tune's

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


def tune_dir(study_dir: Path) -> Path:
    return study_dir / "tune"


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


def write_json(path: Path, data: Any, indent: int | None = None) -> None:
    """`data` as JSON at `path`, atomically (anything JSON cannot hold is written as its str);
    the folder is made when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, default=str, indent=indent)
    write_text(path, text, path.with_name(f"{path.name}.tmp"))


def write_text(path: Path, text: str, tmp: Path) -> None:
    """`text` to `path` through the temporary file `tmp` and a rename: the file whole or not
    at all, and no temporary left behind when it cannot be written (the error is raised)."""
    try:
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


def read_meta(study_dir: Path) -> dict[str, Any]:
    """STUDY_DIR/study.json: the study's name and the addresses of its stores. A StudyError
    naming the file when it cannot be read, is not JSON, or lacks the study's name or storage."""
    path = study_json(study_dir)
    rewrite = "run the study's `autotune study` command again to rewrite it"
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise StudyError(f"{path}: cannot read it: {e.strerror or e}") from None
    except ValueError as e:
        raise StudyError(f"{path}: not valid JSON ({e}); {rewrite}") from None
    if not isinstance(data, dict):
        raise StudyError(f"{path}: not a study record (a JSON object); {rewrite}")
    for key in ("name", "storage"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise StudyError(f"{path}: no {key!r} in it; {rewrite}")
    return data
