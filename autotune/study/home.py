"""Where a study lives: the folder whose trial records, rung states and MLflow store hold its
results (`autotune.home` in the Optuna storage: the host and the folder that created it).

A shared `--storage` lets the study be reached from any machine, but its files are in one
folder. A driver started from another folder (another node, or another directory on this one)
would split them: its trial records and MLflow runs in its own folder, promoted probes without
their states, a resumed MLflow run it cannot find, and, with the first driver still running, a
second driver re-running the first one's trials as "interrupted" and running a budget of its
own. So a study is continued only from its home: the same folder on this machine, or the same
path on a shared filesystem (another host whose study folder at that path is the study's).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from autotune.errors import StudyError
from autotune.study import attrs as ua
from autotune.study import folder
from autotune.study.options import named_folder


def here(study_dir: Path) -> dict[str, str]:
    """This driver's home for the study: its host and its study folder (resolved)."""
    return {"host": socket.gethostname(), "folder": str(study_dir.resolve())}


def claim(study: Any, study_dir: Path) -> None:
    """Record the study's home when it has none (a new study, or one made before homes were
    recorded: its folder becomes this one)."""
    if not isinstance(study.user_attrs.get(ua.HOME), dict):
        study.set_user_attr(ua.HOME, here(study_dir))


def check(study: Any, study_dir: Path, name: str, where: str) -> None:
    """A StudyError when study `name` (in the storage `where`) lives in another folder than
    `study_dir`: on this host another path, or on another host a path whose folder here is not
    the study's (no study.json at that path: not a shared filesystem)."""
    home = study.user_attrs.get(ua.HOME)
    if not isinstance(home, dict) or not home.get("folder"):
        return
    mine = here(study_dir)
    folder, host = str(home["folder"]), str(home.get("host") or "")
    if folder == mine["folder"] and host == mine["host"]:
        _refuse_gone(study, study_dir, name, where)
        return
    if folder == mine["folder"] and (study_dir / "study.json").exists():
        return
    raise StudyError(
        f"study '{name}' in {where} lives in {host or 'another host'}:{folder} (its trial "
        "records, rung states and MLflow runs are there), not in this folder "
        f"({mine['host']}:{mine['folder']}); continue it from there (the same command, or "
        f"--study-dir {folder} on {host or 'that host'}), or start another study here with "
        f"--set name={name}-2. Two drivers of one study would split its records"
    )


def _refuse_gone(study: Any, study_dir: Path, name: str, where: str) -> None:
    """A StudyError when the study's home is this folder but the folder is gone (no study.json)
    while trials of it ran: its trial records, rung states and verification went with it, and
    a driver continuing it would count them as nothing (a compute figure of the screen alone,
    written over the MLflow run's right one). A study made but stopped before its first trial
    started (before study.json is written) has lost nothing and goes on."""
    if (study_dir / "study.json").exists():
        return
    started = [t for t in study.get_trials(deepcopy=False) if t.state.name != "WAITING"]
    if not started:
        return
    raise StudyError(
        f"study '{name}' in {where} lives in {study_dir}, which is gone (no study.json: its "
        f"{len(started)} trial(s)' records, rung states and verification were there); "
        f"continuing it would count them as nothing. Restore the folder to continue it, or "
        f"give the new study another name (--set name={name}-2)"
    )


def refuse_overwrite(study_dir: Path, name: str, where: str) -> None:
    """A StudyError when a new study `name` would start in a folder that holds an earlier
    one's trial records while the storage `where` has no such study (its optuna.db deleted or
    replaced): the new trials would overwrite the old records one by one, without a word."""
    records = sorted((study_dir / "trials").glob("*.json")) if study_dir.is_dir() else []
    if not records:
        return
    other = (folder.read_json(folder.study_json(study_dir)) or {}).get("name")
    if isinstance(other, str) and other != name:  # another study's folder, given as --study-dir
        raise StudyError(
            f"{study_dir} is the folder of study '{other}' ({len(records)} trial record(s)); a "
            f"new study '{name}' there would overwrite them: give it a folder of its own "
            f"(--study-dir), or continue '{other}' with its own space"
        )
    # renamed, a study gets a folder of its own only where its name makes the folder
    afresh = (
        f"--set name={name}-2" if named_folder(study_dir, name) else "give it another --study-dir"
    )
    raise StudyError(
        f"{study_dir} holds {len(records)} trial record(s) of an earlier study, while {where} "
        f"has no study '{name}' (its storage deleted or replaced); a new study here would "
        f"overwrite them. Restore the storage to continue it, or remove the folder (or "
        f"{afresh}) to start afresh"
    )
